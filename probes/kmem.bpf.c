// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Slab cache of a lock address: for a contended lock that no object walk
 * reached, the bpf_get_kmem_cache kfunc (Linux 6.13+) finds the slab cache
 * the address lies in; the object's base follows from the slab's size and
 * order. The loader fills req[] and runs this program (BPF_PROG_TEST_RUN of
 * a "syscall" program); results come back in the same global array.
 *
 * A kernel without the kfunc fails to load this object only: the loader
 * reports slab resolution as unavailable and carries on.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "kmem_types.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

extern struct kmem_cache *bpf_get_kmem_cache(__u64 addr) __ksym;

const volatile __u64 page_size = 4096;

struct kmem_ent req[KMEM_BATCH];
__u32 nreq;

#define OO_SHIFT 16   /* mm/slub.c: kmem_cache_order_objects = order << 16 | objects */

SEC("syscall")
int lksc_kmem_resolve(void *ctx)
{
	for (__u32 i = 0; i < KMEM_BATCH; i++) {
		struct kmem_ent *e = &req[i];
		struct kmem_cache *s;
		__u64 slab, first;
		__u32 order, size;

		if (i >= nreq)
			break;
		s = bpf_get_kmem_cache(e->addr);
		if (!s)
			continue;
		e->cache = (__u64)s;
		size = BPF_CORE_READ(s, size);
		e->size = size;
		e->object_size = BPF_CORE_READ(s, object_size);
		bpf_probe_read_kernel_str(e->name, sizeof(e->name), BPF_CORE_READ(s, name));
		if (!size)
			continue;
		/* slabs are naturally aligned blocks of the buddy allocator */
		order = BPF_CORE_READ(s, oo.x) >> OO_SHIFT;
		if (order > 10)
			continue;
		slab = e->addr & ~((page_size << order) - 1);
		first = slab;
		if (bpf_core_field_exists(s->red_left_pad))
			first += BPF_CORE_READ(s, red_left_pad);
		if (e->addr < first)
			continue;
		e->base = first + (e->addr - first) / size * size;
		e->head_ok = !bpf_probe_read_kernel(e->head, sizeof(e->head), (void *)e->base);
	}
	return 0;
}
