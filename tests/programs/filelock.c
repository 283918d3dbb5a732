/* Workers taking turns on one file lock, with their own clock, for
 * lockscope's file-lock tests (issue 44).
 *
 *   filelock MODE N HOLD_US WORK_US SECONDS FILE [CLOCK_FILE]
 *
 * MODE: posix (fcntl F_SETLKW, a write lock on the whole file), ofd
 * (F_OFD_SETLKW, the same range), flock (flock LOCK_EX). N workers, each a
 * process (FILELOCK_THREADS=1: a thread of one process, each with its own
 * open file description; POSIX locks are per process, so posix is always
 * processes). Each loop: lock, spin HOLD_US of its CPU (FILELOCK_HOLD=sync:
 * write a byte of the file and fdatasync it, holding the lock), unlock,
 * spin WORK_US. Every 0.1 s the parent prints "ops: N"; at the end
 * "ops/s: X", and "lock_wait_share: W" (the workers' time inside the
 * blocking lock calls over N x their running time: the program's own
 * clock of its file-lock waits) and "pids: P1 P2 ...", the last two also
 * into CLOCK_FILE when given.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
	atomic_ulong ops;
	atomic_ulong wait_ns;
	atomic_ulong run_ns;
};

static struct shared *sh;
static const char *mode, *path;
static long hold_ns, work_ns;
static int sync_hold;
static double seconds;

static long clock_ns(clockid_t c)
{
	struct timespec t;

	clock_gettime(c, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void spin(long ns)
{
	long end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;

	while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		;
}

static void lock_file(int fd, int type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };

	if (!strcmp(mode, "flock")) {
		if (flock(fd, type == F_UNLCK ? LOCK_UN : LOCK_EX))
			perror("flock"), exit(1);
	} else if (fcntl(fd, !strcmp(mode, "ofd") ? F_OFD_SETLKW : F_SETLKW, &fl)) {
		perror("fcntl"), exit(1);
	}
}

static void *worker(void *arg)
{
	long start = clock_ns(CLOCK_MONOTONIC), deadline = start + (long)(seconds * 1e9), t;
	int fd = open(path, O_RDWR | O_CREAT, 0600);

	(void)arg;
	if (fd < 0)
		perror(path), exit(1);
	while ((t = clock_ns(CLOCK_MONOTONIC)) < deadline) {
		lock_file(fd, F_WRLCK);
		atomic_fetch_add(&sh->wait_ns, clock_ns(CLOCK_MONOTONIC) - t);
		if (sync_hold) {
			if (pwrite(fd, "x", 1, 0) != 1 || fdatasync(fd))
				perror("sync"), exit(1);
		} else {
			spin(hold_ns);
		}
		lock_file(fd, F_UNLCK);
		atomic_fetch_add(&sh->ops, 1);
		spin(work_ns);
	}
	atomic_fetch_add(&sh->run_ns, clock_ns(CLOCK_MONOTONIC) - start);
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	int n, threads = getenv("FILELOCK_THREADS") && !strcmp(getenv("FILELOCK_THREADS"), "1");
	long start, deadline;
	pid_t pids[256];
	pthread_t tids[256];

	if (argc < 7 || argc > 8 || (n = atoi(argv[2])) < 1 || n > 256 ||
	    (strcmp(argv[1], "posix") && strcmp(argv[1], "ofd") && strcmp(argv[1], "flock"))) {
		fprintf(stderr, "usage: filelock posix|ofd|flock N HOLD_US WORK_US SECONDS FILE [CLOCK_FILE]\n");
		return 2;
	}
	mode = argv[1];
	sync_hold = getenv("FILELOCK_HOLD") && !strcmp(getenv("FILELOCK_HOLD"), "sync");
	hold_ns = atol(argv[3]) * 1000;
	work_ns = atol(argv[4]) * 1000;
	seconds = atof(argv[5]);
	path = argv[6];
	if (!strcmp(mode, "posix"))
		threads = 0;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	start = clock_ns(CLOCK_MONOTONIC);
	deadline = start + (long)(seconds * 1e9);
	for (int i = 0; i < n; i++) {
		if (threads) {
			pthread_create(&tids[i], NULL, worker, NULL);
			continue;
		}
		if (!(pids[i] = fork())) {
			worker(NULL);
			_exit(0);
		}
	}
	while (clock_ns(CLOCK_MONOTONIC) < deadline) {
		usleep(100000);
		printf("ops: %lu\n", atomic_load(&sh->ops));
	}
	for (int i = 0; i < n; i++) {
		if (threads)
			pthread_join(tids[i], NULL);
		else
			waitpid(pids[i], NULL, 0);
	}
	printf("ops/s: %.1f\n", atomic_load(&sh->ops) / ((clock_ns(CLOCK_MONOTONIC) - start) / 1e9));
	for (int f = 0; f < (argc == 8 ? 2 : 1); f++) {
		FILE *out = f ? fopen(argv[7], "w") : stdout;

		if (!out)
			return perror(argv[7]), 1;
		fprintf(out, "lock_wait_share: %.4f\n", (double)atomic_load(&sh->wait_ns) / atomic_load(&sh->run_ns));
		fprintf(out, "pids:");
		for (int i = 0; !threads && i < n; i++)
			fprintf(out, " %d", pids[i]);
		fprintf(out, "\n");
		if (f)
			fclose(out);
	}
	return 0;
}
