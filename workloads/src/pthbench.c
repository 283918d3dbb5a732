#include "pthbench.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

/* Work inside the critical section: a few hundred ns of arithmetic on the
 * data the lock protects. */
#define CS_STEPS 256
#define DATA_WORDS 8

struct guarded {
	pthread_mutex_t lock;
	uint64_t data[DATA_WORDS];
};

/* The known culprit: one static mutex every thread takes (a global object of
 * this binary, so lockscope can name it by its ELF symbol). */
static pthread_mutex_t pmutex_global_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t pmutex_global_data[DATA_WORDS];

static inline void critical_work(uint64_t *data, uint64_t seed)
{
	uint64_t x = seed;

	for (int i = 0; i < CS_STEPS; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		data[i & (DATA_WORDS - 1)] += x >> 33;
	}
}

static void lock_loop(struct ls_ctx *c, pthread_mutex_t *m, uint64_t *data)
{
	uint64_t n = 0;
	int rc;

	while (!ls_stopped(c)) {
		if ((rc = pthread_mutex_lock(m)) != 0)
			ls_fail(c, "pthread_mutex_lock", NULL, NULL, rc, NULL);
		critical_work(data, n);
		if ((rc = pthread_mutex_unlock(m)) != 0)
			ls_fail(c, "pthread_mutex_unlock", NULL, NULL, rc, NULL);
		ls_count(c, ++n);
	}
}

void pth_pmutex_run(struct ls_ctx *c)
{
	lock_loop(c, &pmutex_global_lock, pmutex_global_data);
}

void pth_pmutexl_setup(struct ls_ctx *c)
{
	/* its own cache lines, so that threads share nothing */
	size_t size = (sizeof(struct guarded) + LS_CACHELINE - 1) / LS_CACHELINE * LS_CACHELINE;
	struct guarded *g = aligned_alloc(LS_CACHELINE, size);
	int rc;

	if (!g)
		ls_fail(c, "aligned_alloc", NULL, NULL, ENOMEM, NULL);
	if ((rc = pthread_mutex_init(&g->lock, NULL)) != 0)
		ls_fail(c, "pthread_mutex_init", NULL, NULL, rc, NULL);
	for (int i = 0; i < DATA_WORDS; i++)
		g->data[i] = 0;
	c->buf = g;
}

void pth_pmutexl_run(struct ls_ctx *c)
{
	struct guarded *g = c->buf;

	lock_loop(c, &g->lock, g->data);
}
