/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* Which futex a task sleeps on, from its saved user registers
 * (bpf_task_pt_regs): futex.bpf.c at its switch-out, tasks.bpf.c at the
 * wake-up of a thread that has not switched out yet. Include after
 * vmlinux.h, the libbpf BPF headers and probe.h. */
#ifndef LOCKSCOPE_FUTEX_WAIT_BPF_H
#define LOCKSCOPE_FUTEX_WAIT_BPF_H

#define FUTEX_WAIT             0
#define FUTEX_LOCK_PI          6
#define FUTEX_WAIT_BITSET      9
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_LOCK_PI2        13
#define FUTEX_CMD_MASK      0x7f   /* ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) */

static __always_inline long syscall_nr(struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(regs, orig_ax);
#elif defined(__TARGET_ARCH_arm64)
	return BPF_CORE_READ(regs, syscallno);
#else
	return -1;
#endif
}

/*
 * In a futex syscall that sleeps (the syscall numbers of this architecture
 * come from the loader): FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI(2),
 * FUTEX_WAIT_REQUEUE_PI, and futex_waitv (FUTEX_OP_WAITV, keyed by its first
 * futex, read from user memory: only when `own_memory`, the current task's
 * address space being the waiter's, else 0). True and the futex and op, or
 * false.
 */
static __always_inline bool futex_wait_of(struct pt_regs *regs, long nr_futex, long nr_futex_waitv,
					  bool own_memory, __u64 *uaddr, __u32 *op)
{
	long id = syscall_nr(regs);

	if (id == nr_futex) {
		*op = (__u32)PT_REGS_PARM2_CORE_SYSCALL(regs) & FUTEX_CMD_MASK;
		if (*op != FUTEX_WAIT && *op != FUTEX_WAIT_BITSET && *op != FUTEX_LOCK_PI &&
		    *op != FUTEX_LOCK_PI2 && *op != FUTEX_WAIT_REQUEUE_PI)
			return false;
		*uaddr = PT_REGS_PARM1_CORE_SYSCALL(regs);
		return true;
	}
	if (id == nr_futex_waitv) {
		/* futex_waitv(struct futex_waitv *waiters, ...): the first futex
		 * (struct futex_waitv { u64 val; u64 uaddr; ... }) */
		__u64 waiters = PT_REGS_PARM1_CORE_SYSCALL(regs);

		*op = FUTEX_OP_WAITV;
		if (!own_memory || bpf_probe_read_user(uaddr, sizeof(*uaddr), (void *)(waiters + 8)))
			*uaddr = 0;
		return true;
	}
	return false;
}

#endif
