/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* Which futex a task sleeps on, from its saved user registers
 * (bpf_task_pt_regs): futexwaits.bpf.h at its switch-out, tasks.bpf.c at the
 * wake-up of a thread that has not switched out yet; and whether a program
 * runs in interrupt context. */
#ifndef LOCKSCOPE_FUTEX_WAIT_BPF_H
#define LOCKSCOPE_FUTEX_WAIT_BPF_H

#include "shared.bpf.h"
#include "futex_types.h"
#include "ustackcopy.bpf.h"

#define FUTEX_WAIT             0
#define FUTEX_LOCK_PI          6
#define FUTEX_WAIT_BITSET      9
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_LOCK_PI2        13
#define FUTEX_CMD_MASK      0x7f   /* ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) */

/*
 * The syscall number and first two arguments in the saved user registers.
 * bpf_task_pt_regs gives a BTF pointer: its fields are read with plain
 * (CO-RE relocated, fault-safe) loads, not a bpf_probe_read_kernel call
 * each; these reads are on the lock hand-off path (sched_switch,
 * sched_waking).
 */
#if defined(__TARGET_ARCH_x86)
#define SYSCALL_NR(r)   ((long)(r)->orig_ax)
#define SYSCALL_ARG1(r) ((r)->di)
#define SYSCALL_ARG2(r) ((r)->si)
#elif defined(__TARGET_ARCH_arm64)
#define SYSCALL_NR(r)   ((long)(r)->syscallno)
#define SYSCALL_ARG1(r) ((r)->orig_x0)
#define SYSCALL_ARG2(r) ((r)->regs[1])
#else
#define SYSCALL_NR(r)   (-1L)
#define SYSCALL_ARG1(r) PT_REGS_PARM1_CORE_SYSCALL(r)
#define SYSCALL_ARG2(r) PT_REGS_PARM2_CORE_SYSCALL(r)
#endif

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
	long id = SYSCALL_NR(regs);

	if (id == nr_futex) {
		*op = (__u32)SYSCALL_ARG2(regs) & FUTEX_CMD_MASK;
		if (*op != FUTEX_WAIT && *op != FUTEX_WAIT_BITSET && *op != FUTEX_LOCK_PI &&
		    *op != FUTEX_LOCK_PI2 && *op != FUTEX_WAIT_REQUEUE_PI)
			return false;
		*uaddr = SYSCALL_ARG1(regs);
		return true;
	}
	if (id == nr_futex_waitv) {
		/* futex_waitv(struct futex_waitv *waiters, ...): the first futex
		 * (struct futex_waitv { u64 val; u64 uaddr; ... }) */
		__u64 waiters = SYSCALL_ARG1(regs);

		*op = FUTEX_OP_WAITV;
		if (!own_memory || bpf_probe_read_user(uaddr, sizeof(*uaddr), (void *)(waiters + 8)))
			*uaddr = 0;
		return true;
	}
	return false;
}

/* a pointer as a number (read back through a helper: the verifier lets no
 * program compare pointers of different kinds) */
static __always_inline __u64 address_of(const void *p)
{
	__u64 a = 0;

	bpf_probe_read_kernel(&a, sizeof(a), &p);
	return a;
}

/*
 * Hard and soft interrupts (and NMIs) run on per-CPU stacks, not on the
 * interrupted task's (x86-64, arm64): the tracepoint's arguments (ctx, on
 * the stack of the kernel function that runs this program; the program's
 * own stack may be a private one) are outside the current task's stack,
 * from its base to its saved user registers at the top. The kernel's
 * preempt count would say it too, but it is a per-CPU variable that BPF
 * reaches only through kallsyms of data (CONFIG_KALLSYMS_ALL), which kernels
 * often lack. Softirqs that ksoftirqd runs are on its stack: their wake-ups
 * are ksoftirqd's. Used by tasks.bpf.c (a wake-up's waker) and
 * futexspin.bpf.h (a spin wait's futex word).
 *
 * Except on x86-64 an interrupt that came from user mode: it runs on the
 * task's stack (irq_needs_irq_stack: the stack is empty but for the user
 * registers). A system vector (the local APIC timer that ends a timed futex
 * wait, an IPI) leaves -1 in the saved orig_ax, where a syscall leaves its
 * number: a wake-up there is the interrupt's, not the interrupted thread's
 * (a CPython thread running Python code looked like the releaser of the
 * GIL waits that timed out on its CPU). A device interrupt saves its vector,
 * which is not told from a syscall number.
 */
static __always_inline bool in_interrupt_context(void *ctx)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(cur);
	__u64 here = address_of(ctx);

	if (here < address_of(cur->stack) || here >= address_of((void *)regs))
		return true;
#if defined(__TARGET_ARCH_x86)
	if (!(cur->flags & PF_KTHREAD) && (long)BPF_CORE_READ(regs, orig_ax) == -1)
		return true;
#endif
	return false;
}

#endif
