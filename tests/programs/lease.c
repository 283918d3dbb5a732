/* A file lease and the openers that break it, for lockscope's file-lock
 * tests (issue 44).
 *
 * One process (the holder) takes a read lease on FILE (F_SETLEASE F_RDLCK),
 * and when told that it is being broken (SIGIO) goes on with its work for
 * HOLD_US before it gives the lease up (F_UNLCK) and takes it again. N - 1
 * processes (at least 1) open FILE for writing in a loop: each open breaks
 * the lease and sleeps in the kernel (__break_lease) until the holder lets
 * go. Every 0.1 s "ops: N" (the openers' opens); at the end "ops/s: X" and
 * "lease_wait_share: W", the openers' time inside open() over the time of
 * all N processes (the holder's too: N workers' time, as lockscope counts
 * it), also into CLOCK_FILE when given.
 *
 *   lease N HOLD_US SECONDS FILE [CLOCK_FILE]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
	atomic_ulong ops, wait_ns, run_ns;
	atomic_int stop;
};

static struct shared *sh;
static volatile sig_atomic_t broken;

static long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void on_sigio(int sig)
{
	(void)sig;
	broken = 1;
}

static void holder(const char *path, long hold_ns)
{
	sigset_t none;

	sigemptyset(&none);
	signal(SIGIO, on_sigio);
	while (!atomic_load(&sh->stop)) {
		int fd = open(path, O_RDONLY);

		if (fd < 0 || fcntl(fd, F_SETLEASE, F_RDLCK)) {
			if (fd >= 0)
				close(fd);
			usleep(100);          /* an opener still has it open for writing */
			continue;
		}
		while (!broken && !atomic_load(&sh->stop))
			usleep(50);
		broken = 0;
		for (long end = now_ns() + hold_ns; now_ns() < end;)
			;                     /* finishing what it was doing with the file */
		fcntl(fd, F_SETLEASE, F_UNLCK);
		close(fd);
	}
}

static void opener(const char *path, long deadline)
{
	long start = now_ns(), t;

	while ((t = now_ns()) < deadline) {
		int fd = open(path, O_WRONLY);

		atomic_fetch_add(&sh->wait_ns, now_ns() - t);
		if (fd < 0)
			perror(path), exit(1);
		close(fd);
		atomic_fetch_add(&sh->ops, 1);
		usleep(200);                  /* its own work between opens */
	}
	atomic_fetch_add(&sh->run_ns, now_ns() - start);
}

int main(int argc, char **argv)
{
	int n;
	long hold_ns, start, deadline;
	pid_t pids[64], h;

	if (argc < 5 || argc > 6 || (n = atoi(argv[1])) < 1 || n > 64) {
		fprintf(stderr, "usage: lease N HOLD_US SECONDS FILE [CLOCK_FILE]\n");
		return 2;
	}
	hold_ns = atol(argv[2]) * 1000;
	close(open(argv[4], O_RDWR | O_CREAT, 0600));
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	start = now_ns();
	deadline = start + (long)(atof(argv[3]) * 1e9);
	if (!(h = fork())) {
		holder(argv[4], hold_ns);
		_exit(0);
	}
	if (n < 2)
		n = 2;
	for (int i = 0; i < n - 1; i++)
		if (!(pids[i] = fork())) {
			opener(argv[4], deadline);
			_exit(0);
		}
	while (now_ns() < deadline) {
		usleep(100000);
		printf("ops: %lu\n", atomic_load(&sh->ops));
	}
	for (int i = 0; i < n - 1; i++)
		waitpid(pids[i], NULL, 0);
	atomic_store(&sh->stop, 1);
	waitpid(h, NULL, 0);
	printf("ops/s: %.1f\n", atomic_load(&sh->ops) / ((now_ns() - start) / 1e9));
	for (int f = 0; f < (argc == 6 ? 2 : 1); f++) {
		FILE *out = f ? fopen(argv[5], "w") : stdout;

		if (!out)
			return perror(argv[5]), 1;
		/* the openers ran as long as the holder: N processes' time is N / (N - 1) of theirs */
		fprintf(out, "lease_wait_share: %.4f\n",
			(double)atomic_load(&sh->wait_ns) / (atomic_load(&sh->run_ns) * n / (n - 1.0)));
		if (f)
			fclose(out);
	}
	return 0;
}
