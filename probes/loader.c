// SPDX-License-Identifier: MIT
/*
 * lockscope-probe: loads the lock-contention and off-CPU probes, takes
 * commands on stdin and answers with one JSON object per line on stdout.
 *
 * This file: options, the kernel check, loading and attaching, the poll loop
 * and teardown. The commands (track, untrack, watch, start, stop, quit) are
 * in commands.c, the reading of the maps into the "data" event in
 * collect.c, the time series in series.c, the optional probes in optional.c.
 * The probes are released when the process exits, however it exits: nothing
 * is pinned.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <linux/perf_event.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "cost.h"
#include "budget.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "loader.h"
#include "tasks.h"
#include "commands.h"
#include "collect.h"
#include "layout.h"
#include "series.h"
#include "objects.h"
#include "futex.h"
#include "filelocks.h"
#include "optional.h"
#include "gomutex.h"
#include "pyframes.h"
#include "jvmmon.h"
#include "contention.skel.h"
#include "objects.skel.h"

struct options {
	bool system_wide, futex;
	long interval_ms, stack_rate, sample_hz, series_ms, timed_rate;
	double max_overhead;      /* percent of the machine's CPUs; 0: no budget */
};

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

/* ---- set-up -------------------------------------------------------------- */

/* cpu-clock sampling on every CPU, at a fixed period */
static int attach_sampling(struct probe *p, long hz)
{
	if (!hz)
		return 0;
	p->sample_period_ns = 1000000000ULL / (uint64_t)hz;
	p->sample_links = calloc(p->ncpus, sizeof(*p->sample_links));
	if (!p->sample_links)
		return -ENOMEM;
	for (int cpu = 0; cpu < p->ncpus; cpu++) {
		struct perf_event_attr attr = {
			.type = PERF_TYPE_SOFTWARE,
			.config = PERF_COUNT_SW_CPU_CLOCK,
			.size = sizeof(attr),
			.sample_period = p->sample_period_ns,
		};
		int fd = (int)syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);

		if (fd < 0) {
			if (errno == ENODEV)
				continue;       /* possible but offline CPU */
			return -errno;
		}
		p->sample_links[cpu] = bpf_program__attach_perf_event(p->cskel->progs.lksc_cpu_sample, fd);
		if (!p->sample_links[cpu]) {
			int err = -errno;

			close(fd);
			return err;
		}
	}
	return 0;
}

/* the tracepoints we attach to, checked by name for a clear message; and
 * the lock layout read from the same BTF */
static int preflight(void)
{
	static const char *const need[][2] = {
		{ "btf_trace_contention_begin", "lock:contention_begin" },
		{ "btf_trace_contention_end", "lock:contention_end" },
		{ "btf_trace_sched_switch", "sched:sched_switch" },
	};
	struct btf *btf = btf__load_vmlinux_btf();
	int err = 0;

	if (!btf) {
		err = -errno;
		emit_error("preflight", err, "cannot read the kernel's BTF (/sys/kernel/btf/vmlinux): %s",
			   strerror(-err));
		return err;
	}
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		if (btf__find_by_name_kind(btf, need[i][0], BTF_KIND_TYPEDEF) < 0) {
			emit_error("preflight", ENOENT, "this kernel has no %s tracepoint", need[i][1]);
			err = -ENOENT;
			break;
		}
	}
	layout_read(btf);
	btf__free(btf);
	return err;
}

/* the object iterators, sharing contention.bpf.c's tracked map */
static int load_objects(struct probe *p, bool system_wide)
{
	int err;

	p->oskel = objects_bpf__open();
	if (!p->oskel)
		return -errno;
	p->oskel->rodata->self_tgid = (__u32)getpid();
	p->oskel->rodata->system_wide = system_wide;
	err = bpf_map__reuse_fd(p->oskel->maps.tracked, bpf_map__fd(p->cskel->maps.tracked));
	if (err)
		return err;
	err = objects_bpf__load(p->oskel);
	if (err)
		return err;
	p->files_iter = bpf_program__attach_iter(p->oskel->progs.lksc_iter_files, NULL);
	if (!p->files_iter)
		return -errno;
	p->tasks_iter = bpf_program__attach_iter(p->oskel->progs.lksc_iter_tasks, NULL);
	if (!p->tasks_iter)
		return -errno;
	p->sbs_iter = bpf_program__attach_iter(p->oskel->progs.lksc_iter_sbs, NULL);
	if (!p->sbs_iter)
		return -errno;
	return 0;
}

/* a rate per second per CPU as the BPF side counts it: per 10 ms window (0: no limit) */
static __u32 per_window(long rate)
{
	return rate ? (__u32)((rate + 99) / 100) : 0;
}

static struct probe *budget_probe;

/* a step of the cost budget (budget.c), applied to the running probe */
static void budget_apply(enum budget_knob knob, long value)
{
	struct probe *p = budget_probe;

	switch (knob) {
	case KNOB_STACK_RATE: p->cskel->data->stack_budget = per_window(value); break;
	case KNOB_TIMED_RATE: p->cskel->data->timed_per_window = per_window(value); break;
	case KNOB_OBJECTS_MS: p->objects_ms = value; break;
	default: break;
	}
}

static int load(struct probe *p, const struct options *o)
{
	int err;

	p->cskel = contention_bpf__open();
	if (!p->cskel)
		return -errno;
	p->cskel->rodata->system_wide = o->system_wide;
	p->cskel->rodata->nr_futex = __NR_futex;
	p->cskel->rodata->nr_futex_waitv = __NR_futex_waitv;
	p->cskel->rodata->nr_nanosleep = __NR_nanosleep;
	p->cskel->rodata->nr_clock_nanosleep = __NR_clock_nanosleep;
	/* per second per CPU -> per 10 ms window; 0 walks every stack */
	p->cskel->data->stack_budget = per_window(o->stack_rate);
	p->cskel->data->timed_per_window = per_window(o->timed_rate);
	/* sched_switch's futex part (futexwaits.bpf.h); without it, its maps
	 * take no memory */
	p->cskel->rodata->futex_on = o->futex;
	if (!o->futex) {
		bpf_map__set_max_entries(p->cskel->maps.futex_open, 1);     /* preallocated */
		bpf_map__set_max_entries(p->cskel->maps.futex_stats, 1);
		bpf_map__set_max_entries(p->cskel->maps.futex_lock_stats, 1);
		bpf_map__set_max_entries(p->cskel->maps.futex_seen, 1);
		bpf_map__set_max_entries(p->cskel->maps.user_stacks, 1);
		bpf_map__set_max_entries(p->cskel->maps.user_stack_copies, 1);
	}
	err = contention_bpf__load(p->cskel);
	if (err)
		return err;
	err = contention_bpf__attach(p->cskel);
	if (err)
		return err;
	cost_register(p->cskel->obj);
	err = attach_sampling(p, o->sample_hz);
	if (err)
		return err;
	/* futex waits, per-thread times, slab caches: not fatal (the data event
	 * says why one is unavailable); half of them load in a thread while the
	 * object iterators and the trap calibration's program load here */
	optional_begin(p->cskel, o->system_wide, o->futex, p->ncpus);
	err = load_objects(p, o->system_wide);
	if (!err)
		cost_trap_load();
	optional_end(o->futex);
	return err;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lockscope-probe [--system-wide] [--interval-ms N] [--stack-rate N] [--sample-hz N]\n"
		"                       [--series-ms N] [--timed-rate N] [--max-overhead PCT] [--futex]\n"
		"  --series-ms N   keep the cumulative wait per lock every N ms while counting,\n"
		"                  emitted with the data (default 250; 0: none)\n"
		"  --stack-rate N  kernel stacks walked per second per CPU once each lock has\n"
		"                  a few (default 500; 0: a stack for every wait)\n"
		"  --sample-hz N   on-CPU samples per second per CPU (default 49; 0: none)\n"
		"  --timed-rate N  spin and mutex waits timed per second per CPU; beyond it a\n"
		"                  random sample is timed and stands for the rest (default\n"
		"                  10000; 0: every wait timed)\n"
		"  --max-overhead PCT  the probe's cost budget, in percent of the machine's CPUs:\n"
		"                  measured each second while counting, and over it the stack\n"
		"                  and timed-wait rates and the objects' period are lowered\n"
		"                  step by step (the data's cost.shed); default: none\n"
		"  --futex         also trace futex waits (user-space locks) by address and user stack\n"
		"Commands on stdin: track PID | untrack PID | watch PATH | start | stop | quit.\n"
		"Events on stdout, one JSON object per line.\n");
}

/* -1 to go on, else the exit status */
static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option opts[] = {
		{ "system-wide", no_argument, NULL, 's' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ "stack-rate", required_argument, NULL, 'r' },
		{ "sample-hz", required_argument, NULL, 'f' },
		{ "series-ms", required_argument, NULL, 'S' },
		{ "timed-rate", required_argument, NULL, 'T' },
		{ "futex", no_argument, NULL, 'u' },
		{ "max-overhead", required_argument, NULL, 'B' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int opt;

	while ((opt = getopt_long(argc, argv, "si:r:f:S:T:B:uh", opts, NULL)) != -1) {
		switch (opt) {
		case 's': o->system_wide = true; break;
		case 'i': o->interval_ms = strtol(optarg, NULL, 10); break;
		case 'r': o->stack_rate = strtol(optarg, NULL, 10); break;
		case 'f': o->sample_hz = strtol(optarg, NULL, 10); break;
		case 'S': o->series_ms = strtol(optarg, NULL, 10); break;
		case 'T': o->timed_rate = strtol(optarg, NULL, 10); break;
		case 'u': o->futex = true; break;
		case 'B': o->max_overhead = strtod(optarg, NULL); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (o->interval_ms <= 0 || o->stack_rate < 0 || o->sample_hz < 0 || o->sample_hz > 100000 ||
	    o->series_ms < 0 || o->timed_rate < 0 || !(o->max_overhead >= 0 && o->max_overhead < 100)) {
		fprintf(stderr, "lockscope-probe: --interval-ms must be > 0, --stack-rate and --timed-rate >= 0, "
			"--sample-hz between 0 and 100000, --max-overhead between 0 and 100\n");
		return 2;
	}
	return -1;
}

/* SIGINT, SIGTERM and SIGHUP arrive on the returned signalfd */
static int block_signals(void)
{
	sigset_t mask;

	/* nothing outlives the orchestrator */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &mask, SFD_CLOEXEC);
}

static void emit_ready(const struct probe *p, const struct options *o)
{
	struct jw out;

	jw_event_begin(&out, stdout, "ready");
	jw_ku64(&out, "pid", (uint64_t)getpid());
	jw_kbool(&out, "system_wide", o->system_wide);
	jw_ku64(&out, "ncpus", p->ncpus);
	jw_ku64(&out, "stack_depth", MAX_STACK_DEPTH);
	jw_ku64(&out, "stack_rate", (uint64_t)o->stack_rate);
	jw_ku64(&out, "timed_rate", (uint64_t)o->timed_rate);
	jw_ku64(&out, "sample_period_ns", p->sample_period_ns);
	jw_kbool(&out, "futex", futex_attached());
	jw_event_end(&out);
}

/* load everything and say "ready"; 0 or the exit status */
static int setup(struct probe *p, const struct options *o)
{
	int err;

	libbpf_set_print(libbpf_print);
	p->ncpus = libbpf_num_possible_cpus();
	if (p->ncpus <= 0 || objects_init()) {
		emit_error("init", ENOMEM, "cannot size per-CPU buffers");
		return 1;
	}
	if (preflight())
		return 1;
	err = load(p, o);
	if (err) {
		emit_error("load", err, "loading the BPF probes failed: %s", strerror(-err));
		return 1;
	}
	cost_calibrate_traps();   /* a uprobe trap's price, before any window (a few ms), all loads done */
	emit_ready(p, o);
	return 0;
}

/* ---- poll loop and teardown ---------------------------------------------- */

/* while counting: a time-series snapshot every tick, and the objects (which
 * come and go during a run) every interval */
static void on_tick(struct probe *p, uint64_t *last_objects)
{
	uint64_t now = now_ns();

	gomutex_scan(bpf_map__fd(p->cskel->maps.tracked));  /* Go programs exec'd since */
	pyframes_scan(bpf_map__fd(p->cskel->maps.tracked)); /* CPython interpreters likewise */
	jvmmon_scan(bpf_map__fd(p->cskel->maps.tracked));   /* and JVMs whose monitors EnterI names */
	tasks_drain();                                      /* wake-up edges out of their map */
	if (p->series_ms)
		series_snapshot(bpf_map__fd(p->cskel->maps.lock_stats),
				bpf_map__fd(p->cskel->maps.offcpu_stats), p->ncpus, now - p->t_start);
	if (now - (*last_objects > p->t_start ? *last_objects : p->t_start) >=
	    (uint64_t)p->objects_ms * 1000000ULL) {
		collect_objects(p);
		futex_snapshot_maps();
		filelocks_snapshot_maps();
		collect_sample_maps(p, false);
		*last_objects = now;
	}
}

struct input {
	char buf[8192];
	size_t have;
};

/* read stdin and run the complete lines; false at end of input or quit */
static bool read_commands(struct probe *p, struct input *in, const char **reason)
{
	ssize_t r = read(STDIN_FILENO, in->buf + in->have, sizeof(in->buf) - 1 - in->have);
	char *line = in->buf, *nl;

	if (r <= 0) {
		*reason = "end of input";
		return false;
	}
	in->have += (size_t)r;
	in->buf[in->have] = '\0';
	while ((nl = strchr(line, '\n'))) {
		*nl = '\0';
		if (!handle_line(p, line))
			return false;
		line = nl + 1;
	}
	in->have -= (size_t)(line - in->buf);
	memmove(in->buf, line, in->have);
	if (in->have == sizeof(in->buf) - 1) {
		emit_error("command", E2BIG, "command line too long");
		in->have = 0;
	}
	return true;
}

#define DRAIN_MS 50          /* between looks at the wake-up map, within a tick */

/* until quit, end of input or a signal; the exit status */
static int poll_loop(struct probe *p, int sfd, long interval_ms, const char **reason)
{
	static struct input in;
	uint64_t last_objects = 0, last_tick = now_ns();

	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = STDIN_FILENO, .events = POLLIN },
			{ .fd = sfd, .events = POLLIN },
		};
		long tick = p->series_ms && p->series_ms < interval_ms ? p->series_ms : interval_ms;
		int n = poll(pfd, 2, p->enabled ? (int)(tick < DRAIN_MS ? tick : DRAIN_MS) : -1);

		if (n < 0 && errno != EINTR) {
			*reason = "poll failed";
			return 1;
		}
		if (p->enabled)
			cost_tick();      /* the kernel's BPF stats on or off (cost.c) */
		if (n == 0) {
			uint64_t now = now_ns();

			if (now - last_tick >= (uint64_t)tick * 1000000ULL) {
				on_tick(p, &last_objects);
				last_tick = now;
			} else {
				tasks_drain_wakeups();
			}
			continue;
		}
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) > 0)
				*reason = strsignal((int)si.ssi_signo);
			return 0;
		}
		if ((pfd[0].revents & (POLLIN | POLLHUP)) && !read_commands(p, &in, reason))
			return 0;
	}
}

static void teardown(struct probe *p)
{
	for (int cpu = 0; p->sample_links && cpu < p->ncpus; cpu++)
		bpf_link__destroy(p->sample_links[cpu]);
	bpf_link__destroy(p->files_iter);
	bpf_link__destroy(p->tasks_iter);
	bpf_link__destroy(p->sbs_iter);
	objects_bpf__destroy(p->oskel);
	optional_destroy();
	cost_release();
	if (p->cskel)
		cost_unregister(p->cskel->obj);
	contention_bpf__destroy(p->cskel);
	for (int i = 0; i < p->nwatch; i++)
		close(p->watch_fds[i]);
}

int main(int argc, char **argv)
{
	static struct probe p;
	struct options o = { .interval_ms = 1000, .stack_rate = 500, .timed_rate = 10000, .sample_hz = 49,
			     .series_ms = 250 };
	const char *reason = "quit";
	int sfd, rc = parse_options(argc, argv, &o);

	if (rc >= 0)
		return rc;
	p.series_ms = o.series_ms;
	p.objects_ms = o.interval_ms;
	budget_probe = &p;
	budget_init(o.max_overhead / 100, (const long[KNOB__MAX]){ [KNOB_STACK_RATE] = o.stack_rate,
		    [KNOB_TIMED_RATE] = o.timed_rate, [KNOB_OBJECTS_MS] = o.interval_ms },
		    (int)sysconf(_SC_NPROCESSORS_ONLN), budget_apply);
	sfd = block_signals();
	rc = setup(&p, &o);
	if (rc == 0)
		rc = poll_loop(&p, sfd, o.interval_ms, &reason);
	teardown(&p);
	if (!rc) {
		struct jw out;

		jw_event_begin(&out, stdout, "exit");
		jw_kstr(&out, "reason", reason);
		jw_event_end(&out);
	}
	return rc;
}
