/* A small program behind one global kernel lock, for lockscope's end-to-end
 * tests: N workers each flock() a file of their own in DIR, over and over,
 * while one more thread reads /proc/locks. Reading /proc/locks takes the
 * global per-CPU rwsem of the file-lock code (fs/locks.c, file_rwsem) for
 * writing, so the workers' flock() calls wait on it for reading in
 * flock_lock_inode: one lock of the kernel image, shared by every worker,
 * though no two workers touch the same file.
 *
 *   flocker N SECONDS DIR     prints "ops/s: X" at the end
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static double deadline;
static const char *dir;
static unsigned long total;
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	char path[4096];
	unsigned long ops = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/flock-%ld", dir, (long)arg);
	fd = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0) {
		perror(path);
		exit(1);
	}
	while (now() < deadline) {
		for (int i = 0; i < 256; i++) {
			flock(fd, LOCK_EX);
			flock(fd, LOCK_UN);
		}
		ops += 512;
	}
	close(fd);
	pthread_mutex_lock(&total_lock);
	total += ops;
	pthread_mutex_unlock(&total_lock);
	return NULL;
}

static void *reader(void *arg)
{
	char buf[4096];

	(void)arg;
	while (now() < deadline) {
		int fd = open("/proc/locks", O_RDONLY);

		if (fd < 0)
			break;
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n;
	double secs, start;
	pthread_t *t, r;

	if (argc != 4) {
		fprintf(stderr, "usage: flocker N SECONDS DIR\n");
		return 2;
	}
	n = atoi(argv[1]);
	secs = atof(argv[2]);
	dir = argv[3];
	t = calloc(n, sizeof(*t));
	start = now();
	deadline = start + secs;
	pthread_create(&r, NULL, reader, NULL);
	for (long i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_join(r, NULL);
	printf("ops/s: %.0f\n", total / (now() - start));
	return 0;
}
