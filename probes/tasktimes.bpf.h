/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* Per-thread times of the tracked tasks (tasks.bpf.c's description): the
 * task_times map and its updates. contention.bpf.c's one sched_switch
 * program calls tasks_switch (one program per switch, not one per part:
 * bench/README.md); tasks.bpf.c's sched_waking and task iterator update the
 * same map (the loader makes it one: bpf_map__reuse_fd of contention.bpf.c's). */
#ifndef LOCKSCOPE_TASKTIMES_BPF_H
#define LOCKSCOPE_TASKTIMES_BPF_H

#include "shared.bpf.h"
#include "tasks_types.h"

/* where a thread was before its first event of the window */
enum first_seen { WAS_ON_CPU, WAS_ASLEEP, WAS_RUNNABLE, WAS_AS_NOW };

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, TASK_ENTRIES);
	__type(key, __u32);   /* tid */
	__type(value, struct task_times);
} task_times SEC(".maps");

COUNTERS_MAP(task_counters, TCNT__MAX, tcount);

static __always_inline void take_names(struct task_times *tt, struct task_struct *t)
{
	BPF_CORE_READ_INTO(&tt->comm, t, comm);
	BPF_CORE_READ_INTO(&tt->process, t, group_leader, comm);
	tt->kernel = !!(BPF_CORE_READ(t, flags) & PF_KTHREAD);
}

/* a tracked thread's entry, made at its first event: the window start (or
 * its creation) to now spent as `was` says; NULL if it is not tracked */
static __always_inline struct task_times *times_of(struct task_struct *t, __u32 tid, enum first_seen was)
{
	struct task_times *tt = bpf_map_lookup_elem(&task_times, &tid);
	struct task_times fresh = {};
	__u64 since;

	if (tt)
		return tt;
	fresh.tgid = BPF_CORE_READ(t, tgid);
	if (!system_wide && !bpf_map_lookup_elem(&tracked, &fresh.tgid))
		return NULL;
	since = BPF_CORE_READ(t, start_time);
	if (since < t_start)
		since = t_start;
	if (was == WAS_AS_NOW)
		was = BPF_CORE_READ(t, on_cpu) ? WAS_ON_CPU :
		      BPF_CORE_READ(t, __state) == 0 ? WAS_RUNNABLE : WAS_ASLEEP;
	if (was == WAS_ON_CPU) {
		fresh.on_start = since;
	} else {
		fresh.off_start = since;
		fresh.off_preempted = was == WAS_RUNNABLE;
	}
	take_names(&fresh, t);
	bpf_map_update_elem(&task_times, &tid, &fresh, BPF_NOEXIST);
	tt = bpf_map_lookup_elem(&task_times, &tid);
	if (!tt)
		tcount(TCNT_TASKS_FULL);
	return tt;
}

/* sched_switch's per-thread part: prev's time on CPU ends, next's begins */
static __always_inline void tasks_switch(bool preempt, struct task_struct *prev, bool prev_tracked,
					 struct task_struct *next, unsigned int prev_state, __u64 *now)
{
	struct task_times *tt;
	__u32 tid;

	tid = prev->pid;
	/* a thread's last switch-out, once dead: its process may have left the
	 * filter already (sched_process_exit removes it when its last thread
	 * exits), but its time on CPU ends here all the same (left open, the
	 * stop counted the rest of the window as on CPU: a fork/exec loop's
	 * short-lived processes read 84 worker-equivalents on 2 CPUs) */
	if (prev_tracked)
		tt = times_of(prev, tid, WAS_ON_CPU);
	else
		tt = (prev_state & TASK_DEAD) && tid ? bpf_map_lookup_elem(&task_times, &tid) : NULL;
	if (tt) {
		if (!*now)
			*now = bpf_ktime_get_ns();
		if (tt->on_start && *now > tt->on_start)
			tt->on_cpu_ns += *now - tt->on_start;
		tt->on_start = 0;
		tt->switches++;
		if (prev_state & TASK_DEAD) {
			tt->off_start = 0;          /* exited: nothing off CPU from here */
			take_names(tt, prev);
		} else {
			tt->off_preempted = preempt || !prev_state;
			tt->off_start = *now;
		}
	}
	tid = next->pid;
	if (tid && (tt = times_of(next, tid, WAS_RUNNABLE))) {
		if (!*now)
			*now = bpf_ktime_get_ns();
		if (tt->off_start && *now > tt->off_start) {
			if (tt->off_preempted)
				tt->preempted_ns += *now - tt->off_start;
			else
				tt->sleep_ns += *now - tt->off_start;
		}
		tt->off_start = 0;
		tt->on_start = *now;
	}
}

#endif
