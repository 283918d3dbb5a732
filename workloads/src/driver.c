/* lockscope-workload: CLI, worker process management, control protocol and
 * JSON Lines output. See ../README.md for the formats. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "catalog.h"
#include "jsonw.h"
#include "lat.h"
#include "shm.h"
#include "util.h"
#include "worker.h"

#define MAX_WORKERS 4096
#define MAX_SECONDS 1e6
#define STOP_GRACE_NS 2000000000ull
#define NO_DEADLINE UINT64_MAX
/* Longest path any workload builds below --dir, plus room for counters. */
#define DIR_RESERVE 128

struct drv {
	/* configuration */
	const struct workload *wl;
	int nworkers;
	double duration_s, warmup_s;
	double interval_s;          /* progress events in the window; 0: none */
	bool control;
	bool have_dir;
	char dir[PATH_MAX];
	int cpu_list[CPU_SETSIZE];
	int ncpu_list;
	int *wcpu;
	bool oversub;
	bool no_latency;            /* --no-latency: count ops, do not time them */
	long long param[LS_MAX_PARAMS];
	int nops;
	const char *op_names[LS_MAX_OPTYPES];

	/* runtime */
	struct ls_shm *shm;
	pid_t *child;
	bool *alive;
	int nchild, nalive;
	int sfd, devnull;
	bool stopping;
	bool stop_received;

	char in[4096];
	size_t inlen;
	bool in_eof;
};

static struct drv D = { .sfd = -1, .devnull = -1 };

/* ------------------------------------------------------------ output */

/* The JSON line being built: in memory, so that it goes out in one write. */
static struct jw W;
static FILE *line_f;
static char *line_buf;
static size_t line_len;

/* Start a line: {"event":event,.. or, event NULL, a bare {.. */
static struct jw *ev_begin(const char *event)
{
	line_f = open_memstream(&line_buf, &line_len);
	if (!line_f) {
		fprintf(stderr, LS_PROG ": error: out of memory\n");
		exit(1);
	}
	if (event) {
		jw_event_begin(&W, line_f, event);
	} else {
		W.f = line_f;
		W.depth = 0;
		W.need_comma[0] = false;
		jw_obj(&W);
	}
	return &W;
}

/* Close the line and write it to stdout. 0 or -1/errno. */
static int ev_end(void)
{
	jw_event_end(&W);
	fclose(line_f);
	int rc = ls_write_all(STDOUT_FILENO, line_buf, line_len);
	int e = errno;
	free(line_buf);
	errno = e;
	return rc;
}

/* ------------------------------------------------------------ messages */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " LS_PROG " --list\n"
		"       " LS_PROG " run --workload NAME --workers N --duration S\n"
		"                  [--warmup S] [--dir D] [--cpus LIST] "
		"[--interval S] [--control]\n"
		"                  [--param KEY=VALUE]... [--no-latency]\n"
		"  --interval S  during the timed window, print a progress event\n"
		"                (cumulative ops per worker, ops/s and latency\n"
		"                percentiles of the interval) every S seconds\n"
		"  --param K=V   a workload parameter (see --list for each\n"
		"                workload's parameters and defaults)\n"
		"  --no-latency  count operations without timing each one\n");
}

__attribute__((format(printf, 1, 2), noreturn))
static void bad_input(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, LS_PROG ": error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static const char *valid_names(void)
{
	static char buf[512];
	size_t off = 0;
	for (size_t i = 0; i < ls_catalog_len; i++)
		off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%s",
					i ? ", " : "", ls_catalog[i].name);
	return buf;
}

/* ----------------------------------------------------- process control */

static void kill_all_and_reap(void)
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

static void emit(void);

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

/* Print an "error" event (and a stderr line) for every worker that
 * recorded one. Returns how many. Output errors are ignored here: we are
 * on the way out anyway. */
static int report_recorded_errors(void)
{
	int n = 0;
	for (int i = 0; i < D.nworkers; i++) {
		struct ls_wstate *ws = &D.shm->ws[i];
		if (!atomic_load_explicit(&ws->err_set, memory_order_acquire))
			continue;
		n++;
		const char *msg = ws->err_msg[0] ? ws->err_msg
						 : strerror(ws->err_errno);
		struct jw *w = ev_begin("error");
		jw_ki64(w, "worker", i);
		jw_kutf8(w, "op", ws->err_op);
		jw_kutf8(w, "path", ws->err_path[0] ? ws->err_path : NULL);
		if (ws->err_path2[0])
			jw_kutf8(w, "path2", ws->err_path2);
		jw_ki64(w, "errno", ws->err_errno);
		jw_kutf8(w, "message", msg);
		ev_end();
		fprintf(stderr, LS_PROG ": error: worker %d (cpu %d): %s%s%s%s%s: %s\n",
			i, D.wcpu[i], ws->err_op, ws->err_path[0] ? " " : "",
			ws->err_path, ws->err_path2[0] ? " -> " : "", ws->err_path2,
			msg);
	}
	return n;
}

/* Error event that is not a worker's own record (worker = null when no
 * single worker can be named). */
static void report_error(int worker, const char *op, const char *path,
			 int err, const char *msg)
{
	struct jw *w = ev_begin("error");
	jw_key(w, "worker");
	if (worker >= 0)
		jw_i64(w, worker);
	else
		jw_null(w);
	jw_kutf8(w, "op", op);
	jw_kutf8(w, "path", path && path[0] ? path : NULL);
	jw_ki64(w, "errno", err);
	jw_kutf8(w, "message", msg);
	ev_end();
	if (worker >= 0)
		fprintf(stderr, LS_PROG ": error: worker %d: %s%s%s: %s\n", worker,
			op, path && path[0] ? " " : "", path ? path : "", msg);
	else
		fprintf(stderr, LS_PROG ": error: %s%s%s: %s\n", op,
			path && path[0] ? " " : "", path ? path : "", msg);
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

__attribute__((noreturn))
static void orchestrator_gone(void)
{
	fprintf(stderr, LS_PROG ": error: end of input on stdin in control mode "
			"(orchestrator gone?); killing workers\n");
	kill_all_and_reap();
	exit(1);
}

static void emit(void)
{
	if (ev_end() != 0) {
		int e = errno;
		fprintf(stderr, LS_PROG ": error: cannot write to stdout: %s\n",
			strerror(e));
		kill_all_and_reap();
		exit(1);
	}
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

static void drain_signals(void)
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

/* ------------------------------------------------------------ stdin */

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

/* ------------------------------------------------------------ event loop */

enum { W_LINE = 1, W_READY = 2, W_EXITED = 4 };
enum { EV_TIMEOUT, EV_LINE, EV_READY, EV_EXITED };

/* Sleep (without burning CPU) until the deadline or one of the wanted
 * events. Signals, worker deaths and a vanished orchestrator are handled
 * here and do not return. */
static int wait_event(uint64_t deadline, unsigned want, char *line,
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
static void wait_for_line(const char *want)
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

/* ------------------------------------------------------------ CLI */

static void print_list(void)
{
	struct jw *w = ev_begin(NULL);

	jw_key(w, "workloads");
	jw_arr(w);
	for (size_t i = 0; i < ls_catalog_len; i++) {
		const struct workload *wl = &ls_catalog[i];
		jw_obj(w);
		jw_kstr(w, "name", wl->name);
		jw_kstr(w, "operation", wl->operation);
		jw_kstr(w, "sharing", wl->sharing);
		jw_kstr(w, "component", wl->component);
		jw_kstr(w, "model",
			wl->model == LS_MODEL_THREAD ? "thread" : "process");
		jw_kbool(w, "needs_dir", wl->needs_dir);
		jw_key(w, "op_names");
		jw_arr(w);
		if (!wl->op_names)
			jw_string(w, "op");
		for (const char *const *o = wl->op_names; o && *o; o++)
			jw_string(w, *o);
		jw_arr_end(w);
		jw_key(w, "params");
		jw_arr(w);
		for (const struct ls_param *q = wl->params; q && q->name; q++) {
			jw_obj(w);
			jw_kstr(w, "name", q->name);
			jw_ki64(w, "default", q->def);
			jw_ki64(w, "min", q->min);
			jw_ki64(w, "max", q->max);
			jw_kstr(w, "help", q->help);
			jw_obj_end(w);
		}
		jw_arr_end(w);
		jw_ki64(w, "max_workers",
			wl->max_workers ? wl->max_workers : MAX_WORKERS);
		jw_kbool(w, "many_tasks", wl->many_tasks);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	if (ev_end() != 0) {
		fprintf(stderr, LS_PROG ": error: cannot write to stdout: %s\n",
			strerror(errno));
		exit(1);
	}
}

static double parse_seconds(const char *opt, const char *s, bool allow_zero)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !isfinite(v) ||
	    v < 0 || (!allow_zero && v <= 0) || v > MAX_SECONDS)
		bad_input("%s must be a number of seconds %s (got '%s')", opt,
			  allow_zero ? ">= 0" : "> 0", s);
	return v;
}

static int parse_workers(const char *s, int max)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < 1 || v > max)
		bad_input("--workers must be an integer between 1 and %d%s (got "
			  "'%s')", max, max != MAX_WORKERS ? " for this workload" : "",
			  s);
	return (int)v;
}

static const char *param_names(const struct workload *w)
{
	static char buf[256];
	size_t off = 0;
	buf[0] = '\0';
	for (const struct ls_param *q = w->params; q && q->name; q++)
		off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%s",
					off ? ", " : "", q->name);
	return buf;
}

/* --param KEY=VALUE for workload w: checked against its catalog entry. */
static void parse_params(const struct workload *w, const char **kv, int n)
{
	int np = 0;
	for (const struct ls_param *q = w->params; q && q->name; q++)
		D.param[np++] = q->def;
	for (int i = 0; i < n; i++) {
		const char *eq = strchr(kv[i], '=');
		if (!eq || eq == kv[i])
			bad_input("--param '%s': expected KEY=VALUE", kv[i]);
		if (np == 0)
			bad_input("--param '%s': workload %s takes no parameters", kv[i],
				  w->name);
		size_t klen = (size_t)(eq - kv[i]);
		int k;
		for (k = 0; k < np; k++)
			if (strlen(w->params[k].name) == klen &&
			    strncmp(w->params[k].name, kv[i], klen) == 0)
				break;
		if (k == np)
			bad_input("--param '%s': unknown parameter '%.*s' for workload "
				  "%s (valid: %s)", kv[i], (int)klen, kv[i], w->name,
				  param_names(w));
		const struct ls_param *q = &w->params[k];
		char *end;
		errno = 0;
		long long v = strtoll(eq + 1, &end, 10);
		if (errno != 0 || end == eq + 1 || *end != '\0' || v < q->min ||
		    v > q->max)
			bad_input("--param %s must be an integer between %lld and %lld "
				  "(got '%s')", q->name, q->min, q->max, eq + 1);
		D.param[k] = v;
	}
}

static void parse_cpus(const char *s)
{
	int allowed[CPU_SETSIZE];
	int nallowed = ls_allowed_cpus(allowed, CPU_SETSIZE);
	bool seen[CPU_SETSIZE] = { false };
	const char *p = s;

	if (nallowed < 0)
		bad_input("sched_getaffinity: %s", strerror(errno));
	D.ncpu_list = 0;
	for (;;) {
		char *end;
		if (*p < '0' || *p > '9')
			goto syntax;
		long a = strtol(p, &end, 10), b = a;
		p = end;
		if (*p == '-') {
			p++;
			if (*p < '0' || *p > '9')
				goto syntax;
			b = strtol(p, &end, 10);
			p = end;
		}
		if (a < 0 || b < a || b >= CPU_SETSIZE)
			goto syntax;
		for (long c = a; c <= b; c++) {
			bool ok = false;
			for (int k = 0; k < nallowed; k++)
				ok |= allowed[k] == c;
			if (!ok) {
				char al[256];
				size_t off = 0;
				for (int k = 0; k < nallowed && off < sizeof(al) - 16; k++)
					off += (size_t)snprintf(al + off, sizeof(al) - off,
								"%s%d", k ? "," : "", allowed[k]);
				bad_input("--cpus: CPU %ld is not available to this process "
					  "(allowed: %s)", c, al);
			}
			if (seen[c])
				bad_input("--cpus: CPU %ld is listed twice", c);
			seen[c] = true;
			D.cpu_list[D.ncpu_list++] = (int)c;
		}
		if (*p == '\0')
			break;
		if (*p != ',')
			goto syntax;
		p++;
	}
	return;
syntax:
	bad_input("bad --cpus '%s': expected a comma-separated list of CPU "
		  "numbers or ranges, e.g. 0,1 or 0-3", s);
}

static void parse_run_args(int argc, char **argv)
{
	const char *workload = NULL, *workers = NULL, *duration = NULL;
	const char *warmup = NULL, *dir = NULL, *cpus = NULL, *interval = NULL;
	const char **params = ls_xcalloc((size_t)argc, sizeof(*params));
	int nparams = 0;

	for (int i = 2; i < argc; i++) {
		const char *arg = argv[i];
		const char *val = NULL;
		char name[32];

		if (strcmp(arg, "--control") == 0) {
			D.control = true;
			continue;
		}
		if (strcmp(arg, "--no-latency") == 0) {
			D.no_latency = true;
			continue;
		}
		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strncmp(arg, "--", 2) != 0)
			bad_input("unexpected argument '%s' (see --help)", arg);
		const char *eq = strchr(arg, '=');
		size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
		if (nlen >= sizeof(name))
			bad_input("unknown option '%s' (see --help)", arg);
		memcpy(name, arg, nlen);
		name[nlen] = '\0';

		const char **slot = NULL;
		if (strcmp(name, "--workload") == 0)
			slot = &workload;
		else if (strcmp(name, "--workers") == 0)
			slot = &workers;
		else if (strcmp(name, "--duration") == 0)
			slot = &duration;
		else if (strcmp(name, "--warmup") == 0)
			slot = &warmup;
		else if (strcmp(name, "--dir") == 0)
			slot = &dir;
		else if (strcmp(name, "--cpus") == 0)
			slot = &cpus;
		else if (strcmp(name, "--interval") == 0)
			slot = &interval;
		else if (strcmp(name, "--param") == 0)
			slot = &params[nparams++];
		else
			bad_input("unknown option '%s' (see --help)", name);

		if (eq) {
			val = eq + 1;
		} else {
			if (i + 1 >= argc)
				bad_input("option %s needs a value", name);
			val = argv[++i];
		}
		*slot = val;
	}

	if (!workload)
		bad_input("missing --workload NAME (valid: %s)", valid_names());
	D.wl = ls_catalog_find(workload);
	if (!D.wl)
		bad_input("unknown workload '%s' (valid: %s)", workload,
			  valid_names());
	if (!workers)
		bad_input("missing --workers N");
	D.nworkers = parse_workers(workers, D.wl->max_workers ?
					    D.wl->max_workers : MAX_WORKERS);
	parse_params(D.wl, params, nparams);
	free(params);
	D.nops = 0;
	if (!D.wl->op_names)
		D.op_names[D.nops++] = "op";
	for (const char *const *o = D.wl->op_names; o && *o; o++)
		D.op_names[D.nops++] = *o;
	if (!duration)
		bad_input("missing --duration S");
	D.duration_s = parse_seconds("--duration", duration, false);
	D.warmup_s = warmup ? parse_seconds("--warmup", warmup, true) : 1.0;
	D.interval_s = interval ? parse_seconds("--interval", interval, false) : 0.0;

	if (D.wl->needs_dir) {
		struct stat st;
		if (!dir)
			bad_input("workload %s needs --dir D (an existing directory)",
				  D.wl->name);
		if (stat(dir, &st) != 0)
			bad_input("--dir '%s': %s", dir, strerror(errno));
		if (!S_ISDIR(st.st_mode))
			bad_input("--dir '%s' is not a directory", dir);
		if (access(dir, W_OK | X_OK) != 0)
			bad_input("--dir '%s' is not writable: %s", dir, strerror(errno));
		if (!realpath(dir, D.dir))
			bad_input("--dir '%s': %s", dir, strerror(errno));
		if (strlen(D.dir) + DIR_RESERVE >= PATH_MAX)
			bad_input("--dir '%s': path too long", dir);
		D.have_dir = true;
	} /* else: --dir is accepted and ignored */

	if (cpus) {
		parse_cpus(cpus);
	} else {
		D.ncpu_list = ls_allowed_cpus(D.cpu_list, CPU_SETSIZE);
		if (D.ncpu_list <= 0)
			bad_input("sched_getaffinity: %s", strerror(errno));
	}
}

/* ------------------------------------------------------------ run */

static void setup_signals(void)
{
	sigset_t set;

	signal(SIGPIPE, SIG_IGN); /* EPIPE on stdout is handled in emit() */
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

static void setup_shm(void)
{
	size_t head = (sizeof(struct ls_shm) + LS_CACHELINE - 1) &
		      ~(size_t)(LS_CACHELINE - 1);
	size_t cnt = (size_t)D.nworkers * sizeof(struct ls_counter);
	size_t wst = (size_t)D.nworkers * sizeof(struct ls_wstate);
	size_t stride = (sizeof(struct ls_lat) +
			 (size_t)D.nops * sizeof(struct ls_hist) +
			 LS_CACHELINE - 1) & ~(size_t)(LS_CACHELINE - 1);
	size_t lat = (size_t)D.nworkers * stride;
	char *p = mmap(NULL, head + cnt + wst + lat, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror(LS_PROG ": error: mmap");
		exit(1);
	}
	D.shm = (struct ls_shm *)p;
	D.shm->driver_pid = getpid();
	D.shm->files_budget = UINT64_MAX;
	D.shm->counters = (struct ls_counter *)(p + head);
	D.shm->ws = (struct ls_wstate *)(p + head + cnt);
	D.shm->lat = p + head + cnt + wst;
	D.shm->lat_stride = stride;
	D.shm->nops = D.nops;
	D.shm->timing = !D.no_latency;
	if (D.shm->timing)
		ls_tsc_calibrate(); /* before the workers fork: they inherit it */
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

static void start_workers(const struct ls_worker_args *args)
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

/* Snapshot of every worker's ops and histograms; folds the maxima taken
 * into the window's. */
static uint64_t win_max[LS_MAX_OPTYPES];

static uint64_t snapshot(struct lat_snap *s)
{
	lat_take(D.shm, D.nworkers, s);
	for (int k = 0; k < D.nops; k++)
		if (s->a[k].max_ns > win_max[k])
			win_max[k] = s->a[k].max_ns;
	return s->t_ns;
}

static uint64_t ops_between(const struct lat_snap *a, const struct lat_snap *b)
{
	uint64_t n = 0;
	for (int i = 0; i < D.nworkers; i++)
		n += b->ops[i] - a->ops[i];
	return n;
}

/* "op_counts":{..} and (timing on) "latency":{..} between two snapshots;
 * max_ns is win_max when window is set, else b's (the interval's). */
static void emit_op_stats(struct jw *w, const struct lat_snap *a, const struct lat_snap *b,
			  bool window, bool buckets)
{
	struct lat_agg d[LS_MAX_OPTYPES];
	for (int k = 0; k < D.nops; k++) {
		lat_diff(a, b, k, &d[k]);
		if (window)
			d[k].max_ns = win_max[k];
	}
	jw_key(w, "op_counts");
	jw_obj(w);
	for (int k = 0; k < D.nops; k++)
		jw_ku64(w, D.op_names[k],
			D.nops == 1 && D.no_latency ? ops_between(a, b)
						    : d[k].count);
	jw_obj_end(w);
	jw_key(w, "latency");
	if (D.no_latency) {
		jw_null(w);
		return;
	}
	jw_obj(w);
	for (int k = 0; k < D.nops; k++) {
		jw_key(w, D.op_names[k]);
		lat_emit(w, &d[k], buckets);
	}
	jw_obj_end(w);
}

static void emit_time_event(const char *ev, uint64_t t)
{
	struct jw *w = ev_begin(ev);
	jw_ku64(w, "t_ns", t);
	emit();
}

/* {"event":"progress","t_ns":T,"ops":[cumulative ops of each worker],
 *  "interval_s":..,"interval_ops":..,"ops_per_sec":..,"op_counts":{..},
 *  "latency":{op:{count,mean_ns,p50_ns,p99_ns,max_ns}}|null}
 * for the interval from snapshot prev to snapshot cur. */
static void emit_progress(const struct lat_snap *prev,
			  const struct lat_snap *cur)
{
	double dt = ls_ns_to_s(cur->t_ns - prev->t_ns);
	uint64_t n = ops_between(prev, cur);

	struct jw *w = ev_begin("progress");
	jw_ku64(w, "t_ns", cur->t_ns);
	jw_key(w, "ops");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++)
		jw_u64(w, cur->ops[i]);
	jw_arr_end(w);
	jw_kdouble(w, "interval_s", dt);
	jw_ku64(w, "interval_ops", n);
	jw_kdouble(w, "ops_per_sec", dt > 0 ? (double)n / dt : 0.0);
	emit_op_stats(w, prev, cur, false, false);
	emit();
}

static void emit_cpus(struct jw *w)
{
	jw_key(w, "cpus");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++)
		jw_i64(w, D.wcpu[i]);
	jw_arr_end(w);
}

static void emit_ready(const struct ls_run *run, double setup_s)
{
	struct ls_strlist paths = { 0 };

	if (D.wl->watch_paths)
		D.wl->watch_paths(run, &paths);
	struct jw *w = ev_begin("ready");
	jw_kstr(w, "workload", D.wl->name);
	jw_ki64(w, "workers", D.nworkers);
	jw_ki64(w, "pid", getpid());
	jw_key(w, "worker_pids");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++)
		jw_i64(w, D.shm->ws[i].pid);
	jw_arr_end(w);
	jw_key(w, "worker_tids");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++)
		jw_i64(w, D.shm->ws[i].tid);
	jw_arr_end(w);
	emit_cpus(w);
	jw_kbool(w, "oversubscribed", D.oversub);
	jw_kdouble(w, "setup_s", setup_s);
	jw_key(w, "watch_paths");
	jw_arr(w);
	for (size_t i = 0; i < paths.n; i++)
		jw_utf8(w, paths.v[i]);
	jw_arr_end(w);
	emit();
	ls_strlist_free(&paths);
}

static int run(void)
{
	static struct lat_snap sn0, sn1, snp[2];
	lat_snap_init(&sn0, D.nworkers);
	lat_snap_init(&sn1, D.nworkers);
	lat_snap_init(&snp[0], D.nworkers);
	lat_snap_init(&snp[1], D.nworkers);
	const uint64_t *s0 = sn0.ops, *s1 = sn1.ops;

	D.wcpu = ls_xcalloc((size_t)D.nworkers, sizeof(*D.wcpu));
	for (int i = 0; i < D.nworkers; i++)
		D.wcpu[i] = D.cpu_list[i % D.ncpu_list];
	D.oversub = D.nworkers > D.ncpu_list;

	D.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (D.devnull < 0) {
		perror(LS_PROG ": error: /dev/null");
		return 1;
	}
	setup_signals();
	setup_shm();

	struct ls_run runinfo = {
		.dir = D.have_dir ? D.dir : NULL,
		.nworkers = D.nworkers,
		.warmup_s = D.warmup_s,
		.duration_s = D.duration_s,
		.shm = D.shm,
		.param = D.param,
	};
	struct ls_worker_args args = {
		.param = D.param,
		.wl = D.wl,
		.shm = D.shm,
		.dir = runinfo.dir,
		.nworkers = D.nworkers,
		.warmup_s = D.warmup_s,
		.duration_s = D.duration_s,
		.wcpu = D.wcpu,
	};

	/* 1. set-up: shared objects, then workers (private set-up, barrier) */
	uint64_t t_setup = ls_now_ns();
	if (D.wl->shared_setup) {
		struct ls_err e = { .err = 0 };
		if (D.wl->shared_setup(&runinfo, &e) != 0) {
			report_error(-1, e.op, e.path, e.err, strerror(e.err));
			return 1;
		}
	}
	start_workers(&args);
	wait_event(NO_DEADLINE, W_READY, NULL, 0);
	double setup_s = ls_ns_to_s(ls_now_ns() - t_setup);
	emit_ready(&runinfo, setup_s);
	if (D.control)
		wait_for_line("go");

	/* 2. release the workers, warm up */
	uint64_t t_go = ls_now_ns();
	atomic_store(&D.shm->go, 1);
	ls_futex_wake(&D.shm->go, INT_MAX);
	wait_event(t_go + (uint64_t)(D.warmup_s * 1e9), 0, NULL, 0);

	/* 3./4. measurement window, with progress events every interval */
	uint64_t t0 = snapshot(&sn0);
	memset(win_max, 0, sizeof(win_max)); /* the window's maxima only */
	emit_time_event("measure_start", t0);
	uint64_t t_end = t0 + (uint64_t)(D.duration_s * 1e9);
	const struct lat_snap *prev = &sn0;
	if (D.interval_s > 0) {
		uint64_t step = (uint64_t)(D.interval_s * 1e9);
		int flip = 0;
		for (uint64_t next = t0 + step; next < t_end; next += step) {
			wait_event(next, 0, NULL, 0);
			struct lat_snap *cur = &snp[flip ^= 1];
			snapshot(cur);
			emit_progress(prev, cur);
			prev = cur;
		}
	}
	wait_event(t_end, 0, NULL, 0);
	uint64_t t1 = snapshot(&sn1);
	/* the last (possibly shorter) interval ends with the window */
	if (D.interval_s > 0 && t1 - prev->t_ns > 1000000)
		emit_progress(prev, &sn1);
	emit_time_event("measure_end", t1);

	/* 5. control mode: keep running until "stop" */
	if (D.control) {
		wait_for_line("stop");
		D.stop_received = true;
	}

	/* 6. stop the workers */
	D.stopping = true;
	atomic_store(&D.shm->stop, 1);
	ls_futex_wake(&D.shm->stop, INT_MAX);
	atomic_store(&D.shm->go, 1); /* in case one is still at the barrier */
	ls_futex_wake(&D.shm->go, INT_MAX);
	if (wait_event(ls_now_ns() + STOP_GRACE_NS, W_EXITED, NULL, 0) !=
	    EV_EXITED) {
		fprintf(stderr, LS_PROG ": warning: %d worker process(es) did not "
				"stop within 2 s; killing them\n", D.nalive);
		kill_all_and_reap();
	}
	if (report_recorded_errors() > 0)
		return 1;

	/* result */
	double dur = ls_ns_to_s(t1 - t0);
	uint64_t total = 0;
	for (int i = 0; i < D.nworkers; i++)
		total += s1[i] - s0[i];

	struct jw *w = ev_begin("result");
	jw_kstr(w, "workload", D.wl->name);
	jw_ki64(w, "workers", D.nworkers);
	jw_kdouble(w, "duration_s", dur);
	jw_kdouble(w, "warmup_s", ls_ns_to_s(t0 - t_go));
	jw_kdouble(w, "setup_s", setup_s);
	jw_ku64(w, "ops", total);
	jw_kdouble(w, "ops_per_sec", dur > 0 ? (double)total / dur : 0.0);
	jw_kbool(w, "oversubscribed", D.oversub);
	emit_cpus(w);
	jw_key(w, "params");
	jw_obj(w);
	for (int k = 0; D.wl->params && D.wl->params[k].name; k++)
		jw_ki64(w, D.wl->params[k].name, D.param[k]);
	jw_obj_end(w);
	jw_kutf8(w, "latency_clock",
		 D.no_latency ? NULL : ls_tsc_mult ? "TSC" : "CLOCK_MONOTONIC");
	emit_op_stats(w, &sn0, &sn1, true, true);
	jw_ku64(w, "measure_start_ns", t0);
	jw_ku64(w, "measure_end_ns", t1);
	jw_key(w, "per_worker");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++) {
		struct ls_wstate *ws = &D.shm->ws[i];
		bool ran_out = atomic_load(&ws->ran_out) != 0;
		uint64_t ops = s1[i] - s0[i];
		jw_obj(w);
		jw_ki64(w, "worker", i);
		jw_ki64(w, "cpu", D.wcpu[i]);
		jw_ki64(w, "pid", ws->pid);
		jw_ki64(w, "tid", ws->tid);
		jw_ku64(w, "ops", ops);
		jw_kdouble(w, "ops_per_sec", dur > 0 ? (double)ops / dur : 0.0);
		jw_kbool(w, "ran_out", ran_out);
		jw_kbool(w, "ran_out_in_window",
			 ran_out && ws->ran_out_ns <= t1);
		jw_kdouble(w, "setup_s", ls_ns_to_s(ws->setup_ns));
		if (D.wl->reports_precreated)
			jw_ku64(w, "precreated", ws->precreated);
		if (D.wl->aux_key)
			jw_ku64(w, D.wl->aux_key, ws->aux);
		jw_obj_end(w);
		if (ran_out && ws->ran_out_ns <= t1)
			fprintf(stderr, LS_PROG ": warning: worker %d ran out of pre-created "
					"work during the measurement\n", i);
	}
	jw_arr_end(w);
	emit();
	return 0;
}

int main(int argc, char **argv)
{
	/* Never outlive the orchestrator. */
	pid_t ppid = getppid();
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
		perror(LS_PROG ": error: prctl(PR_SET_PDEATHSIG)");
		return 1;
	}
	if (getppid() != ppid)
		return 1; /* parent already gone */

	if (argc >= 2 && (strcmp(argv[1], "-h") == 0 ||
			  strcmp(argv[1], "--help") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
		if (argc > 2)
			bad_input("--list takes no arguments (got '%s')", argv[2]);
		print_list();
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "run") == 0) {
		parse_run_args(argc, argv);
		return run();
	}
	if (argc < 2)
		bad_input("missing command: expected --list or run (see --help)");
	bad_input("unknown command '%s': expected --list or run (see --help)",
		  argv[1]);
}
