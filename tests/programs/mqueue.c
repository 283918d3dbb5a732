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

static unsigned long worker(mqd_t q, double deadline)
{
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
	int n, fds[2];
	double seconds, start, deadline;
	unsigned long total = 0, ops;
	char name[64];
	mqd_t q;

	if (argc != 3 || (n = atoi(argv[1])) < 1 || (seconds = atof(argv[2])) <= 0) {
		fprintf(stderr, "usage: mqueue N SECONDS\n");
		return 2;
	}
	snprintf(name, sizeof(name), "/lksc-mq-%d", (int)getpid());
	q = mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, &attr);
	if (q == (mqd_t)-1) {
		perror("mqueue: mq_open");
		return 2;
	}
	if (pipe(fds))
		return 2;
	start = now();
	deadline = start + seconds;
	for (int i = 0; i < n; i++) {
		if (fork() == 0) {
			close(fds[0]);
			ops = worker(q, deadline);
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
	mq_unlink(name);
	printf("ops/s: %.1f\n", total / (now() - start));
	return 0;
}
