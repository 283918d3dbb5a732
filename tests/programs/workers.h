/* The frame of lockscope's multi-process test programs (forkstorm, netdev,
 * mqueue, sysvsem): N worker processes run until a deadline, each sends its
 * count of operations through a pipe, and the parent prints "ops/s: X". */
#ifndef LOCKSCOPE_TEST_WORKERS_H
#define LOCKSCOPE_TEST_WORKERS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* N and SECONDS from the command line; false (and the usage) if bad */
static bool workers_args(int argc, char **argv, const char *name, int *n, double *seconds)
{
	if (argc == 3 && (*n = atoi(argv[1])) >= 1 && (*seconds = atof(argv[2])) > 0)
		return true;
	fprintf(stderr, "usage: %s N SECONDS\n", name);
	return false;
}

/* fork n workers, each running work(index, deadline, arg) and sending its
 * count; 0 once all exited 0 (and "ops/s: X" printed), else 1 */
static int run_workers(int n, double seconds, unsigned long (*work)(int, double, void *), void *arg)
{
	double start = now(), deadline = start + seconds;
	unsigned long total = 0, ops;
	int fds[2], failed = 0;

	if (pipe(fds))
		return 1;
	for (int i = 0; i < n; i++) {
		if (fork() == 0) {
			close(fds[0]);
			ops = work(i, deadline, arg);
			_exit(write(fds[1], &ops, sizeof(ops)) == sizeof(ops) ? 0 : 2);
		}
	}
	close(fds[1]);
	while (read(fds[0], &ops, sizeof(ops)) == sizeof(ops))
		total += ops;
	for (int i = 0; i < n; i++) {
		int st;

		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			failed = 1;
	}
	if (!failed)
		printf("ops/s: %.1f\n", total / (now() - start));
	return failed;
}

#endif
