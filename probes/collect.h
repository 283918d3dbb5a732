/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_COLLECT_H
#define LOCKSCOPE_COLLECT_H

struct probe;
struct jw;

/* empty contention.bpf.c's aggregation and stack maps and per-CPU state */
void collect_clear(struct probe *p);
/* run the object iterators and resolve the slab caches of the contended
 * locks seen so far (at start, periodically and at stop) */
void collect_objects(struct probe *p);
/* the data event's keys after "ncpus": the aggregates, stacks, objects,
 * futex waits, slab caches, layout, time series, counters, programs, maps */
void collect_json(struct probe *p, struct jw *w);
/* the maps of the processes whose CPU samples carry user stacks (futex.c keeps
 * them): those not read yet, a few (all: every one, again) */
void collect_sample_maps(struct probe *p, bool all);

#endif
