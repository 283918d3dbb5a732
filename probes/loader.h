/* SPDX-License-Identifier: MIT */
/* The state the loader's files share: the loaded probes, the watched paths
 * and the counting window. One instance, made by main (loader.c), passed to
 * the commands (commands.c) and the collection (collect.c). */
#ifndef LOCKSCOPE_LOADER_H
#define LOCKSCOPE_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#define MAX_WATCH 4096

struct contention_bpf;
struct objects_bpf;
struct bpf_link;

/* --sample-clock: the CPU's own timer interrupts (tick) or a perf cpu-clock
 * event per CPU; auto: tick up to TICK_MAX_HZ */
enum sample_clock { CLOCK_AUTO, CLOCK_TICK, CLOCK_CPU };

struct probe {
	struct contention_bpf *cskel;
	struct objects_bpf *oskel;
	struct bpf_link *files_iter, *tasks_iter;
	struct bpf_link **sample_links;   /* one per CPU, or NULL */
	uint64_t sample_period_ns;        /* 0: no CPU samples */
	enum sample_clock sample_clock;   /* how they are taken */
	long series_ms;                   /* 0: no time series */
	int ncpus;
	bool enabled;                     /* counting */
	uint64_t t_start, t_stop;
	int watch_fds[MAX_WATCH];
	int nwatch;
};

#endif
