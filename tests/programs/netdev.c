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
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include "workers.h"

static unsigned long set_mtu(int index, double deadline, void *arg)
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
	int n;
	double seconds;

	if (!workers_args(argc, argv, "netdev", &n, &seconds))
		return 2;
	return run_workers(n, seconds, set_mtu, NULL);
}
