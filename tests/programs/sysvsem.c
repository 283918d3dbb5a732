/* Workers on one SysV semaphore, for lockscope's tests (issue 29): N
 * processes each raise semaphore 0 of one set and lower it again, over and
 * over, never blocking (each raises before it lowers). A simple operation
 * on one semaphore takes that semaphore's own spinlock, sem_array's
 * sems[0].lock: one lock all workers share, in an object of a generic
 * kmalloc cache (the set is kvmalloc'ed with its array), reached by no file.
 *
 *   sysvsem N SECONDS     prints "ops/s: X" (up+down pairs) at the end
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/ipc.h>
#include <sys/sem.h>
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
	int n, id, fds[2];
	double seconds, start, deadline;
	unsigned long total = 0, ops;

	if (argc != 3 || (n = atoi(argv[1])) < 1 || (seconds = atof(argv[2])) <= 0) {
		fprintf(stderr, "usage: sysvsem N SECONDS\n");
		return 2;
	}
	id = semget(IPC_PRIVATE, 4, IPC_CREAT | 0600);
	if (id < 0) {
		perror("sysvsem: semget");
		return 2;
	}
	if (pipe(fds))
		return 2;
	start = now();
	deadline = start + seconds;
	for (int i = 0; i < n; i++) {
		if (fork() == 0) {
			struct sembuf up = { 0, 1, 0 }, down = { 0, -1, 0 };

			close(fds[0]);
			ops = 0;
			while (now() < deadline) {
				if (semop(id, &up, 1) || semop(id, &down, 1))
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
	while (wait(NULL) > 0)
		;
	semctl(id, 0, IPC_RMID);
	printf("ops/s: %.1f\n", total / (now() - start));
	return 0;
}
