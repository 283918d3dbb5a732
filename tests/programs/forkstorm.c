/* A fork/exit storm for lockscope's tests (issue 29): N worker processes,
 * each vfork()s a child that exits at once and waits for it, over and
 * over. Every child is a new task and a new wake-up edge (the child's exit
 * wakes its parent), thousands a second: what per-task maps must survive.
 *
 *   forkstorm N SECONDS     prints "ops/s: X" (children per second) at the end
 */
#define _GNU_SOURCE
#include "workers.h"

static unsigned long storm(int index, double deadline, void *arg)
{
	unsigned long ops = 0;

	while (now() < deadline) {
		pid_t child = vfork();

		if (child == 0)
			_exit(0);
		if (child < 0 || waitpid(child, NULL, 0) != child)
			_exit(2);
		ops++;
	}
	return ops;
}

int main(int argc, char **argv)
{
	int n;
	double seconds;

	if (!workers_args(argc, argv, "forkstorm", &n, &seconds))
		return 2;
	return run_workers(n, seconds, storm, NULL);
}
