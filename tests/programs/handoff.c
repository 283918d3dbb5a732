/* A small threaded program for the per-thread probe (tests/test_tasks.py):
 * N workers named "worker" compute for SECONDS, mostly outside a global
 * pthread mutex and a little inside it, so that the mutex is contended now
 * and then (the unlocking worker wakes the waiting one); the main thread
 * only creates and joins them, and sleeps in pthread_join meanwhile.
 *
 *     cc -O2 -g -fno-omit-frame-pointer -pthread -o handoff handoff.c
 *     ./handoff N SECONDS
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define INSIDE_NS   2000     /* computed holding the lock */
#define OUTSIDE_NS 10000     /* computed without it */

pthread_mutex_t contended_lock = PTHREAD_MUTEX_INITIALIZER;
static double seconds;

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void compute(long long ns)
{
	long long end = now_ns() + ns;

	while (now_ns() < end)
		;
}

static void *worker(void *arg)
{
	long long end = now_ns() + (long long)(seconds * 1e9);
	long *ops = arg;

	pthread_setname_np(pthread_self(), "worker");
	while (now_ns() < end) {
		compute(OUTSIDE_NS);
		pthread_mutex_lock(&contended_lock);
		compute(INSIDE_NS);
		pthread_mutex_unlock(&contended_lock);
		(*ops)++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2;
	pthread_t *threads;
	long *ops, total = 0;

	seconds = argc > 2 ? atof(argv[2]) : 1.0;
	if (n < 1 || n > 256 || seconds <= 0) {
		fprintf(stderr, "usage: handoff N SECONDS\n");
		return 2;
	}
	threads = calloc(n, sizeof(*threads));
	ops = calloc(n, sizeof(*ops));
	if (!threads || !ops)
		return 1;
	for (int i = 0; i < n; i++)
		if (pthread_create(&threads[i], NULL, worker, &ops[i]))
			return 1;
	for (int i = 0; i < n; i++) {
		pthread_join(threads[i], NULL);
		total += ops[i];
	}
	printf("%ld ops\n", total);
	return 0;
}
