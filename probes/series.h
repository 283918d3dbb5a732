/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_SERIES_H
#define LOCKSCOPE_SERIES_H

#include <stdint.h>

struct jw;

/* forget the snapshots of an earlier window */
void series_reset(void);
/* keep the cumulative wait per lock address and the off-CPU time outside
 * lock waits per task state, t_ns after the start (lock_stats_fd and
 * offcpu_stats_fd: contention.bpf.c's per-CPU maps) */
void series_snapshot(int lock_stats_fd, int offcpu_stats_fd, int ncpus, uint64_t t_ns);
/* the "series" key of the data event */
void series_json(struct jw *w, long series_ms);

#endif
