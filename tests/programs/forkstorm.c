/* A fork/exit storm for lockscope's tests (issue 29): N worker processes,
 * each vfork()s a child that exits at once and waits for it, over and
 * over. Every child is a new task and a new wake-up edge (the child's exit
 * wakes its parent), thousands a second: what per-task maps must survive.
 *
 *   forkstorm N SECONDS     prints "ops/s: X" (children per second) at the end
 */
#define _GNU_SOURCE
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

int main(int argc, char **argv)
{
	int n, fds[2];
	double seconds, start, deadline;
	unsigned long total = 0, ops;

	if (argc != 3 || (n = atoi(argv[1])) < 1 || (seconds = atof(argv[2])) <= 0) {
		fprintf(stderr, "usage: forkstorm N SECONDS\n");
		return 2;
	}
	if (pipe(fds))
		return 2;
	start = now();
	deadline = start + seconds;
	for (int i = 0; i < n; i++) {
		if (fork() == 0) {
			close(fds[0]);
			ops = 0;
			while (now() < deadline) {
				pid_t child = vfork();

				if (child == 0)
					_exit(0);
				if (child < 0 || waitpid(child, NULL, 0) != child)
					_exit(2);
				ops++;
			}
			if (write(fds[1], &ops, sizeof(ops)) != sizeof(ops))
				_exit(2);
			_exit(0);
		}
	}
	close(fds[1]);
	while (read(fds[0], &ops, sizeof(ops)) == sizeof(ops))
		total += ops;
	for (int i = 0; i < n; i++) {
		int st;

		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			return 1;
	}
	printf("ops/s: %.1f\n", total / (now() - start));
	return 0;
}
