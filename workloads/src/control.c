/* The event loop (ppoll on the signalfd and stdin) and the control protocol:
 * "go" and "stop" lines on stdin. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "util.h"

__attribute__((noreturn))
static void orchestrator_gone(void)
{
	fprintf(stderr, LS_PROG ": error: end of input on stdin in control mode "
			"(orchestrator gone?); killing workers\n");
	kill_all_and_reap();
	exit(1);
}

static void read_stdin(void)
{
	if (D.inlen == sizeof(D.in)) {
		fprintf(stderr, LS_PROG ": warning: control line too long; "
				"discarded\n");
		D.inlen = 0;
	}
	ssize_t r = read(STDIN_FILENO, D.in + D.inlen, sizeof(D.in) - D.inlen);
	if (r == 0)
		D.in_eof = true;
	else if (r < 0) {
		if (errno != EINTR && errno != EAGAIN)
			D.in_eof = true;
	} else {
		D.inlen += (size_t)r;
	}
}

static bool have_line(void)
{
	return memchr(D.in, '\n', D.inlen) || (D.in_eof && D.inlen > 0);
}

static bool take_line(char *out, size_t sz)
{
	char *nl = memchr(D.in, '\n', D.inlen);
	size_t n, used;

	if (nl) {
		n = (size_t)(nl - D.in);
		used = n + 1;
	} else if (D.in_eof && D.inlen > 0) {
		n = used = D.inlen;
	} else {
		return false;
	}
	/* trim */
	size_t b = 0;
	while (b < n && (D.in[b] == ' ' || D.in[b] == '\t' || D.in[b] == '\r'))
		b++;
	while (n > b && (D.in[n - 1] == ' ' || D.in[n - 1] == '\t' ||
			 D.in[n - 1] == '\r'))
		n--;
	size_t len = n - b < sz - 1 ? n - b : sz - 1;
	memcpy(out, D.in + b, len);
	out[len] = '\0';
	memmove(D.in, D.in + used, D.inlen - used);
	D.inlen -= used;
	return true;
}

/* Sleep (without burning CPU) until the deadline or one of the wanted
 * events. Signals, worker deaths and a vanished orchestrator are handled
 * here and do not return. */
int wait_event(uint64_t deadline, unsigned want, char *line,
		      size_t linesz)
{
	for (;;) {
		if ((want & W_LINE) && take_line(line, linesz))
			return EV_LINE;
		if ((want & W_READY) &&
		    atomic_load(&D.shm->nready) >= (uint32_t)D.nworkers)
			return EV_READY;
		if ((want & W_EXITED) && D.nalive == 0)
			return EV_EXITED;
		if (D.control && D.in_eof && !D.stop_received && !have_line())
			orchestrator_gone();

		uint64_t now = ls_now_ns();
		if (deadline != NO_DEADLINE && now >= deadline)
			return EV_TIMEOUT;

		struct pollfd pfd[2] = {
			{ .fd = D.sfd, .events = POLLIN },
			{ .fd = STDIN_FILENO, .events = POLLIN },
		};
		nfds_t nfds = (D.control && !D.in_eof) ? 2 : 1;
		struct timespec ts, *tsp = NULL;
		if (deadline != NO_DEADLINE) {
			uint64_t left = deadline - now;
			ts.tv_sec = (time_t)(left / 1000000000ull);
			ts.tv_nsec = (long)(left % 1000000000ull);
			tsp = &ts;
		}
		int r = ppoll(pfd, nfds, tsp, NULL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, LS_PROG ": error: ppoll: %s\n", strerror(errno));
			kill_all_and_reap();
			exit(1);
		}
		if (pfd[0].revents)
			drain_signals();
		if (nfds > 1 && pfd[1].revents)
			read_stdin();
	}
}

/* Block until the control line `want` arrives (control mode only). */
void wait_for_line(const char *want)
{
	char line[256];
	for (;;) {
		wait_event(NO_DEADLINE, W_LINE, line, sizeof(line));
		if (strcmp(line, want) == 0)
			return;
		if (line[0] == '\0')
			continue;
		if (strcmp(line, "stop") == 0) { /* stop before go: cancel */
			fprintf(stderr, LS_PROG ": 'stop' received before 'go'; "
					"killing workers\n");
			kill_all_and_reap();
			exit(1);
		}
		fprintf(stderr, LS_PROG ": warning: ignoring control line '%s' "
				"(waiting for '%s')\n", line, want);
	}
}
