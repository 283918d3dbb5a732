/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* The file-lock waits in progress, by thread (filelocks.bpf.c opens and
 * ends them). One map, contention.bpf.c's, reused by filelocks.bpf.c and by
 * tasks.bpf.c, whose wake-up program (holders.bpf.h) charges a waiter woken
 * out of a blocking file-lock wait to its releaser: what the holder did
 * while it held the file's lock. */
#ifndef LOCKSCOPE_FLKOPEN_BPF_H
#define LOCKSCOPE_FLKOPEN_BPF_H

#include "maps.bpf.h"
#include "filelocks_types.h"

#ifndef E2BIG
#define E2BIG 7
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OPEN_ENTRIES);
	__type(key, __u32);                 /* tid */
	__type(value, struct flk_open);
} flk_open SEC(".maps");

/* the open wait `o` ends after `ns`: added to its aggregate in `stats` (a
 * map of flk_key -> flk_stat, filelocks.bpf.c's flk_stats or
 * sqlitesleeps.bpf.h's sqlite_sleeps); false where that map is full */
static __always_inline bool flk_add_wait(void *stats, const struct flk_open *o, __u64 ns)
{
	struct flk_stat *s = bpf_map_lookup_elem(stats, &o->key), zero = {};

	if (!s) {
		if (bpf_map_update_elem(stats, &o->key, &zero, BPF_NOEXIST) == -E2BIG)       /* full */
			return false;
		s = bpf_map_lookup_elem(stats, &o->key);      /* made here, or by another CPU */
		if (!s)
			return false;
	}
	__sync_fetch_and_add(&s->count, 1);
	__sync_fetch_and_add(&s->total_ns, ns);
	if (ns > s->max_ns)
		s->max_ns = ns;
	__builtin_memcpy(s->holder_comm, o->holder_comm, sizeof(s->holder_comm));
	return true;
}

#endif
