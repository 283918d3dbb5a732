/* The command line: usage, bad input (exit 2) and the run options, checked
 * and stored into the driver's state. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"
#include "util.h"

void usage(FILE *f)
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
void bad_input(const char *fmt, ...)
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

/* The values of the run options, as given. */
struct run_opts {
	const char *workload, *workers, *duration, *warmup, *dir, *cpus;
	const char *interval;
	const char **params; /* --param KEY=VALUE, in order */
	int nparams;
};

/* The options that take a value, and where it goes. */
static const struct {
	const char *name;
	size_t off;
} value_options[] = {
	{ "--workload", offsetof(struct run_opts, workload) },
	{ "--workers", offsetof(struct run_opts, workers) },
	{ "--duration", offsetof(struct run_opts, duration) },
	{ "--warmup", offsetof(struct run_opts, warmup) },
	{ "--dir", offsetof(struct run_opts, dir) },
	{ "--cpus", offsetof(struct run_opts, cpus) },
	{ "--interval", offsetof(struct run_opts, interval) },
};

/* Where the value of option name (e.g. "--dir") goes. */
static const char **option_slot(struct run_opts *o, const char *name)
{
	for (size_t i = 0; i < sizeof(value_options) / sizeof(value_options[0]);
	     i++)
		if (strcmp(name, value_options[i].name) == 0)
			return (const char **)((char *)o + value_options[i].off);
	if (strcmp(name, "--param") == 0)
		return &o->params[o->nparams++];
	bad_input("unknown option '%s' (see --help)", name);
}

/* argv[2..]: flags into D, option values into o. */
static void collect_options(int argc, char **argv, struct run_opts *o)
{
	for (int i = 2; i < argc; i++) {
		const char *arg = argv[i];
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

		const char **slot = option_slot(o, name);
		if (!eq && i + 1 >= argc)
			bad_input("option %s needs a value", name);
		*slot = eq ? eq + 1 : argv[++i];
	}
}

/* --dir: an existing, writable directory, stored as its real path. */
static void check_dir(const char *dir)
{
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
}

void parse_run_args(int argc, char **argv)
{
	struct run_opts o = {
		.params = ls_xcalloc((size_t)argc, sizeof(*o.params)),
	};

	collect_options(argc, argv, &o);
	if (!o.workload)
		bad_input("missing --workload NAME (valid: %s)", valid_names());
	D.wl = ls_catalog_find(o.workload);
	if (!D.wl)
		bad_input("unknown workload '%s' (valid: %s)", o.workload,
			  valid_names());
	if (!o.workers)
		bad_input("missing --workers N");
	D.nworkers = parse_workers(o.workers, D.wl->max_workers ?
					      D.wl->max_workers : MAX_WORKERS);
	parse_params(D.wl, o.params, o.nparams);
	free(o.params);
	D.nops = 0;
	if (!D.wl->op_names)
		D.op_names[D.nops++] = "op";
	for (const char *const *op = D.wl->op_names; op && *op; op++)
		D.op_names[D.nops++] = *op;
	if (!o.duration)
		bad_input("missing --duration S");
	D.duration_s = parse_seconds("--duration", o.duration, false);
	D.warmup_s = o.warmup ? parse_seconds("--warmup", o.warmup, true) : 1.0;
	D.interval_s = o.interval ?
		       parse_seconds("--interval", o.interval, false) : 0.0;
	if (D.wl->needs_dir)
		check_dir(o.dir);
	/* else: --dir is accepted and ignored */
	if (o.cpus) {
		parse_cpus(o.cpus);
	} else {
		D.ncpu_list = ls_allowed_cpus(D.cpu_list, CPU_SETSIZE);
		if (D.ncpu_list <= 0)
			bad_input("sched_getaffinity: %s", strerror(errno));
	}
}
