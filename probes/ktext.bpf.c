// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Kernel text read for the loader (ktext.c): the bytes before the return
 * addresses in the stacks of waits on static kernel locks, and the first
 * bytes of the functions called there. The loader fills req[] and runs this
 * program (BPF_PROG_TEST_RUN of a "syscall" program); the bytes come back in
 * the same global array. On a kernel without data symbols this is where a
 * global lock's address is written down: `rtnl_lock` is `mov $rtnl_mutex,
 * %rdi; jmp mutex_lock` (analyzer/kernel/ktext.py decodes it).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "ktext_types.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct ktext_ent req[KTEXT_BATCH];
__u32 nreq;

SEC("syscall")
int lksc_ktext_read(void *ctx)
{
	for (__u32 i = 0; i < KTEXT_BATCH; i++) {
		if (i >= nreq)
			break;
		req[i].ok = bpf_probe_read_kernel(req[i].bytes, KTEXT_BYTES, (void *)req[i].addr) == 0;
	}
	return 0;
}
