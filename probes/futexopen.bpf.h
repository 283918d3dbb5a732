/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
#ifndef LOCKSCOPE_FUTEXOPEN_BPF_H
#define LOCKSCOPE_FUTEXOPEN_BPF_H

#include "maps.bpf.h"
#include "futex_types.h"

/* the open futex waits by thread id (an entry per thread that waited, start
 * 0 between its waits, deleted when it exits): filled by contention.bpf.c
 * (futexwaits.bpf.h), read by
 * tasks.bpf.c (the loader makes it one map: bpf_map__reuse_fd of
 * contention.bpf.c's). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OPEN_ENTRIES);
	__type(key, __u32);   /* tid */
	__type(value, struct ufutex_open);
} futex_open SEC(".maps");

#endif
