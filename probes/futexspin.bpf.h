/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Kernel spinning inside the futex syscalls, charged to the futex word
 * (issue 25): the futex hash bucket's lock, and the runqueue and pi_lock
 * spinlocks taken to wake a futex waiter (try_to_wake_up <- wake_up_q <-
 * futex_wake), are waited on *because of* a user-space lock's futex calls.
 * The word the syscall works on (its first argument; futex_waitv: its first
 * futex) is read at contention_begin, where the task waits anyway, from its
 * saved syscall registers (bpf_task_pt_regs, as futexwaits.bpf.h does); it
 * travels with the wait (spin_wait, pending_wait) and, when the wait is added
 * to lock_stats, the same wait is added to futex_lock_stats under
 * (lock, flags, stack, tgid, word) too. The analyzer moves it from the
 * kernel lock to the user-space lock of that word when there is one.
 *
 * Only spinning waits of a task in process context: a wait in an interrupt
 * (futex_wait.bpf.h's in_interrupt_context) is the interrupt's, whatever
 * syscall it interrupted, and keeps no word. contention_end does nothing more than
 * before: the word is copied with the wait, the extra map update is at the
 * aggregation (a later begin or a switch).
 *
 * Part of contention.bpf.c (its helpers and futex_on: contention.bpf.h).
 */
#ifndef LOCKSCOPE_FUTEXSPIN_BPF_H
#define LOCKSCOPE_FUTEXSPIN_BPF_H

#include "contention.bpf.h"
#include "futex_wait.bpf.h"

WAIT_STATS_MAP(futex_lock_stats, struct futex_lock_key);

/* at a spinning wait's begin (ctx: the tracepoint's): the futex word of
 * the futex or futex_waitv syscall the current task is in, and its tgid; 0
 * when none, in interrupt context, or the futex probe is off. The syscall
 * number first (one load): the interrupt test reads three addresses */
static __always_inline __u64 futex_word_now(void *ctx, __u32 *tgid)
{
	struct task_struct *task;
	struct pt_regs *regs;
	__u64 uaddr = 0;
	long nr;

	if (!futex_on)
		return 0;
	task = bpf_get_current_task_btf();
	if (task->flags & PF_KTHREAD)
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	nr = SYSCALL_NR(regs);
	if ((nr != nr_futex && nr != nr_futex_waitv) || in_interrupt_context(ctx))
		return 0;
	if (nr == nr_futex)
		uaddr = SYSCALL_ARG1(regs);
	else if (bpf_probe_read_user(&uaddr, sizeof(uaddr),        /* struct futex_waitv { u64 val; u64 uaddr; ... } */
				     (void *)(SYSCALL_ARG1(regs) + 8)))
		uaddr = 0;
	if (uaddr)
		*tgid = task->tgid;
	return uaddr;
}

/* n waits just added to lock_stats under `key`, spun inside a futex syscall
 * on `uaddr`: the same waits under the word too */
static __always_inline void charge_futex_word(struct cpu_state *cs, const struct lock_key *key, __u64 uaddr,
					      __u32 tgid, __u32 n, __u64 total, __u64 max, __u32 untimed)
{
	struct futex_lock_key fk = {
		.lock = key->lock, .uaddr = uaddr, .flags = key->flags, .stack_id = key->stack_id, .tgid = tgid,
	};

	if (add_waits(cs, &futex_lock_stats, &fk, n, total, max, untimed, CNT_FUTEX_SPIN_FULL) && cs)
		__sync_fetch_and_add(&cs->counters[CNT_FUTEX_SPINS], n);
}

#endif
