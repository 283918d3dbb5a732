/* objstress: N threads hammer one kernel object behind a file, so that the
 * top kernel lock is a lock field of that object (tests/test_object_names.py).
 *
 *   objstress MODE N [DIR]     runs until killed
 *
 * MODE:
 *   pipe     each thread writes one byte to a shared pipe and reads one back
 *   epoll    each thread adds its own eventfd to one epoll set and removes it
 *   unix     each thread sends a datagram to one unix socket bound at
 *            DIR/sock (abstract "@objstress-PID" without DIR) and receives one
 *   tcp      each thread writes one byte into one TCP connection on 127.0.0.1
 *            and reads one byte from its other end
 *   eventfd  each thread adds 1 to one eventfd (semaphore mode) and takes 1
 *   flock    each thread takes and drops a shared flock(2) on DIR/lockfile
 *            through its own descriptor
 *   fcntl    each thread takes and drops a read lock (F_SETLK) on one
 *            descriptor of DIR/lockfile
 *   xattr    each thread sets and reads user.objstress of DIR/xattrfile
 *   statfs   each thread calls statfs(DIR)
 *
 * Every thread writes before it reads, so the shared pipe, socket or
 * eventfd always has a byte for some reader; the pipe, TCP and eventfd
 * descriptors are non-blocking and the threads retry (busy polling).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

static const char *mode, *dir;
static int fds[2] = { -1, -1 };          /* the shared object: pipe ends, socket ends, ... */
static char path[4096];

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* the shared descriptors are non-blocking and the threads retry: they
 * contend on the object's locks instead of sleeping on its wait queues,
 * which would make the scheduler's runqueue locks the busiest */
static void retry(ssize_t (*op)(int, void *, size_t), int fd, void *buf, size_t len, const char *what)
{
	ssize_t n;

	while ((n = op(fd, buf, len)) < 0 && errno == EAGAIN)
		;
	if (n != (ssize_t)len)
		die(what);
}

static ssize_t do_write(int fd, void *buf, size_t len) { return write(fd, buf, len); }
static ssize_t do_read(int fd, void *buf, size_t len) { return read(fd, buf, len); }

static void one_byte(int wfd, int rfd)
{
	char c = 'x';

	retry(do_write, wfd, &c, 1, "write");
	retry(do_read, rfd, &c, 1, "read");
}

static void nonblocking(void)
{
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0 && fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK))
			die("O_NONBLOCK");
}

static void *worker(void *arg)
{
	int own = -1;

	(void)arg;
	if (!strcmp(mode, "epoll") && (own = eventfd(0, 0)) < 0)
		die("eventfd");
	if (!strcmp(mode, "flock") && (own = open(path, O_RDONLY)) < 0)
		die(path);
	for (;;) {
		if (!strcmp(mode, "pipe") || !strcmp(mode, "tcp")) {
			one_byte(fds[1], fds[0]);
		} else if (!strcmp(mode, "unix")) {
			one_byte(fds[1], fds[0]);
		} else if (!strcmp(mode, "eventfd")) {
			uint64_t v = 1;

			retry(do_write, fds[0], &v, sizeof(v), "eventfd write");
			retry(do_read, fds[0], &v, sizeof(v), "eventfd read");
		} else if (!strcmp(mode, "epoll")) {
			struct epoll_event ev = { .events = EPOLLIN };

			if (epoll_ctl(fds[0], EPOLL_CTL_ADD, own, &ev) || epoll_ctl(fds[0], EPOLL_CTL_DEL, own, NULL))
				die("epoll_ctl");
		} else if (!strcmp(mode, "flock")) {
			if (flock(own, LOCK_SH) || flock(own, LOCK_UN))
				die("flock");
		} else if (!strcmp(mode, "fcntl")) {
			struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET };

			if (fcntl(fds[0], F_SETLK, &fl))
				die("fcntl F_RDLCK");
			fl.l_type = F_UNLCK;
			if (fcntl(fds[0], F_SETLK, &fl))
				die("fcntl F_UNLCK");
		} else if (!strcmp(mode, "xattr")) {
			char buf[16];

			if (setxattr(path, "user.objstress", "value", 5, 0) ||
			    getxattr(path, "user.objstress", buf, sizeof(buf)) < 0)
				die("xattr");
		} else if (!strcmp(mode, "statfs")) {
			struct statfs st;

			if (statfs(dir, &st))
				die("statfs");
		}
	}
	return NULL;
}

static void setup_unix(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	socklen_t len;

	if (dir) {
		snprintf(a.sun_path, sizeof(a.sun_path), "%s/sock", dir);
		unlink(a.sun_path);
		len = sizeof(a);
	} else {
		len = offsetof(struct sockaddr_un, sun_path) + 1 +
		      snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "objstress-%d", (int)getpid());
	}
	fds[0] = socket(AF_UNIX, SOCK_DGRAM, 0);
	fds[1] = socket(AF_UNIX, SOCK_DGRAM, 0);
	if (fds[0] < 0 || fds[1] < 0 || bind(fds[0], (void *)&a, len) || connect(fds[1], (void *)&a, len))
		die("unix socket");
}

static void setup_tcp(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (l < 0 || bind(l, (void *)&a, len) || listen(l, 1) || getsockname(l, (void *)&a, &len))
		die("tcp listen");
	fds[1] = socket(AF_INET, SOCK_STREAM, 0);
	if (fds[1] < 0 || connect(fds[1], (void *)&a, len))
		die("tcp connect");
	fds[0] = accept(l, NULL, NULL);
	if (fds[0] < 0)
		die("accept");
	setsockopt(fds[1], IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
	close(l);
}

static void setup_file(const char *name)
{
	if (!dir) {
		fprintf(stderr, "objstress %s needs DIR\n", mode);
		exit(2);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fds[0] = open(path, O_RDWR | O_CREAT, 0644);
	if (fds[0] < 0)
		die(path);
}

int main(int argc, char **argv)
{
	int n;

	if (argc < 3) {
		fprintf(stderr, "usage: objstress pipe|epoll|unix|tcp|eventfd|flock|fcntl|xattr|statfs N [DIR]\n");
		return 2;
	}
	mode = argv[1];
	n = atoi(argv[2]);
	dir = argc > 3 ? argv[3] : NULL;
	if (!strcmp(mode, "pipe")) {
		if (pipe(fds))
			die("pipe");
	} else if (!strcmp(mode, "epoll")) {
		if ((fds[0] = epoll_create1(0)) < 0)
			die("epoll_create1");
	} else if (!strcmp(mode, "unix")) {
		setup_unix();
	} else if (!strcmp(mode, "tcp")) {
		setup_tcp();
	} else if (!strcmp(mode, "eventfd")) {
		if ((fds[0] = eventfd(0, EFD_SEMAPHORE)) < 0)
			die("eventfd");
	} else if (!strcmp(mode, "flock") || !strcmp(mode, "fcntl")) {
		setup_file("lockfile");
	} else if (!strcmp(mode, "xattr")) {
		setup_file("xattrfile");
	} else if (!strcmp(mode, "statfs")) {
		if (!dir) {
			fprintf(stderr, "objstress statfs needs DIR\n");
			return 2;
		}
	} else {
		fprintf(stderr, "objstress: unknown mode %s\n", mode);
		return 2;
	}
	/* unix datagrams stay blocking: the receive lock (iolock) is contended
	 * while a reader waits for the next datagram */
	if (!strcmp(mode, "pipe") || !strcmp(mode, "tcp") || !strcmp(mode, "eventfd"))
		nonblocking();
	for (int i = 0; i < n; i++) {
		pthread_t t;

		if (pthread_create(&t, NULL, worker, NULL))
			die("pthread_create");
	}
	pause();
	return 0;
}
