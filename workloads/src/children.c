/* The worker processes: signals (through a signalfd), fork, each child's own
 * set-up, reaping, and killing them all on any way out. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"
#include "util.h"

void kill_all_and_reap(void)
{
	for (int i = 0; i < D.nchild; i++)
		if (D.alive[i])
			kill(D.child[i], SIGKILL);
	for (int i = 0; i < D.nchild; i++) {
		if (!D.alive[i])
			continue;
		int st;
		while (waitpid(D.child[i], &st, 0) < 0 && errno == EINTR)
			;
		D.alive[i] = false;
		D.nalive--;
	}
}

static void describe_status(int st, char *out, size_t sz)
{
	if (WIFEXITED(st))
		snprintf(out, sz, "worker exited unexpectedly with status %d",
			 WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(out, sz, "worker killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	else
		snprintf(out, sz, "worker ended (status 0x%x)", st);
}

/* Child i ended while it should not have (or with a failure status). */
__attribute__((noreturn))
static void worker_failed(int i, int st)
{
	kill_all_and_reap();
	if (report_recorded_errors() == 0) {
		char msg[160];
		describe_status(st, msg, sizeof(msg));
		report_error(D.wl->model == LS_MODEL_PROCESS ? i : -1, "exit", NULL,
			     0, msg);
	}
	exit(1);
}

__attribute__((noreturn))
static void terminate_on_signal(int sig)
{
	fprintf(stderr, LS_PROG ": received %s, killing workers\n",
		strsignal(sig));
	kill_all_and_reap();
	exit(128 + sig);
}

static void reap_children(void)
{
	for (int i = 0; i < D.nchild; i++) {
		if (!D.alive[i])
			continue;
		int st;
		pid_t r = waitpid(D.child[i], &st, WNOHANG);
		if (r != D.child[i])
			continue;
		D.alive[i] = false;
		D.nalive--;
		if (!D.stopping || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			worker_failed(i, st);
	}
}

void drain_signals(void)
{
	struct signalfd_siginfo si[16];

	for (;;) {
		ssize_t r = read(D.sfd, si, sizeof(si));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break; /* EAGAIN: drained */
		}
		size_t n = (size_t)r / sizeof(si[0]);
		/* Termination requests first (a ^C also hits the workers). */
		for (size_t k = 0; k < n; k++) {
			int s = (int)si[k].ssi_signo;
			if (s == SIGTERM || s == SIGINT || s == SIGHUP)
				terminate_on_signal(s);
		}
		if (n < sizeof(si) / sizeof(si[0]))
			break;
	}
	reap_children();
}

void setup_signals(void)
{
	sigset_t set;

	signal(SIGPIPE, SIG_IGN); /* EPIPE on stdout is handled in emit() */
	ls_on_fatal(kill_all_and_reap);   /* a fatal error elsewhere leaves no worker */
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1); /* "a worker became ready" */
	if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
		perror(LS_PROG ": error: sigprocmask");
		exit(1);
	}
	D.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (D.sfd < 0) {
		perror(LS_PROG ": error: signalfd");
		exit(1);
	}
}

/* Runs in a freshly forked worker before the workload code. */
static void child_init(void)
{
	sigset_t none;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
	    getppid() != D.shm->driver_pid)
		_exit(1);
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	close(D.sfd);
	/* Workers must not hold the orchestrator's pipes. */
	dup2(D.devnull, STDIN_FILENO);
	dup2(D.devnull, STDOUT_FILENO);
	close(D.devnull);
}

void start_workers(const struct ls_worker_args *args)
{
	D.nchild = D.wl->model == LS_MODEL_THREAD ? 1 : D.nworkers;
	D.child = ls_xcalloc((size_t)D.nchild, sizeof(*D.child));
	D.alive = ls_xcalloc((size_t)D.nchild, sizeof(*D.alive));

	for (int i = 0; i < D.nchild; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			int e = errno;
			kill_all_and_reap();
			report_error(-1, "fork", NULL, e, strerror(e));
			exit(1);
		}
		if (pid == 0) {
			child_init();
			if (D.wl->model == LS_MODEL_THREAD)
				ls_worker_threads_main(args);
			ls_worker_process_main(args, i);
		}
		D.child[i] = pid;
		D.alive[i] = true;
		D.nalive++;
	}
}
