/* SPDX-License-Identifier: MIT */
/* Types every probe shares: a wait's count and times, the counter-list
 * macros, a user stack copy. Shared by the BPF side and the loader
 * (probe.h includes every *_types.h): free of kernel or libc headers, both
 * sides include it after their own. */
#ifndef LOCKSCOPE_COMMON_TYPES_H
#define LOCKSCOPE_COMMON_TYPES_H

#include "lockfields.h"
#include "proberows.h"

struct wait_stat {
	__u64 count;
	__u64 total_ns;       /* lock waits: estimated from the timed ones (contention.bpf.c) */
	__u64 max_ns;
	__u64 untimed;        /* lock waits counted but not timed; 0 elsewhere */
};

/* the enum of a counter list, and its names (an array indexed by it) */
#define COUNTER_ENUM(id, name) id,
#define COUNTER_NAME(id, name) [id] = name,

/* the user registers and the top of the user stack at a sampled futex wait,
 * once per futex key: the frame-pointer walk misses the caller of a function
 * without a frame pointer (most of glibc); a CFI unwinder in user space
 * starts from these */
#define USTACK_BYTES       2048
#define USTACK_SHORT_BYTES  512  /* read instead when USTACK_BYTES from sp fault (top of a stack mapping) */
struct ustack_copy {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 len;          /* bytes read from sp: USTACK_BYTES, USTACK_SHORT_BYTES, or 0 */
	__u32 pad;
	__u8 bytes[USTACK_BYTES];
};

#endif
