/* Workers on one SysV shared memory segment, for lockscope's tests (issue
 * 29): N processes each attach the segment and detach it again, over and
 * over. Attaching counts the attach under the segment's own spinlock
 * (shmid_kernel's shm_perm.lock, do_shmat), mapping it and unmapping it
 * take the lock again (shm_open, shm_close): one lock all workers share, in
 * an object of a generic kmalloc cache, reached by no file.
 *
 *   sysvshm N SECONDS     prints "ops/s: X" (attach+detach pairs) at the end
 */
#define _GNU_SOURCE
#include <sys/ipc.h>
#include <sys/shm.h>
#include "workers.h"

static unsigned long attach_detach(int index, double deadline, void *arg)
{
	int id = *(int *)arg;
	unsigned long ops = 0;

	while (now() < deadline) {
		void *p = shmat(id, NULL, 0);

		if (p == (void *)-1 || shmdt(p))
			_exit(2);
		ops++;
	}
	return ops;
}

int main(int argc, char **argv)
{
	int n, id, rc;
	double seconds;

	if (!workers_args(argc, argv, "sysvshm", &n, &seconds))
		return 2;
	id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
	if (id < 0) {
		perror("sysvshm: shmget");
		return 2;
	}
	rc = run_workers(n, seconds, attach_detach, &id);
	shmctl(id, IPC_RMID, NULL);
	return rc;
}
