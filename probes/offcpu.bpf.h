/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * contention.bpf.c's sched_switch parts for the tracked threads' time off
 * CPU: the kernel stack of a switch-out (walked, or reused for a repeated
 * sleep), the open mutex wait that goes with a task into its storage and
 * comes back at switch-in, the off-CPU span opened at switch-out and added
 * up at switch-in, and the last spans each thread keeps for holders.bpf.h.
 * Part of contention.bpf.c (its helpers and maps: contention.bpf.h).
 */
#ifndef LOCKSCOPE_OFFCPU_BPF_H
#define LOCKSCOPE_OFFCPU_BPF_H

#include "contention.bpf.h"
#include "futex_wait.bpf.h"

/* a thread that sleeps again in the same syscall on the same first argument
 * reuses its last off-CPU stack; one such sleep in OFFCPU_RESTACK_EVERY walks
 * it again (offcpu_stack) */
#define OFFCPU_RESTACK_EVERY 64
/* spans of waits for one lock this close are one (remember_span) */
#define SPAN_MERGE_NS 100000ULL

/*
 * The kernel stack of a switch-out: a walk, a microsecond or more (2.1 us per
 * switch-out on PostgreSQL's backends, which sleep in epoll_wait, recvfrom
 * and semaphores). A thread that goes to sleep again in the same syscall on
 * the same first argument (epoll_wait on one epoll fd, read of one socket or
 * pipe, poll of one array, a futex wait op: its futex does not matter)
 * sleeps in the same kernel stack nearly always: its last walked stack for
 * that signature (one of the last SLEEP_SIGS signatures: a server sleeps in
 * epoll_wait, recvfrom and a write in turn) is reused, and walked again one
 * time in OFFCPU_RESTACK_EVERY, so a thread that sleeps at two places under
 * one signature gets both stacks, in the wrong proportion. A preemption (state
 * 0: the class is "preempted" whatever the stack) reuses the thread's last
 * preemption stack the same way: the stacks of its preemptions are a 1 in
 * OFFCPU_RESTACK_EVERY sample. Walked each time: sleeps other than
 * interruptible ones (D: block I/O, page locks, journal waits, whose class is
 * their exact site: one write(2) of one fd sleeps in either; stopped, dead),
 * kernel threads' (no syscall registers), sleeps outside a syscall (page
 * faults), and sleeps inside a traced lock wait (their time is the lock's).
 */
static __always_inline __s32 offcpu_stack(void *ctx, struct cpu_state *cs, struct task_struct *prev,
					  struct task_state *ts, __u32 state)
{
	struct pt_regs *regs;
	__u32 slot;
	__u64 sig;
	long nr;

	if (!state) {
		if (ts->preempts++ % OFFCPU_RESTACK_EVERY && ts->preempt_stack >= 0) {
			count(cs, CNT_OFFCPU_STACK_REUSED);
			return ts->preempt_stack;
		}
		ts->preempt_stack = stack_in(ctx, &stacks, cs);
		return ts->preempt_stack;
	}
	if (!(state & TASK_INTERRUPTIBLE) || (state & TASK_UNINTERRUPTIBLE) || ts->lock ||
	    (prev->flags & PF_KTHREAD) || !(regs = (struct pt_regs *)bpf_task_pt_regs(prev)))
		return stack_in(ctx, &stacks, cs);
	nr = SYSCALL_NR(regs);
	if (nr < 0)
		return stack_in(ctx, &stacks, cs);
	sig = ((__u64)nr << 48 ^ (nr == nr_futex ? (SYSCALL_ARG2(regs) & FUTEX_CMD_MASK) : SYSCALL_ARG1(regs))) |
	      1ULL << 63;         /* never 0, "none" */
	slot = ts->sleep_next % SLEEP_SIGS;
	for (__u32 i = 0; i < SLEEP_SIGS; i++) {
		if (ts->sleep_sig[i] != sig)
			continue;
		if (ts->sleep_stack[i] >= 0 && ++ts->sleeps[i] % OFFCPU_RESTACK_EVERY) {
			count(cs, CNT_OFFCPU_STACK_REUSED);
			return ts->sleep_stack[i];
		}
		slot = i;                   /* walked again in its own slot */
		break;
	}
	if (slot == ts->sleep_next % SLEEP_SIGS)
		ts->sleep_next++;
	ts->sleep_stack[slot] = stack_in(ctx, &stacks, cs);
	ts->sleep_sig[slot] = sig;
	ts->sleeps[slot] = 0;
	return ts->sleep_stack[slot];
}

/* prev's open mutex wait (at the bottom of the CPU's stack) goes with prev,
 * into its task storage */
static __always_inline void switch_out_mutex_wait(struct cpu_state *cs, struct task_struct *prev, __u64 *now)
{
	struct task_state *ts = task_state_of(prev, true);

	if (!ts) {
		count(cs, CNT_TASK_FULL);
		return;
	}
	if (ts->lock)
		count(cs, CNT_STALE_WAIT);
	ts->lock = cs->spins[0].lock;
	ts->lock_flags = cs->spins[0].flags;
	ts->lock_stack = cs->spins[0].stack;
	/* a wait that sleeps is timed, from its begin
	 * or else from now, and weighs one */
	if (cs->spins[0].weight) {
		ts->lock_start = cs->spins[0].start;
	} else {
		*now = bpf_ktime_get_ns();
		ts->lock_start = *now;
	}
}

/* no spin wait is open on a CPU that switches tasks: whatever is left on
 * this CPU's spin stack lost its end (e.g. to the recursion guard), but for
 * an open mutex wait at its bottom, which is prev's: it goes with prev, into
 * its task storage */
static __always_inline void switch_out_spin_stack(struct cpu_state *cs, struct task_struct *prev, __u64 *now)
{
	__u32 d = cs->depth;

	if (enabled && d <= MAX_SPIN_NEST) {
		if (cs->spins[0].flags & LCB_F_MUTEX) {
			switch_out_mutex_wait(cs, prev, now);
			if (d > 1)
				count(cs, CNT_STALE_SPIN);
		} else {
			count(cs, CNT_STALE_SPIN);
		}
	}
	cs->depth = 0;
}

/* a tracked prev goes off CPU: its stack, state and whether a sleeping-lock
 * wait is open, from now; its state (NULL: the storage is full) */
static __always_inline struct task_state *switch_out_offcpu(void *ctx, struct cpu_state *cs, bool preempt,
							    struct task_struct *prev, unsigned int prev_state,
							    __u64 *now)
{
	struct task_state *ts = task_state_of(prev, true);

	*now = bpf_ktime_get_ns();
	if (!ts) {
		count(cs, CNT_TASK_FULL);
		return NULL;
	}
	ts->off_stack = offcpu_stack(ctx, cs, prev, ts, preempt ? 0 : prev_state);
	/* preempted: runnable, whatever state it was about to enter */
	ts->off_state = preempt ? 0 : prev_state;
	ts->off_in_lock = ts->lock != 0;
	ts->off_lock = ts->lock;      /* a futex word instead: lksc_switch */
	ts->off_start = *now;
	return ts;
}

/* next's open mutex wait comes back onto this CPU's stack: it runs with
 * preemption disabled until the wait ends or it sleeps again */
static __always_inline void switch_in_mutex_wait(struct cpu_state *cs, struct task_state *ts)
{
	cs->spins[0].lock = ts->lock;
	cs->spins[0].flags = ts->lock_flags;
	cs->spins[0].stack = ts->lock_stack;
	cs->spins[0].start = ts->lock_start;
	cs->spins[0].weight = 1;
	cs->spins[0].uaddr = 0;
	cs->spins[0].tgid = 0;
	cs->depth = 1;
	ts->lock = 0;
}

/* the span off CPU that ends now joins the thread's last spans: what it
 * did, should it be holding a lock that others wait for (holders.bpf.h). A
 * wait for the same lock soon after the last one (woken, beaten to the
 * lock, asleep again) extends that span: a thread that loses the race a
 * dozen times in one wait keeps one span, not the ring's worth */
static __always_inline void remember_span(struct task_state *ts, __u64 now)
{
	struct off_span *sp = &ts->spans[(ts->span_next - 1) % HOLD_SPANS];

	if (ts->span_next && ts->off_lock && sp->lock == ts->off_lock && sp->state == ts->off_state &&
	    ts->off_start - sp->end < SPAN_MERGE_NS) {
		sp->end = now;
		return;
	}
	sp = &ts->spans[ts->span_next % HOLD_SPANS];

	sp->start = ts->off_start;
	sp->end = now;
	sp->lock = ts->off_lock;
	sp->stack_id = ts->off_stack;
	sp->state = ts->off_state;
	ts->span_next++;
}

/* next, which went off CPU while tracked, comes back: its time off CPU */
static __always_inline void switch_in_offcpu(struct cpu_state *cs, struct task_struct *next, struct task_state *ts,
					     __u64 *now)
{
	struct offcpu_key key = {
		.stack_id = ts->off_stack,
		.state = ts->off_state,
		.in_lock_wait = ts->off_in_lock,
		.tid = BPF_CORE_READ(next, pid),
	};

	if (!*now)
		*now = bpf_ktime_get_ns();
	if (*now > ts->off_start) {
		add_wait(cs, &offcpu_stats, &key, *now - ts->off_start, CNT_OFFCPU_FULL);
		count(cs, CNT_OFFCPU);
	}
	remember_span(ts, *now);
	ts->off_start = 0;
}

#endif
