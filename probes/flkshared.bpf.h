/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* What filelocks.bpf.c and contention.bpf.c's sqlitesleeps.bpf.h share
 * (contention.bpf.c's maps, reused by filelocks.bpf.c: the loader), and
 * the copy of a user stack both take:
 * - flk_sqlite: the file of each thread's last lock call on SQLite's lock
 *   bytes that succeeded (filelocks.bpf.c writes it, sqlitesleeps.bpf.h
 *   times the sleeps of those threads); LRU: a thread that exits leaves
 *   its entry.
 * - flk_copies: user registers and stack tops, one per (process, user ip,
 *   user sp), that is one per call site and depth, while the map has room:
 *   of SQLite threads' sleeps and of file-lock releases that others waited
 *   for (unwound with the CFI at record time). */
#ifndef LOCKSCOPE_FLKSHARED_BPF_H
#define LOCKSCOPE_FLKSHARED_BPF_H

#include "maps.bpf.h"
#include "filelocks_types.h"
#include "ustackcopy.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);                 /* tid */
	__type(value, struct flk_sqlite);
} flk_sqlite SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FLK_COPIES);
	__type(key, struct flk_copy_sig);
	__type(value, struct flk_copy);
} flk_copies SEC(".maps");

/* scratch for one flk_copy (too large for the BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flk_copy);
} flk_copy_buf SEC(".maps");

/* the user registers and stack top of the current task (regs: its saved
 * user registers), once per (process, ip, sp): the id of its copy, 0 where
 * their room is spent */
static __always_inline __u32 flk_stack_copy(struct pt_regs *regs, __u32 tgid)
{
	struct flk_copy_sig sig = { .tgid = tgid };
	struct flk_copy *c;
	__u32 zero = 0;

	sig.ip = PT_REGS_IP_CORE(regs);
	sig.sp = PT_REGS_SP_CORE(regs);
	c = bpf_map_lookup_elem(&flk_copies, &sig);
	if (c)
		return c->id;
	c = bpf_map_lookup_elem(&flk_copy_buf, &zero);
	if (!c)
		return 0;
	c->id = bpf_get_prandom_u32() | 1;
	copy_stack_top(&c->c, regs);
	if (bpf_map_update_elem(&flk_copies, &sig, c, BPF_NOEXIST))
		return 0;
	return c->id;
}

#endif
