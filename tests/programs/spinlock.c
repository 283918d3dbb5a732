/* Threads on one glibc spinlock, for lockscope's tests (issue 28): N threads
 * each take one pthread_spinlock_t in transfer(), count under it, and work a
 * little outside it. A spinlock never sleeps: no futex wait names it, only
 * CPU samples of its spinning. The program's own clock: the share of its
 * threads' time spent in pthread_spin_lock, by the time-stamp counter (a few
 * ns to read; clock_gettime around every lock took a fifth of the CPU and
 * skewed what it measured), "spin share: F" (of N x its run), the truth
 * lockscope is checked against.
 *
 *   spinlock N SECONDS     prints "ops/s: X" and "spin share: F" at the end
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#define MAX_THREADS 64

static pthread_spinlock_t lock;
static double deadline;
static volatile unsigned long counter;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct result {
	unsigned long ops;
	unsigned long long spin_cycles;
};

/* the lock's caller: lockscope names the lock after it */
__attribute__((noinline)) static unsigned long long transfer(void)
{
	unsigned long long t0 = __rdtsc(), waited;

	pthread_spin_lock(&lock);
	waited = __rdtsc() - t0;
	for (int i = 0; i < 200; i++)
		counter++;
	pthread_spin_unlock(&lock);
	return waited;
}

static void *work(void *arg)
{
	struct result *r = arg;

	while (now() < deadline) {
		for (int k = 0; k < 64; k++) {          /* the clock read once in 64 operations */
			r->spin_cycles += transfer();
			r->ops++;
			for (volatile int i = 0; i < 200; i++)
				;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct result res[MAX_THREADS] = {0};
	pthread_t threads[MAX_THREADS];
	unsigned long long c0, spin = 0;
	unsigned long ops = 0;
	double start;
	int n;

	if (argc != 3 || (n = atoi(argv[1])) < 1 || n > MAX_THREADS || atof(argv[2]) <= 0) {
		fprintf(stderr, "usage: spinlock N SECONDS (N at most %d)\n", MAX_THREADS);
		return 2;
	}
	pthread_spin_init(&lock, PTHREAD_PROCESS_PRIVATE);
	start = now();
	c0 = __rdtsc();
	deadline = start + atof(argv[2]);
	for (int i = 0; i < n; i++)
		if (pthread_create(&threads[i], NULL, work, &res[i])) {
			perror("spinlock: pthread_create");
			return 2;
		}
	for (int i = 0; i < n; i++) {
		pthread_join(threads[i], NULL);
		ops += res[i].ops;
		spin += res[i].spin_cycles;
	}
	printf("ops/s: %.1f\nspin share: %.4f\n", ops / (now() - start), (double)spin / n / (__rdtsc() - c0));
	return 0;
}
