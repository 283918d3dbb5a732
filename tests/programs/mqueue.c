/* Workers on one POSIX message queue, for lockscope's tests (issue 29): N
 * processes each send a message to /lksc-mq-PID and receive one, over and
 * over. Every mq_send and mq_timedreceive takes the queue's spinlock,
 * mqueue_inode_info->lock: one lock all workers share, reached through the
 * queue's descriptor (a file of the mqueue file system).
 *
 *   mqueue N SECONDS     prints "ops/s: X" (messages received) at the end
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <mqueue.h>
#include "workers.h"

static unsigned long send_receive(int index, double deadline, void *arg)
{
	mqd_t q = *(mqd_t *)arg;
	char msg[64] = "lockscope";
	unsigned long ops = 0;
	unsigned prio;

	while (now() < deadline) {
		struct timespec to;

		mq_send(q, msg, 8, 0);             /* may fail when full: the others receive */
		clock_gettime(CLOCK_REALTIME, &to);
		to.tv_nsec += 1000000;
		if (to.tv_nsec >= 1000000000) {
			to.tv_sec++;
			to.tv_nsec -= 1000000000;
		}
		if (mq_timedreceive(q, msg, sizeof(msg), &prio, &to) >= 0)
			ops++;
	}
	return ops;
}

int main(int argc, char **argv)
{
	struct mq_attr attr = { .mq_maxmsg = 10, .mq_msgsize = 64 };
	int n, rc;
	double seconds;
	char name[64];
	mqd_t q;

	if (!workers_args(argc, argv, "mqueue", &n, &seconds))
		return 2;
	snprintf(name, sizeof(name), "/lksc-mq-%d", (int)getpid());
	q = mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, &attr);
	if (q == (mqd_t)-1) {
		perror("mqueue: mq_open");
		return 2;
	}
	rc = run_workers(n, seconds, send_receive, &q);
	mq_unlink(name);
	return rc;
}
