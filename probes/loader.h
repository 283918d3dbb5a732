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

struct probe {
	struct contention_bpf *cskel;
	struct objects_bpf *oskel;
	struct bpf_link *files_iter, *tasks_iter, *sbs_iter;
	struct bpf_link **sample_links;   /* one per CPU, or NULL */
	uint64_t sample_period_ns;        /* 0: no CPU samples */
	long series_ms;                   /* 0: no time series */
	long objects_ms;                  /* the objects' snapshot period while counting */
	int ncpus;
	bool enabled;                     /* counting */
	uint64_t t_start, t_stop;
	int watch_fds[MAX_WATCH];
	int nwatch;
};

#endif
