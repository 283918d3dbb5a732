#include "worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define EXIT_WORKER_ERROR 3
#define THREAD_STACK (256 * 1024)

_Noreturn void ls_fail(struct ls_ctx *c, const char *op, const char *path,
		       const char *path2, int err, const char *msg)
{
	struct ls_wstate *ws = c->ws;

	if (!atomic_load(&ws->err_set)) {
		snprintf(ws->err_op, sizeof(ws->err_op), "%s", op);
		snprintf(ws->err_path, sizeof(ws->err_path), "%s", path ? path : "");
		snprintf(ws->err_path2, sizeof(ws->err_path2), "%s",
			 path2 ? path2 : "");
		snprintf(ws->err_msg, sizeof(ws->err_msg), "%s", msg ? msg : "");
		ws->err_errno = err;
		atomic_store_explicit(&ws->err_set, 1, memory_order_release);
	}
	_exit(EXIT_WORKER_ERROR); /* thread workers: takes the process down */
}

void ls_ran_out(struct ls_ctx *c)
{
	c->ws->ran_out_ns = ls_now_ns();
	atomic_store_explicit(&c->ws->ran_out, 1, memory_order_release);
	while (!atomic_load(c->stop))
		ls_futex_wait(c->stop, 0);
}

static void ctx_init(struct ls_ctx *c, const struct ls_worker_args *a, int idx)
{
	memset(c, 0, sizeof(*c));
	c->wl = a->wl;
	c->idx = idx;
	c->nworkers = a->nworkers;
	c->cpu = a->wcpu[idx];
	c->dir = a->dir;
	c->warmup_s = a->warmup_s;
	c->duration_s = a->duration_s;
	c->shm = a->shm;
	c->ops = &a->shm->counters[idx].ops;
	c->stop = &a->shm->stop;
	c->ws = &a->shm->ws[idx];
	c->lat = (struct ls_lat *)(a->shm->lat + (size_t)idx * a->shm->lat_stride);
	c->timing = a->shm->timing;
	c->param = a->param;
	c->fd = -1;
}

static void worker_body(struct ls_ctx *c, bool thread)
{
	struct ls_shm *shm = c->shm;
	struct ls_wstate *ws = c->ws;

	ws->pid = getpid();
	ws->tid = gettid();
	if (thread) {
		if (ls_pin_thread(pthread_self(), c->cpu) != 0)
			ls_fail(c, "pthread_setaffinity_np", NULL, NULL, errno, NULL);
	} else {
		if (ls_pin_process(c->cpu) != 0)
			ls_fail(c, "sched_setaffinity", NULL, NULL, errno, NULL);
	}

	uint64_t t0 = ls_now_ns();
	if (c->wl->worker_setup)
		c->wl->worker_setup(c);
	ws->setup_ns = ls_now_ns() - t0;

	/* Barrier: announce readiness, then sleep on the "go" futex. */
	atomic_fetch_add(&shm->nready, 1);
	kill(shm->driver_pid, SIGUSR1);
	while (!atomic_load(&shm->go))
		ls_futex_wait(&shm->go, 0);

	if (!atomic_load(&shm->stop)) {
		c->t_mark = ls_clock_ns(); /* the first op starts now */
		c->wl->worker_run(c);
	}
}

_Noreturn void ls_worker_process_main(const struct ls_worker_args *a, int idx)
{
	static struct ls_ctx ctx; /* ~8 KiB of paths: keep it off the stack */

	ctx_init(&ctx, a, idx);
	worker_body(&ctx, false);
	_exit(0);
}

static void *thread_main(void *arg)
{
	worker_body(arg, true);
	return NULL;
}

_Noreturn void ls_worker_threads_main(const struct ls_worker_args *a)
{
	pthread_t *th = ls_xcalloc((size_t)a->nworkers, sizeof(*th));
	struct ls_ctx *ctx = ls_xcalloc((size_t)a->nworkers, sizeof(*ctx));
	pthread_attr_t attr;

	/* Thousands of threads may each hold a file open. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* Small stacks: some workloads run thousands of threads. */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, THREAD_STACK);
	for (int i = 0; i < a->nworkers; i++) {
		ctx_init(&ctx[i], a, i);
		int rc = pthread_create(&th[i], &attr, thread_main, &ctx[i]);
		if (rc != 0)
			ls_fail(&ctx[i], "pthread_create", NULL, NULL, rc, NULL);
	}
	for (int i = 0; i < a->nworkers; i++)
		pthread_join(th[i], NULL);
	_exit(0);
}
