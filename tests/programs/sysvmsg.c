/* Workers on one SysV message queue, for lockscope's tests (issue 29): N
 * processes each send a small message to one queue and receive one back,
 * over and over, never blocking (each sends before it receives). Every
 * msgsnd and msgrcv takes the queue's own spinlock, msg_queue's
 * q_perm.lock: one lock all workers share, in an object of a generic
 * kmalloc cache, reached by no file.
 *
 *   sysvmsg N SECONDS     prints "ops/s: X" (send+receive pairs) at the end
 */
#define _GNU_SOURCE
#include <sys/ipc.h>
#include <sys/msg.h>
#include "workers.h"

struct message {
	long type;
	char text[16];
};

static unsigned long send_receive(int index, double deadline, void *arg)
{
	int id = *(int *)arg;
	struct message m = { 1, "lockscope" };
	unsigned long ops = 0;

	while (now() < deadline) {
		if (msgsnd(id, &m, sizeof(m.text), 0) || msgrcv(id, &m, sizeof(m.text), 0, 0) < 0)
			_exit(2);
		ops++;
	}
	return ops;
}

int main(int argc, char **argv)
{
	int n, id, rc;
	double seconds;

	if (!workers_args(argc, argv, "sysvmsg", &n, &seconds))
		return 2;
	id = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
	if (id < 0) {
		perror("sysvmsg: msgget");
		return 2;
	}
	rc = run_workers(n, seconds, send_receive, &id);
	msgctl(id, IPC_RMID, NULL);
	return rc;
}
