/* Threads on one glibc spinlock, for lockscope's tests (issue 28): N threads
 * each take one pthread_spinlock_t in transfer(), count under it, and work a
 * little outside it. A spinlock never sleeps: no futex wait names it, only
 * CPU samples of its spinning. The program's own clock: the share of its
 * threads' time spent in pthread_spin_lock, by the time-stamp counter (a few
 * ns to read; clock_gettime around every lock took a fifth of the CPU and
 * skewed what it measured), "spin share: F" (of N x its run), the truth
 * lockscope is checked against when the threads keep their CPUs. The TSC
 * counts a spin preempted by another task as spinning too; CPU samples (and
 * lockscope's) see only the time on a CPU. So the program also profiles
 * itself as lockscope does: a timer on each thread's own CPU clock
 * (timer_create CLOCK_THREAD_CPUTIME_ID, one signal per SAMPLE_NS of the
 * thread's CPU time) asks whether the thread is inside pthread_spin_lock,
 * "cpu spin share: F" (CPU time spinning, of N x its run) and "cpu samples:
 * K (spinning S)" (for the sampling error).
 *
 *   spinlock N SECONDS     prints "ops/s: X", "spin share: F", "cpu spin share: F"
 *                          and "cpu samples: K (spinning S)" at the end
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define MAX_THREADS 64
#define SAMPLE_NS 1000000     /* one self-sample per ms of a thread's CPU time */

static __thread volatile sig_atomic_t in_spin;
static __thread volatile unsigned long samples, spin_samples;
static __thread timer_t sampler;

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
	unsigned long samples, spin_samples;
};

/* one signal stands for 1 + its overruns periods (CPU timers fire at the tick) */
static void on_sample(int sig)
{
	int k = 1 + timer_getoverrun(sampler);

	(void)sig;
	samples += k;
	if (in_spin)
		spin_samples += k;
}

/* a timer on the calling thread's CPU clock, signalling that thread */
static void self_sampler(void)
{
	struct sigevent sev = {0};
	struct itimerspec its = {{0, SAMPLE_NS}, {0, SAMPLE_NS}};

	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = SIGPROF;
	sev._sigev_un._tid = syscall(SYS_gettid);
	if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &sampler) || timer_settime(sampler, 0, &its, NULL)) {
		perror("spinlock: timer_create");
		exit(2);
	}
}

/* the lock's caller: lockscope names the lock after it */
__attribute__((noinline)) static unsigned long long transfer(void)
{
	unsigned long long t0 = __rdtsc(), waited;

	in_spin = 1;
	pthread_spin_lock(&lock);
	in_spin = 0;
	waited = __rdtsc() - t0;
	for (int i = 0; i < 200; i++)
		counter++;
	pthread_spin_unlock(&lock);
	return waited;
}

static void *work(void *arg)
{
	struct result *r = arg;

	self_sampler();
	while (now() < deadline) {
		for (int k = 0; k < 64; k++) {          /* the clock read once in 64 operations */
			r->spin_cycles += transfer();
			r->ops++;
			for (volatile int i = 0; i < 200; i++)
				;
		}
	}
	timer_delete(sampler);
	r->samples = samples;
	r->spin_samples = spin_samples;
	return NULL;
}

int main(int argc, char **argv)
{
	struct result res[MAX_THREADS] = {0};
	pthread_t threads[MAX_THREADS];
	unsigned long long c0, spin = 0;
	unsigned long ops = 0, samples = 0, spin_samples = 0;
	double start, wall;
	int n;

	if (argc != 3 || (n = atoi(argv[1])) < 1 || n > MAX_THREADS || atof(argv[2]) <= 0) {
		fprintf(stderr, "usage: spinlock N SECONDS (N at most %d)\n", MAX_THREADS);
		return 2;
	}
	signal(SIGPROF, on_sample);
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
		samples += res[i].samples;
		spin_samples += res[i].spin_samples;
	}
	wall = now() - start;
	printf("ops/s: %.1f\nspin share: %.4f\ncpu spin share: %.4f\n"
	       "cpu samples: %lu (spinning %lu)\n", ops / wall, (double)spin / n / (__rdtsc() - c0),
	       spin_samples * (SAMPLE_NS / 1e9) / n / wall, samples, spin_samples);
	return 0;
}
