// A running server stand-in for `lockscope attach` (tests/test_attach.py):
// THREADS threads (argv[1], default 4) take one global pthread mutex,
// `hot_lock`, in a loop, with a little work inside and outside it, so they
// contend on it. The main thread prints the operations done so far every
// 100 ms ("count N"), so a test sees it keep working, and a line "signal N"
// for any signal it receives (none should come from lockscope). With
// argv[2] = S it exits by itself after S seconds (a target that exits
// during the window); without it, it runs until stdin is closed.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t hot_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long counter;
static volatile sig_atomic_t got_signal;

static void spin(int n)
{
	for (volatile int i = 0; i < n; i++)
		;
}

__attribute__((noinline)) static void deposit(void)
{
	pthread_mutex_lock(&hot_lock);
	counter++;
	spin(2000);
	pthread_mutex_unlock(&hot_lock);
}

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		deposit();
		spin(200);
	}
	return NULL;
}

static void on_signal(int sig)
{
	got_signal = sig;
}

static void *stdin_closed(void *arg)
{
	char buf[64];

	(void)arg;
	while (read(0, buf, sizeof(buf)) > 0)
		;
	exit(0);
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	double exit_after = argc > 2 ? atof(argv[2]) : 0;
	struct timespec t0, now;
	pthread_t t;

	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP && s != SIGINT && s != SIGTERM && s != SIGPIPE)
			signal(s, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	for (int i = 0; i < threads; i++)
		pthread_create(&t, NULL, worker, NULL);
	if (!exit_after)
		pthread_create(&t, NULL, stdin_closed, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	printf("ready %d\n", getpid());
	fflush(stdout);
	for (;;) {
		usleep(100000);
		if (got_signal) {
			printf("signal %d\n", (int)got_signal);
			got_signal = 0;
		}
		printf("count %lu\n", counter);
		fflush(stdout);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (exit_after && (now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 >= exit_after)
			return 0;
	}
}
