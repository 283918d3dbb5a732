/* The shape of a real threaded program, for lockscope's end-to-end tests:
 * the main thread starts N workers that take one global mutex for each
 * operation, two pool threads that wait on a condition variable for work
 * that only comes once a second, and joins the workers. Built without frame
 * pointers (gcc -O2), like Debian's programs.
 *
 *   pool N SECONDS     prints "ops/s: X" at the end
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t hot_lock = PTHREAD_MUTEX_INITIALIZER;   /* the contended lock */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static int queued, stopping;
static volatile unsigned long counter;
static double deadline;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void spin(int n)
{
	for (volatile int i = 0; i < n; i++)
		;
}

__attribute__((noinline)) static void account_update(void)
{
	pthread_mutex_lock(&hot_lock);
	spin(400);              /* the critical section */
	counter++;
	pthread_mutex_unlock(&hot_lock);
}

static void *worker(void *arg)
{
	unsigned long ops = 0;
	char name[16];

	snprintf(name, sizeof(name), "worker-%ld", (long)arg);
	pthread_setname_np(pthread_self(), name);
	while (now() < deadline) {
		for (int i = 0; i < 256; i++) {
			account_update();
			spin(400);      /* work outside the lock */
		}
		ops += 256;
	}
	return (void *)ops;
}

/* a background pool thread: waits for work, idle nearly all the time */
static void *pool_thread(void *arg)
{
	char name[16];

	snprintf(name, sizeof(name), "bg-%ld", (long)arg);
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&queue_lock);
	while (!stopping) {
		while (!queued && !stopping)
			pthread_cond_wait(&queue_cond, &queue_lock);
		if (queued) {
			queued--;
			pthread_mutex_unlock(&queue_lock);
			spin(100000);   /* the background job */
			pthread_mutex_lock(&queue_lock);
		}
	}
	pthread_mutex_unlock(&queue_lock);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2;
	double seconds = argc > 2 ? atof(argv[2]) : 3;
	pthread_t w[256], p[2];
	unsigned long total = 0;
	double start;

	if (n < 1 || n > 256 || seconds <= 0) {
		fprintf(stderr, "usage: pool N SECONDS\n");
		return 2;
	}
	start = now();
	deadline = start + seconds;
	for (long i = 0; i < 2; i++)
		pthread_create(&p[i], NULL, pool_thread, (void *)i);
	for (long i = 0; i < n; i++)
		pthread_create(&w[i], NULL, worker, (void *)i);
	/* hand the pool a job once a second, from a timed wait of the main
	 * thread; then join the workers */
	while (now() + 1 < deadline) {
		struct timespec ts = { 1, 0 };

		nanosleep(&ts, NULL);
		pthread_mutex_lock(&queue_lock);
		queued++;
		pthread_cond_signal(&queue_cond);
		pthread_mutex_unlock(&queue_lock);
	}
	for (int i = 0; i < n; i++) {
		void *ops;

		pthread_join(w[i], &ops);
		total += (unsigned long)ops;
	}
	pthread_mutex_lock(&queue_lock);
	stopping = 1;
	pthread_cond_broadcast(&queue_cond);
	pthread_mutex_unlock(&queue_lock);
	for (int i = 0; i < 2; i++)
		pthread_join(p[i], NULL);
	printf("ops/s: %.0f\n", total / (now() - start));
	return 0;
}
