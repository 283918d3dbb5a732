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
#include <sys/ipc.h>
#include <sys/sem.h>
#include "workers.h"

static unsigned long up_down(int index, double deadline, void *arg)
{
	int id = *(int *)arg;
	struct sembuf up = { 0, 1, 0 }, down = { 0, -1, 0 };
	unsigned long ops = 0;

	while (now() < deadline) {
		if (semop(id, &up, 1) || semop(id, &down, 1))
			_exit(2);
		ops++;
	}
	return ops;
}

int main(int argc, char **argv)
{
	int n, id, rc;
	double seconds;

	if (!workers_args(argc, argv, "sysvsem", &n, &seconds))
		return 2;
	id = semget(IPC_PRIVATE, 4, IPC_CREAT | 0600);
	if (id < 0) {
		perror("sysvsem: semget");
		return 2;
	}
	rc = run_workers(n, seconds, up_down, &id);
	semctl(id, 0, IPC_RMID);
	return rc;
}
