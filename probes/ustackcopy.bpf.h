/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* A copy of a thread's user registers and stack top (struct ustack_copy),
 * for the CFI unwinder in user space (analyzer/user/unwind.py): futex
 * waits', CPU samples', releases' and file-lock waits' and releases'. */
#ifndef LOCKSCOPE_USTACKCOPY_BPF_H
#define LOCKSCOPE_USTACKCOPY_BPF_H

#include "maps.bpf.h"

/* the user registers and the top of the user stack of the current task
 * (regs: its saved user registers), into c: USTACK_BYTES from sp, or
 * USTACK_SHORT_BYTES near the top of a stack mapping, or none (c->len 0) */
static __always_inline void copy_stack_top(struct ustack_copy *c, struct pt_regs *regs)
{
	c->ip = PT_REGS_IP_CORE(regs);
	c->sp = PT_REGS_SP_CORE(regs);
	c->bp = PT_REGS_FP_CORE(regs);
	c->len = USTACK_BYTES;
	if (bpf_probe_read_user(c->bytes, USTACK_BYTES, (void *)c->sp)) {
		c->len = USTACK_SHORT_BYTES;
		if (bpf_probe_read_user(c->bytes, USTACK_SHORT_BYTES, (void *)c->sp))
			c->len = 0;
	}
}

#endif
