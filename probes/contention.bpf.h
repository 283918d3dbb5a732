/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* contention.bpf.c's state and the helpers its fragments share (the
 * per-CPU state, the aggregation maps, the task slots, the tracked-tgid
 * test): included first by contention.bpf.c and by each of its fragments,
 * so that every fragment compiles on its own and in any order (the
 * Makefile's standalone check). */
#ifndef LOCKSCOPE_CONTENTION_BPF_H
#define LOCKSCOPE_CONTENTION_BPF_H

#include "shared.bpf.h"
#include "contention_types.h"
#include "taskstate.bpf.h"

/* lksc_switch's futex part (--futex, futexwaits.bpf.h), set by the loader;
 * its per-thread times part (tasktimes.bpf.h) always runs */
const volatile bool futex_on = false;

/* set by the loader: the window's generation (task storage cannot be
 * cleared from user space: older slots are ignored) */
__u32 generation = 0;
/* bumped by the loader when a tgid leaves the tracked map: each CPU's cached
 * last tracked tgid is void */
__u32 tracked_epoch = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpus SEC(".maps");

WAIT_STATS_MAP(lock_stats, struct lock_key);

WAIT_STATS_MAP(offcpu_stats, struct offcpu_key);

STACK_MAP(stacks, STACK_ENTRIES);

/* ---- helpers ------------------------------------------------------------ */

static __always_inline struct cpu_state *this_cpu(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cpus, &zero);
}

/* atomic: a preemptible program may be preempted by another on this CPU */
static __always_inline void count(struct cpu_state *cs, __u32 c)
{
	if (cs && c < CNT__MAX)
		__sync_fetch_and_add(&cs->counters[c], 1);
}

static __always_inline bool tgid_tracked(__u32 tgid)
{
	if (system_wide)
		return true;
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

/* tgid_tracked through a per-CPU cache of the last tracked tgid seen: a
 * lock's waits come from the same few processes; the map only grows between
 * epochs */
static __always_inline bool tracked_here(struct cpu_state *cs, __u32 tgid)
{
	if (system_wide)
		return true;
	if (cs->tracked_tgid == tgid + 1 && cs->tracked_epoch == tracked_epoch)
		return true;
	if (!bpf_map_lookup_elem(&tracked, &tgid))
		return false;
	cs->tracked_epoch = tracked_epoch;
	cs->tracked_tgid = tgid + 1;
	return true;
}

static __always_inline bool spinning(__u32 flags)
{
	return (flags & LCB_F_SPIN) && !(flags & LCB_F_MUTEX);
}

/* the CPU's stack holds, at its bottom, the open mutex wait of the task on
 * CPU (mutexes are never taken from interrupt context, and no spin wait is
 * open when one begins) */
static __always_inline bool mutex_open_here(struct cpu_state *cs)
{
	return cs->depth > 0 && cs->depth <= MAX_SPIN_NEST && (cs->spins[0].flags & LCB_F_MUTEX);
}

/* the task's slot, reset if it belongs to an earlier window */
static __always_inline struct task_state *task_state_of(struct task_struct *task, bool create)
{
	struct task_state *ts = bpf_task_storage_get(&tstate, task, NULL,
						     create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);

	if (ts && ts->gen != generation) {
		__builtin_memset(ts, 0, sizeof(*ts));
		ts->gen = generation;
	}
	return ts;
}

/* false when the map was full (counter `full` counted) */
static __always_inline bool add_waits(struct cpu_state *cs, void *map, void *key, __u32 n, __u64 total,
				      __u64 max, __u32 untimed, __u32 full)
{
	struct wait_stat *s = bpf_map_lookup_elem(map, key);

	if (!s) {
		struct wait_stat zero = {};

		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(map, key);
		if (!s) {
			count(cs, full);
			return false;
		}
	}
	s->count += n;
	s->total_ns += total;
	s->untimed += untimed;
	if (max > s->max_ns)
		s->max_ns = max;
	return true;
}

static __always_inline void add_wait(struct cpu_state *cs, void *map, void *key, __u64 delta, __u32 full)
{
	add_waits(cs, map, key, 1, delta, delta, 0, full);
}

static __always_inline __s32 stack_in(void *ctx, void *map, struct cpu_state *cs)
{
	long id = bpf_get_stackid(ctx, map, 0);

	if (id < 0)
		count(cs, CNT_STACK_LOST);
	return id;
}

#endif
