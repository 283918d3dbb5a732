// SPDX-License-Identifier: MIT
/* lockscope's own cost over a window: see cost.h. The kernel counts a
 * program's run time (bpf_prog_info run_time_ns, run_cnt) only while BPF
 * stats are on (BPF_ENABLE_STATS: an fd, off again when it closes), at two
 * clock reads per run: on only while a window runs. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "cost.h"

#define MAX_OBJECTS 8
#define MAX_PROGRAMS 64

static struct bpf_object *objects[MAX_OBJECTS];
static int nobjects;

/* a program's counts at the window's start and stop, by its fd */
struct prog_counts {
	int fd;
	__u64 run_ns[2], runs[2];
	__u64 recursion_misses;
	bool read[2];
};
static struct prog_counts counts[MAX_PROGRAMS];
static int ncounts;
static int stats_fd = -1;
static int stats_err;              /* why the kernel did not count run times (errno), 0: it did */
static __u64 cpu_ns[2];            /* the loader's CPU time at start and stop */

void cost_register(struct bpf_object *obj)
{
	if (obj && nobjects < MAX_OBJECTS)
		objects[nobjects++] = obj;
}

void cost_unregister(struct bpf_object *obj)
{
	for (int i = 0; i < nobjects; i++)
		if (objects[i] == obj) {
			objects[i] = objects[--nobjects];
			return;
		}
}

static __u64 process_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts))
		return 0;
	return (__u64)ts.tv_sec * 1000000000ULL + (__u64)ts.tv_nsec;
}

static struct prog_counts *counts_of(int fd)
{
	for (int i = 0; i < ncounts; i++)
		if (counts[i].fd == fd)
			return &counts[i];
	if (ncounts == MAX_PROGRAMS)
		return NULL;
	memset(&counts[ncounts], 0, sizeof(counts[0]));
	counts[ncounts].fd = fd;
	return &counts[ncounts++];
}

/* every registered program's counts into slot k (0: start, 1: stop) */
static void read_counts(int k)
{
	struct bpf_program *prog;

	for (int i = 0; i < nobjects; i++)
		bpf_object__for_each_program(prog, objects[i]) {
			struct bpf_prog_info info = {};
			__u32 len = sizeof(info);
			struct prog_counts *c = counts_of(bpf_program__fd(prog));

			if (!c || bpf_program__fd(prog) < 0 || bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len))
				continue;
			c->run_ns[k] = info.run_time_ns;
			c->runs[k] = info.run_cnt;
			c->recursion_misses = info.recursion_misses;
			c->read[k] = true;
		}
}

void cost_start(void)
{
	ncounts = 0;
	if (stats_fd < 0) {
		stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
		stats_err = stats_fd < 0 ? (errno ? errno : EINVAL) : 0;
	}
	read_counts(0);
	cpu_ns[0] = process_cpu_ns();
}

void cost_stop(void)
{
	cpu_ns[1] = process_cpu_ns();
	read_counts(1);
	if (stats_fd >= 0) {
		close(stats_fd);
		stats_fd = -1;
	}
}

/* a row of "programs": a program's name, what the kernel skipped, and its
 * run time and runs over the window (counted only with BPF stats on) */
struct prog_row {
	const char *name;
	const struct prog_counts *c;
	bool timed;
};

void cost_json(struct jw *w)
{
	struct bpf_program *prog;

	jw_key(w, "programs");
	jw_arr(w);
	for (int i = 0; i < nobjects; i++)
		bpf_object__for_each_program(prog, objects[i]) {
			const struct prog_counts *c = NULL;

			for (int k = 0; k < ncounts; k++)
				if (counts[k].fd == bpf_program__fd(prog))
					c = &counts[k];
			if (!c || !c->read[1])
				continue;
			struct prog_row r = { .name = bpf_program__name(prog), .c = c,
					      .timed = !stats_err && c->read[0] };
			EMIT_ROW_PROGRAMS(w, &r);
		}
	jw_arr_end(w);
	jw_key(w, "cost");
	jw_obj(w);
	jw_kbool(w, "bpf_stats", !stats_err);
	if (stats_err) {
		char why[160];

		snprintf(why, sizeof(why), "the kernel's BPF stats could not be turned on (BPF_ENABLE_STATS: %s)",
			 strerror(stats_err));
		jw_kstr(w, "reason", why);
	}
	jw_ku64(w, "loader_cpu_ns", cpu_ns[1] > cpu_ns[0] ? cpu_ns[1] - cpu_ns[0] : 0);
	jw_obj_end(w);
}
