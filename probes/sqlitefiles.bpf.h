/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* The file of each thread's last lock call on SQLite's lock bytes that
 * succeeded: written by filelocks.bpf.c, read by contention.bpf.c's
 * sqlitesleeps.bpf.h (one map: the loader makes filelocks.bpf.c reuse
 * contention.bpf.c's). LRU: a thread that exits leaves its entry. */
#ifndef LOCKSCOPE_SQLITEFILES_BPF_H
#define LOCKSCOPE_SQLITEFILES_BPF_H

#include "maps.bpf.h"
#include "filelocks_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);                 /* tid */
	__type(value, struct flk_sqlite);
} flk_sqlite SEC(".maps");

#endif
