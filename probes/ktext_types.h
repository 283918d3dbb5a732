/* SPDX-License-Identifier: MIT */
/* ktext.bpf.c's batch of kernel-text reads. Shared by the BPF side and the
 * loader (probe.h includes every *_types.h): free of kernel or libc
 * headers, both sides include it after their own. */
#ifndef LOCKSCOPE_KTEXT_TYPES_H
#define LOCKSCOPE_KTEXT_TYPES_H

#include "common_types.h"

/* kernel text read by ktext.bpf.c: KTEXT_BYTES at each address */
#define KTEXT_BATCH 64
struct ktext_ent {
	__u64 addr;
	__u32 ok;             /* 1: bytes read */
	__u32 pad;
	__u8 bytes[KTEXT_BYTES];
};

#endif
