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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OPEN_ENTRIES);
	__type(key, __u32);                 /* tid */
	__type(value, struct flk_open);
} flk_open SEC(".maps");

#endif
