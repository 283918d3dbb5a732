/* A global pthread_rwlock_t, contended by writers and readers (issue 16):
 * N worker threads look entries up under the read lock and, one operation in
 * four, update one under the write lock; the main thread joins them.
 * lockscope must show one lock, named after table_lock, kind pthread_rwlock,
 * and not the join.
 *
 *     cc -O2 -g -pthread -o rwlock rwlock.c
 *     ./rwlock N [SECONDS]        runs until killed without SECONDS
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;   /* the contended lock */
static volatile unsigned long table[64];
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

__attribute__((noinline)) static unsigned long table_lookup(int key)
{
	unsigned long v;

	pthread_rwlock_rdlock(&table_lock);
	spin(300);
	v = table[key & 63];
	pthread_rwlock_unlock(&table_lock);
	return v;
}

__attribute__((noinline)) static void table_update(int key)
{
	pthread_rwlock_wrlock(&table_lock);
	spin(600);
	table[key & 63]++;
	pthread_rwlock_unlock(&table_lock);
}

static void *worker(void *arg)
{
	unsigned long ops = 0, sum = 0;
	char name[16];

	snprintf(name, sizeof(name), "worker-%ld", (long)arg);
	pthread_setname_np(pthread_self(), name);
	while (now() < deadline) {
		for (int i = 0; i < 256; i++) {
			if (i % 4 == 0)
				table_update(i);
			else
				sum += table_lookup(i);
			spin(300);      /* work outside the lock */
		}
		ops += 256;
	}
	return (void *)(ops + (sum & 0));
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2;
	double seconds = argc > 2 ? atof(argv[2]) : 1e9;
	pthread_t w[256];
	unsigned long total = 0;
	double start = now();

	if (n < 1 || n > 256 || seconds <= 0) {
		fprintf(stderr, "usage: rwlock N [SECONDS]\n");
		return 2;
	}
	deadline = start + seconds;
	for (long i = 0; i < n; i++)
		pthread_create(&w[i], NULL, worker, (void *)i);
	for (int i = 0; i < n; i++) {
		void *ops;

		pthread_join(w[i], &ops);
		total += (unsigned long)ops;
	}
	printf("ops/s: %.0f\n", total / (now() - start));
	return 0;
}
