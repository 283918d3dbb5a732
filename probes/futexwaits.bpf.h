/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * User-space lock waits: futex wait syscalls of the tracked tasks, aggregated
 * in the kernel by (tgid, futex address, wait op, user stack, thread):
 * count, total, max.
 *
 * A futex wait is seen where it sleeps, not at the syscall boundary: at
 * sched_switch, a tracked task going to sleep inside the futex or
 * futex_waitv syscall (its saved user registers, bpf_task_pt_regs, give the
 * syscall number and arguments) with a wait op opens a wait keyed by thread
 * id; switching that thread back in closes it. Hooking the raw sys_enter /
 * sys_exit tracepoints instead (this kernel has no syscalls:* events) puts
 * every syscall of every task on the slow path and cost syscall-heavy
 * workloads up to 10%; sched_switch is already traced for off-CPU time.
 * Only ops that sleep count: FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI(2),
 * FUTEX_WAIT_REQUEUE_PI, and futex_waitv (keyed by its first futex). A futex
 * syscall that sleeps twice (a spurious wake-up) counts as two waits; one
 * that finds the value changed and never sleeps is not a wait.
 *
 * The loader adds the waits still open at stop, up to the stop time. The
 * user stack (frame pointers) is taken at the switch-out, for the first
 * waits of each futex and then one in STACK_EVERY of the futex sleeps on
 * each CPU (a per-CPU count: nothing every CPU writes); the others are counted
 * under stack STACK_NOT_SAMPLED and the analyzer spreads them over the
 * futex's sampled stacks. Each walked wait also keeps the user registers
 * and the top USTACK_BYTES of the user stack (user_stack_copies, under a
 * number of its own in the key, while the map has room), for unwinding
 * through code without frame pointers, where one frame-pointer stack id
 * stands for many call paths.
 * A walked wait looks at the lock's owner first (owners.bpf.h: a glibc
 * mutex's __owner, a PI futex's word).
 *
 * Included by contention.bpf.c, whose one sched_switch program (lksc_switch)
 * calls futex_switch when futex_on (--futex): one tracepoint program per
 * switch, not one per part (each program on sched_switch cost PMUTEX ~1
 * point by its dispatch alone on the 2-vCPU VM; bench/README.md).
 */
#ifndef LOCKSCOPE_FUTEXWAITS_BPF_H
#define LOCKSCOPE_FUTEXWAITS_BPF_H

#include "contention.bpf.h"
#include "futexopen.bpf.h"
#include "futex_wait.bpf.h"
#include "owners.bpf.h"
#include "usdtwait.bpf.h"
#include "futex_types.h"

/* user stacks: the first waits of every futex, then one sleep in STACK_EVERY per CPU */
#define STACKS_PER_FUTEX 8
#define STACK_EVERY 64

/* sleeps on this CPU, for the one-in-STACK_EVERY stack sampling: a per-CPU
 * count, where a count per futex would be a cache line that every waiting
 * CPU writes at every sleep */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cpu_sleeps SEC(".maps");

/* stacks walked per futex (up to STACKS_PER_FUTEX, then read only) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, OPEN_ENTRIES);
	__type(key, struct ufutex_id);
	__type(value, __u32);
} futex_seen SEC(".maps");

WAIT_STATS_MAP(futex_stats, struct ufutex_key);

STACK_MAP(user_stacks, USER_STACK_ENTRIES);

/* registers and stack top of each walked wait, by its key (sample set) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, USTACK_COPY_ENTRIES);
	__type(key, struct ufutex_key);
	__type(value, struct ustack_copy);
} user_stack_copies SEC(".maps");

/* scratch for one ustack_copy (too large for the BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ustack_copy);
} copy_buf SEC(".maps");

COUNTERS_MAP(futex_counters, FCNT__MAX, fcount);

/* the user registers and stack top of a walked wait, under its own number
 * (key->sample), while the map has room (else key->sample 0); sched_switch
 * runs in prev's context: its user memory */
static __always_inline void copy_user_stack(struct pt_regs *regs, struct ufutex_key *key)
{
	struct ustack_copy *c;
	__u32 zero = 0;

	key->sample = 0;
	c = bpf_map_lookup_elem(&copy_buf, &zero);
	if (!c)
		return;
	copy_stack_top(c, regs);
	key->sample = bpf_get_prandom_u32() | 1;
	if (bpf_map_update_elem(&user_stack_copies, key, c, BPF_NOEXIST)) {
		key->sample = 0;       /* full (or, rarely, the same number drawn twice) */
		fcount(FCNT_COPY_FULL);
	}
}

/* prev (the current task, tracked) goes to sleep: inside a futex wait? Its
 * futex word, or 0 */
static __always_inline __u64 wait_begins(void *ctx, struct task_struct *prev, __u64 *now)
{
	struct ufutex_open w = {};
	struct pt_regs *regs;
	__u32 tid, tgid, op;

	tgid = BPF_CORE_READ(prev, tgid);
	tid = BPF_CORE_READ(prev, pid);
	regs = (struct pt_regs *)bpf_task_pt_regs(prev);
	if (!regs)
		return 0;
	/* sched_switch runs in prev's context: its user memory */
	if (!futex_wait_of(regs, nr_futex, nr_futex_waitv, true, &w.uaddr, &op))
		return 0;
	w.op = op;
	w.tgid = tgid;
	if (usdt_on) {       /* asleep inside a wait the program's probes name (usdtwait.bpf.h) */
		struct usdt_key *in = bpf_map_lookup_elem(&usdt_waiting, &tid);

		if (in)
			w.in_wait = in->entry + 1;
	}
	{
		struct ufutex_id fid = { .uaddr = w.uaddr, .tgid = tgid };
		__u32 *seen = bpf_map_lookup_elem(&futex_seen, &fid), one = 1, zero = 0;
		__u64 *sleeps = bpf_map_lookup_elem(&cpu_sleeps, &zero);
		bool walk = !seen || *seen < STACKS_PER_FUTEX;

		if (!seen)
			bpf_map_update_elem(&futex_seen, &fid, &one, BPF_ANY);
		else if (walk)
			__sync_fetch_and_add(seen, 1);     /* a race only shifts the sampling */
		else if (sleeps && (*sleeps)++ % STACK_EVERY == 0)
			walk = true;
		if (walk) {
			/* who holds it, doing what (owners.bpf.h); then, as sched_switch
			 * runs in prev's context, its user stack */
			look_at_futex_owner(this_cpu(), w.uaddr, tgid, op);
			w.stack_id = bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
		} else {
			w.stack_id = STACK_NOT_SAMPLED;
			fcount(FCNT_STACK_SKIPPED);
		}
	}
	if (w.stack_id < 0 && w.stack_id != STACK_NOT_SAMPLED) {
		fcount(FCNT_STACK_LOST);
	} else if (w.stack_id >= 0) {
		struct ufutex_key key = {
			.uaddr = w.uaddr, .tgid = tgid, .op = op, .stack_id = w.stack_id, .tid = tid,
			.in_wait = w.in_wait,
		};

		copy_user_stack(regs, &key);
		w.sample = key.sample;
	}
	if (!*now)
		*now = bpf_ktime_get_ns();
	w.start = *now;
	/* the thread's entry stays from one wait to the next (start 0 between
	 * them): written in place, no allocation, no bucket lock */
	{
		struct ufutex_open *o = bpf_map_lookup_elem(&futex_open, &tid);

		if (o) {
			o->uaddr = w.uaddr;
			o->tgid = w.tgid;
			o->op = w.op;
			o->stack_id = w.stack_id;
			o->sample = w.sample;
			o->in_wait = w.in_wait;
			barrier();
			o->start = w.start;
		} else if (bpf_map_update_elem(&futex_open, &tid, &w, BPF_NOEXIST)) {
			fcount(FCNT_OPEN_FULL);
		}
	}
	return w.uaddr;
}

/* next runs again: close its futex wait, if one is open */
static __always_inline void wait_ends(struct task_struct *next, __u64 *now)
{
	struct ufutex_open *w;
	struct wait_stat *s;
	struct ufutex_key key = {};
	__u32 tid = BPF_CORE_READ(next, pid);
	__u64 delta;

	w = bpf_map_lookup_elem(&futex_open, &tid);
	if (!w || !w->start)
		return;
	if (!*now)
		*now = bpf_ktime_get_ns();
	delta = *now - w->start;
	key.tgid = w->tgid;
	key.op = w->op;
	key.uaddr = w->uaddr;
	key.stack_id = w->stack_id;
	key.tid = tid;
	key.sample = w->sample;
	key.in_wait = w->in_wait;
	w->start = 0;                        /* closed; the entry stays */

	s = bpf_map_lookup_elem(&futex_stats, &key);
	if (!s) {
		struct wait_stat zero = {};

		bpf_map_update_elem(&futex_stats, &key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&futex_stats, &key);
		if (!s) {
			fcount(FCNT_AGG_FULL);
			return;
		}
	}
	s->count++;
	s->total_ns += delta;
	if (delta > s->max_ns)
		s->max_ns = delta;
	fcount(FCNT_WAITS);
}

/* sched_switch's futex part: prev goes to sleep in a futex wait, next's
 * ends; the futex word prev sleeps on, or 0 */
static __always_inline __u64 futex_switch(void *ctx, bool preempt, struct task_struct *prev, bool prev_tracked,
					  struct task_struct *next, unsigned int prev_state, __u64 *now)
{
	__u64 uaddr = 0;

	/* after stop, open waits stay in futex_open: the loader counts them up
	 * to the stop time */
	if (prev_state & TASK_DEAD) {        /* exits: its entry goes */
		__u32 tid = BPF_CORE_READ(prev, pid);

		bpf_map_delete_elem(&futex_open, &tid);
	} else if (prev_tracked && !preempt && prev_state) { /* going to sleep, not preempted */
		uaddr = wait_begins(ctx, prev, now);
	}
	wait_ends(next, now);
	return uaddr;
}

#endif
