/* SPDX-License-Identifier: MIT */
/* The futex waits' types (futexwaits.bpf.h in contention.bpf.c, read by
 * tasks.bpf.c too) and counters. Shared by the BPF side and the loader
 * (probe.h includes every *_types.h): free of kernel or libc headers, both
 * sides include it after their own. */
#ifndef LOCKSCOPE_FUTEX_TYPES_H
#define LOCKSCOPE_FUTEX_TYPES_H

#include "common_types.h"

/* user-space lock waits (futexwaits.bpf.h) */
#define FUTEX_OP_WAITV 0x100   /* futex_key.op of futex_waitv (keyed by its first futex) */

struct ufutex_open {
	__u64 start;
	__u64 uaddr;
	__u32 tgid;
	__u32 op;
	__s32 stack_id;     /* user stack at enter; <0: not taken */
	__u32 sample;       /* as in ufutex_key */
	__u32 in_wait;      /* as in ufutex_key */
	__u32 pad;
};

struct ufutex_key {
	__u64 uaddr;
	__u32 tgid;
	__u32 op;           /* futex op & FUTEX_CMD_MASK, or FUTEX_OP_WAITV */
	__s32 stack_id;
	__u32 tid;          /* the waiting thread */
	/* a walked wait with a stack copy of its own: the copy's number (a
	 * random number, not 0); 0: none. Code without frame pointers gives one
	 * frame-pointer stack id to many call paths: each walked wait keeps
	 * its own copy, unwound apart */
	__u32 sample;
	/* the table wait (usdt.bpf.c: a USDT or exported-function wait) the
	 * thread was in when this futex wait began, its entry + 1; 0: none. Such
	 * a futex sleep is that wait's sleep (MariaDB's row-lock wait sleeping
	 * on a condition variable), not a lock of its own */
	__u32 in_wait;
};

struct ufutex_id {
	__u64 uaddr;
	__u32 tgid;
	__u32 pad;
};

#define FUTEX_COUNTERS(X)                                                                       \
	X(FCNT_WAITS, "futex_waits")                      /* futex waits aggregated */          \
	X(FCNT_AGG_FULL, "lost_futex_map_full")           /* a wait lost: aggregation map full */ \
	X(FCNT_OPEN_FULL, "lost_futex_open_map_full")     /* a wait lost: open-wait map full */ \
	/* user stack not stored; wait kept, stack -1 */                                        \
	X(FCNT_STACK_LOST, "futex_stacks_lost")                                                 \
	/* wait counted without a stack (sampling) */                                           \
	X(FCNT_STACK_SKIPPED, "futex_stacks_not_sampled")                                       \
	/* a walked wait beyond the stack copies' room: spread over the walked ones */          \
	X(FCNT_COPY_FULL, "futex_stacks_without_copy")

enum futex_counter {
	FUTEX_COUNTERS(COUNTER_ENUM)
	FCNT__MAX,
};

#endif
