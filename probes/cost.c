// SPDX-License-Identifier: MIT
/* lockscope's own cost over a window: see cost.h. The kernel counts a
 * program's run time (bpf_prog_info run_time_ns, run_cnt) only while BPF
 * stats are on (BPF_ENABLE_STATS: an fd, off again when it closes), at two
 * clock reads per run: on MWRM's ~700,000 runs a second that cost the
 * workload 1.7 points side by side (bench/README.md). So they are on for
 * STATS_ON_MS of every STATS_PERIOD_MS of the window only (from its start),
 * and the counts are scaled by the window over the time they were on. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/types.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "cost.h"
#include "budget.h"
#include "trapcost.skel.h"

#define MAX_OBJECTS 8
#define MAX_PROGRAMS 64
#define STATS_ON_MS 200
#define STATS_PERIOD_MS 1000

static struct bpf_object *objects[MAX_OBJECTS];
static int nobjects;

/* a program's counts, by its fd: at the last turn-on (base), and added up
 * over the stretches the stats were on (sum) */
struct prog_counts {
	int fd;
	__u64 base_ns, base_runs;
	__u64 run_ns, runs;
	__u64 recursion_misses;
	bool read;
};
static struct prog_counts counts[MAX_PROGRAMS];
static int ncounts;
static int stats_fd = -1;
static int stats_err;              /* why the kernel did not count run times (errno), 0: it did */
static __u64 cpu_ns[2];            /* the loader's CPU time at start and stop */
static __u64 t_window[2];          /* the window's start and stop */
static __u64 on_since, off_since;  /* the stats on since (0: off), off since */
static __u64 on_ns;                /* the time they were on in the window */
static __u64 trap_ns;              /* one uprobe trap's price (cost_calibrate_traps); 0: not measured */
static char trap_why[160];         /* why not */

static __u64 clock_ns(clockid_t id);

#define TRAP_CALLS 200             /* calls of the target per batch */
#define TRAP_BATCHES 5             /* batches each way: the medians are compared */

/* the function the calibration's uprobe sits on: a call that does nothing
 * (global and not inlined: the uprobe finds it by its symbol) */
__attribute__((noinline)) void lksc_trap_target(void);
__attribute__((noinline)) void lksc_trap_target(void)
{
	__asm__ volatile("" ::: "memory");
}

static int cmp_u64(const void *a, const void *b)
{
	__u64 x = *(const __u64 *)a, y = *(const __u64 *)b;

	return x < y ? -1 : x > y;
}

/* the median time of a batch of TRAP_CALLS calls of the target, in ns */
static __u64 batch_ns(void)
{
	__u64 t[TRAP_BATCHES];

	for (int b = 0; b < TRAP_BATCHES; b++) {
		__u64 t0 = clock_ns(CLOCK_MONOTONIC);

		for (int i = 0; i < TRAP_CALLS; i++)
			lksc_trap_target();
		t[b] = clock_ns(CLOCK_MONOTONIC) - t0;
	}
	qsort(t, TRAP_BATCHES, sizeof(t[0]), cmp_u64);
	return t[TRAP_BATCHES / 2];
}

static struct trapcost_bpf *trap_skel;
static int trap_load_err;
static struct bpf_link *trap_link;
static pthread_t trap_release;
static bool trap_released;

static void *release_trap(void *unused)
{
	(void)unused;
	bpf_link__destroy(trap_link);
	trapcost_bpf__destroy(trap_skel);
	trap_link = NULL;
	trap_skel = NULL;
	return NULL;
}

void cost_trap_load(void)
{
	trap_skel = trapcost_bpf__open_and_load();
	trap_load_err = trap_skel ? 0 : errno;
}

void cost_calibrate_traps(void)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = "lksc_trap_target");
	struct bpf_link *link;
	__u64 plain, trapped;

	if (!trap_skel) {
		snprintf(trap_why, sizeof(trap_why), "the no-op uprobe did not load: %s",
			 trap_load_err ? strerror(trap_load_err) : "not loaded");
		return;
	}
	plain = batch_ns();
	link = bpf_program__attach_uprobe_opts(trap_skel->progs.lksc_trap_noop, 0, "/proc/self/exe", 0, &opts);
	if (!link) {
		snprintf(trap_why, sizeof(trap_why), "the no-op uprobe did not attach to the loader: %s",
			 strerror(errno));
	} else {
		trapped = batch_ns();
		trap_ns = trapped > plain ? (trapped - plain) / TRAP_CALLS : 0;
		if (!trap_ns)
			snprintf(trap_why, sizeof(trap_why), "a trap cost nothing measurable");
	}
	/* a uprobe's detach waits for an RCU grace period (~0.1 s here): the
	 * loader is ready meanwhile (nothing calls the target any more) */
	trap_link = link;
	trap_released = pthread_create(&trap_release, NULL, release_trap, NULL) == 0;
	if (!trap_released)
		release_trap(NULL);
}

void cost_release(void)
{
	if (trap_released)
		pthread_join(trap_release, NULL);
	trap_released = false;
}

/* registered from the loads' threads too (optional.c) */
static pthread_mutex_t objects_lock = PTHREAD_MUTEX_INITIALIZER;

void cost_register(struct bpf_object *obj)
{
	pthread_mutex_lock(&objects_lock);
	if (obj && nobjects < MAX_OBJECTS)
		objects[nobjects++] = obj;
	pthread_mutex_unlock(&objects_lock);
}

void cost_unregister(struct bpf_object *obj)
{
	pthread_mutex_lock(&objects_lock);
	for (int i = 0; i < nobjects; i++)
		if (objects[i] == obj) {
			objects[i] = objects[--nobjects];
			break;
		}
	pthread_mutex_unlock(&objects_lock);
}

static __u64 clock_ns(clockid_t id)
{
	struct timespec ts;

	if (clock_gettime(id, &ts))
		return 0;
	return (__u64)ts.tv_sec * 1000000000ULL + (__u64)ts.tv_nsec;
}

/* a program's counts, NULL when it has none (yet) */
static struct prog_counts *find_counts(int fd)
{
	for (int i = 0; i < ncounts; i++)
		if (counts[i].fd == fd)
			return &counts[i];
	return NULL;
}

/* a program's counts, made when it has none */
static struct prog_counts *counts_of(int fd)
{
	struct prog_counts *c = find_counts(fd);

	if (c)
		return c;
	if (ncounts == MAX_PROGRAMS)
		return NULL;
	memset(&counts[ncounts], 0, sizeof(counts[0]));
	counts[ncounts].fd = fd;
	return &counts[ncounts++];
}

/* attached as a uprobe or USDT probe: a trap at every run */
static bool is_uprobe(const struct bpf_program *prog)
{
	const char *sec = bpf_program__section_name(prog);

	return !strncmp(sec, "uprobe", 6) || !strncmp(sec, "uretprobe", 9) || !strncmp(sec, "usdt", 4);
}

/* what the programs ran in one stretch of the stats on */
struct stretch {
	__u64 run_ns, runs, uprobe_runs;
};

/* every registered program's counts now: the base (at a turn-on), or added
 * to the sums since it (at a turn-off, and to the stretch's `s`) */
static void read_counts(bool base, struct stretch *s)
{
	struct bpf_program *prog;

	for (int i = 0; i < nobjects; i++)
		bpf_object__for_each_program(prog, objects[i]) {
			struct bpf_prog_info info = {};
			__u32 len = sizeof(info);
			int fd = bpf_program__fd(prog);
			struct prog_counts *c = fd >= 0 ? counts_of(fd) : NULL;

			if (!c || bpf_obj_get_info_by_fd(fd, &info, &len))
				continue;
			c->recursion_misses = info.recursion_misses;
			c->read = true;
			if (base) {
				c->base_ns = info.run_time_ns;
				c->base_runs = info.run_cnt;
			} else {
				c->run_ns += info.run_time_ns - c->base_ns;
				c->runs += info.run_cnt - c->base_runs;
				if (s) {
					s->run_ns += info.run_time_ns - c->base_ns;
					s->runs += info.run_cnt - c->base_runs;
					if (is_uprobe(prog))
						s->uprobe_runs += info.run_cnt - c->base_runs;
				}
			}
		}
}

static __u64 period_start;         /* the last period's end (the window's start at first) */
static __u64 period_cpu;           /* the loader's CPU time then */

/* a period ends with each stretch the stats were on: its cost, the
 * stretch's counts scaled to the period, to the budget (budget.c) */
static void period_end(__u64 now, __u64 on_len, const struct stretch *s, bool last)
{
	__u64 cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	__u64 period = now - period_start;
	double scale = on_len ? (double)period / on_len : 0;

	budget_period(now, period, (__u64)(s->run_ns * scale), (__u64)(s->runs * scale),
		      (__u64)(s->uprobe_runs * scale * trap_ns),
		      cpu > period_cpu ? cpu - period_cpu : 0, last);
	period_start = now;
	period_cpu = cpu;
}

static void stats_on(__u64 now)
{
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats_fd < 0) {
		stats_err = errno ? errno : EINVAL;
		return;
	}
	read_counts(true, NULL);
	on_since = now;
}

static void stats_off(__u64 now, bool last)
{
	struct stretch s = {};
	__u64 on_len;

	if (!on_since)
		return;
	read_counts(false, &s);
	close(stats_fd);
	stats_fd = -1;
	on_len = now - on_since;
	on_ns += on_len;
	on_since = 0;
	off_since = now;
	period_end(now, on_len, &s, last);
}

void cost_start(void)
{
	ncounts = 0;
	stats_err = 0;
	on_ns = on_since = 0;
	read_counts(true, NULL);           /* every program listed, timed or not */
	cpu_ns[0] = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	t_window[0] = clock_ns(CLOCK_MONOTONIC);
	period_start = t_window[0];
	period_cpu = cpu_ns[0];
	budget_start(t_window[0]);
	stats_on(t_window[0]);
}

void cost_tick(void)
{
	__u64 now = clock_ns(CLOCK_MONOTONIC);

	if (on_since && now - on_since >= STATS_ON_MS * 1000000ULL)
		stats_off(now, false);
	else if (!on_since && !stats_err && stats_fd < 0 &&
		 now - off_since >= (STATS_PERIOD_MS - STATS_ON_MS) * 1000000ULL)
		stats_on(now);
}

void cost_stop(void)
{
	t_window[1] = clock_ns(CLOCK_MONOTONIC);
	cpu_ns[1] = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	stats_off(t_window[1], true);
}

/* a row of "programs": a program's name, what the kernel skipped, and its
 * run time and runs over the window: counted while the stats were on,
 * scaled to the window (scale: the window over that time; 0: not counted) */
struct prog_row {
	const char *name;
	const struct prog_counts *c;
	double scale;
	bool uprobe;          /* attached as a uprobe or USDT probe: a trap at every run */
};

void cost_json(struct jw *w)
{
	struct bpf_program *prog;

	jw_key(w, "programs");
	jw_arr(w);
	for (int i = 0; i < nobjects; i++)
		bpf_object__for_each_program(prog, objects[i]) {
			const struct prog_counts *c = find_counts(bpf_program__fd(prog));

			if (!c || !c->read)
				continue;
			struct prog_row r = { .name = bpf_program__name(prog), .c = c,
					      .scale = on_ns ? (double)(t_window[1] - t_window[0]) / on_ns : 0,
					      .uprobe = is_uprobe(prog) };
			EMIT_ROW_PROGRAMS(w, &r);
		}
	jw_arr_end(w);
	jw_key(w, "cost");
	jw_obj(w);
	jw_kbool(w, "bpf_stats", !stats_err && on_ns);
	if (stats_err) {
		char why[160];

		snprintf(why, sizeof(why), "the kernel's BPF stats could not be turned on (BPF_ENABLE_STATS: %s)",
			 strerror(stats_err));
		jw_kstr(w, "reason", why);
	}
	if (t_window[1] > t_window[0])     /* the share of the window they were on */
		jw_kdouble(w, "bpf_stats_share", (double)on_ns / (t_window[1] - t_window[0]));
	jw_ku64(w, "loader_cpu_ns", cpu_ns[1] > cpu_ns[0] ? cpu_ns[1] - cpu_ns[0] : 0);
	if (trap_ns)
		jw_ku64(w, "uprobe_trap_ns", trap_ns);
	else
		jw_kstr(w, "uprobe_trap_reason", trap_why[0] ? trap_why : "not measured");
	budget_json(w);
	jw_obj_end(w);
}
