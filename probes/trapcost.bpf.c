// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * A uprobe that does nothing, for the price of a uprobe's trap (cost.c): the
 * loader calls a function of its own a few hundred times with and without
 * this program attached to it, once at start. A uprobe's program run time
 * (the kernel's BPF stats) starts inside the trap; the trap into the kernel
 * and back, which a program on a hot path pays at every hit (a MariaDB wait
 * entry: 21,000 a second), is this difference.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("uprobe")
int lksc_trap_noop(void *ctx)
{
	return 0;
}
