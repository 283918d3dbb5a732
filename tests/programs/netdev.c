/* A program behind one global kernel lock taken through a wrapper, for
 * lockscope's tests (issue 29): N worker processes, each in a network
 * namespace of its own, set the MTU of their own loopback device over and
 * over (SIOCSIFMTU). No two workers share a device or a namespace, but
 * dev_ioctl takes the routing netlink mutex, rtnl_mutex, through
 * rtnl_lock() (`mov $rtnl_mutex,%rdi; jmp mutex_lock`): one lock of the
 * whole machine. Needs root (unshare(CLONE_NEWNET)).
 *
 *   netdev N SECONDS     prints "ops/s: X" at the end
 */
#define _GNU_SOURCE
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long worker(double deadline)
{
	struct ifreq ifr;
	unsigned long ops = 0;
	int s;

	if (unshare(CLONE_NEWNET)) {
		perror("netdev: unshare(CLONE_NEWNET)");
		exit(2);
	}
	s = socket(AF_INET, SOCK_DGRAM, 0);
	if (s < 0) {
		perror("netdev: socket");
		exit(2);
	}
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	while (now() < deadline) {
		ifr.ifr_mtu = 1500 + (int)(ops & 1) * 500;
		if (ioctl(s, SIOCSIFMTU, &ifr)) {
			perror("netdev: SIOCSIFMTU lo");
			exit(2);
		}
		ops++;
	}
	return ops;
}

int main(int argc, char **argv)
{
	int n, fds[2];
	double seconds, start, deadline;
	unsigned long total = 0, ops;

	if (argc != 3 || (n = atoi(argv[1])) < 1 || (seconds = atof(argv[2])) <= 0) {
		fprintf(stderr, "usage: netdev N SECONDS\n");
		return 2;
	}
	if (pipe(fds))
		return 2;
	start = now();
	deadline = start + seconds;
	for (int i = 0; i < n; i++) {
		if (fork() == 0) {
			close(fds[0]);
			ops = worker(deadline);
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
