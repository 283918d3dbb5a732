/* A mutex program with its own clock, for `lockscope confirm`.
 *
 *   confirm THREADS HOLD_US WORK_US SECONDS [CLOCK_FILE]
 *
 * Each thread loops: lock one global pthread mutex, spin HOLD_US, unlock;
 * spin WORK_US outside it. Every 0.1 s it prints "ops: N" (operations so
 * far, one lock acquisition each) and, with CLOCK_FILE, appends
 * "T_NS OPS HOLD_NS" (CLOCK_MONOTONIC, operations, and the time the lock
 * was held in total, measured from the return of pthread_mutex_lock to the
 * return of pthread_mutex_unlock: a wait added before the release counts).
 *
 * The spins and the held time are the thread's own CPU time
 * (CLOCK_THREAD_CPUTIME_ID): a fixed amount of work per operation, and a
 * held time that a busy wait added inside adds to (it runs on the thread's
 * CPU) while a preemption of the holder by another program does not (on a
 * busy machine a wall clock counted the hog's turns on the CPU as holding).
 *
 * CONFIRM_LOCK=rwlock in the environment: a pthread rwlock taken for writing
 * instead of the mutex.
 *
 * With THREADS x HOLD > HOLD + WORK the mutex limits throughput (a serial
 * resource: confirmed); with more threads than CPUs and HOLD much shorter
 * than WORK the CPUs do, and the mutex is waited on because its holders get
 * preempted (lock-holder preemption: not confirmed).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;
static int use_rwlock;
static atomic_ulong ops, held_ns;
static long hold_ns, work_ns;

static long clock_ns(clockid_t clock)
{
	struct timespec t;

	clock_gettime(clock, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

static long now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

static long cpu_ns(void)
{
	return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

/* ns of this thread's CPU time */
static void spin(long ns)
{
	long end = cpu_ns() + ns;

	while (cpu_ns() < end)
		;
}

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		long t0;

		if (use_rwlock)
			pthread_rwlock_wrlock(&rwlock);
		else
			pthread_mutex_lock(&lock);
		t0 = cpu_ns();
		spin(hold_ns);
		if (use_rwlock)
			pthread_rwlock_unlock(&rwlock);
		else
			pthread_mutex_unlock(&lock);
		atomic_fetch_add(&held_ns, cpu_ns() - t0);
		atomic_fetch_add(&ops, 1);
		spin(work_ns);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	FILE *clk = NULL;
	long end;
	int n;

	if (argc < 5) {
		fprintf(stderr, "usage: %s THREADS HOLD_US WORK_US SECONDS [CLOCK_FILE]\n", argv[0]);
		return 2;
	}
	n = atoi(argv[1]);
	use_rwlock = getenv("CONFIRM_LOCK") && strcmp(getenv("CONFIRM_LOCK"), "rwlock") == 0;
	hold_ns = atol(argv[2]) * 1000;
	work_ns = atol(argv[3]) * 1000;
	end = now_ns() + atol(argv[4]) * 1000000000L;
	if (argc > 5 && !(clk = fopen(argv[5], "w"))) {
		perror(argv[5]);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		pthread_t t;

		pthread_create(&t, NULL, worker, NULL);
	}
	while (now_ns() < end) {
		struct timespec tick = { 0, 100000000 };

		nanosleep(&tick, NULL);
		printf("ops: %lu\n", atomic_load(&ops));
		fflush(stdout);
		if (clk) {
			fprintf(clk, "%ld %lu %lu\n", now_ns(), atomic_load(&ops), atomic_load(&held_ns));
			fflush(clk);
		}
	}
	printf("ops/s: %.1f\n", atomic_load(&ops) / (double)atol(argv[4]));
	return 0;
}
