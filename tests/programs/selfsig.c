/* Threads that signal each other, for lockscope's tests (issue 29): N
 * threads each send SIGUSR1 to the next one (pthread_kill), over and over;
 * the handler counts. Sending and delivering a signal both take the
 * process's sighand->siglock: one spinlock all threads share. With more
 * threads than CPUs, about (N - CPUs) / N of their time is spent runnable,
 * waiting for a CPU (time-sharing), which no lock causes.
 *
 *   selfsig N SECONDS     prints "ops/s: X" (signals sent) at the end
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_THREADS 256

static int nthreads;
static double deadline;
static pthread_t threads[MAX_THREADS];
static atomic_ulong total;
static volatile sig_atomic_t received;
static pthread_barrier_t started;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_signal(int sig)
{
	received++;
}

static void *signal_next(void *arg)
{
	long i = (long)arg;
	unsigned long sent = 0;

	pthread_barrier_wait(&started);     /* every thread exists before any is signalled */
	while (now() < deadline) {
		pthread_kill(threads[(i + 1) % nthreads], SIGUSR1);
		sent++;
	}
	atomic_fetch_add(&total, sent);
	return NULL;
}

int main(int argc, char **argv)
{
	double start, seconds;

	if (argc != 3 || (nthreads = atoi(argv[1])) < 1 || nthreads > MAX_THREADS || (seconds = atof(argv[2])) <= 0) {
		fprintf(stderr, "usage: selfsig N SECONDS (N at most %d)\n", MAX_THREADS);
		return 2;
	}
	signal(SIGUSR1, on_signal);
	pthread_barrier_init(&started, NULL, nthreads);
	start = now();
	deadline = start + seconds;
	for (long i = 0; i < nthreads; i++)
		if (pthread_create(&threads[i], NULL, signal_next, (void *)i)) {
			perror("selfsig: pthread_create");
			return 2;
		}
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	printf("ops/s: %.1f\n", atomic_load(&total) / (now() - start));
	return 0;
}
