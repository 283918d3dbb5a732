/* SPDX-License-Identifier: MIT */
/* kmem.bpf.c's batch of slab lookups. Shared by the BPF side and the
 * loader (probe.h includes every *_types.h): free of kernel or libc
 * headers, both sides include it after their own. */
#ifndef LOCKSCOPE_KMEM_TYPES_H
#define LOCKSCOPE_KMEM_TYPES_H

#include "common_types.h"

/* slab cache of a lock address (kmem.bpf.c): addr in, the rest out */

#define KMEM_BATCH 128
#define KMEM_HEAD 32
struct kmem_ent {
	__u64 addr;
	__u64 cache;          /* struct kmem_cache *; 0: not a slab object */
	__u64 base;           /* object start; 0: unknown */
	__u32 size;           /* slab stride (object and metadata) */
	__u32 object_size;
	char name[32];        /* cache name */
	__u32 head_ok;        /* 1: head read */
	__u32 pad;
	__u8 head[KMEM_HEAD]; /* the object's first bytes (a SysV IPC object's id and key) */
};

#endif
