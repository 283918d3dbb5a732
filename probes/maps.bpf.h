/* SPDX-License-Identifier: MIT */
/* Map sizes and map shapes shared by the BPF programs, and the one map they
 * share: the set of tracked tgids. Each .bpf.c file is its own BPF object: the loader
 * makes them use one `tracked` map (bpf_map__reuse_fd of contention.bpf.c's),
 * and tasks.bpf.c use contention.bpf.c's `futex_open` and `task_times`. Also the task constants
 * of include/linux/sched.h they test, which vmlinux.h (types only) lacks. */
#ifndef LOCKSCOPE_MAPS_BPF_H
#define LOCKSCOPE_MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "common_types.h"

#define TASK_INTERRUPTIBLE   0x1
#define TASK_UNINTERRUPTIBLE 0x2
#define TASK_DEAD            0x80
#define PF_KTHREAD           0x00200000   /* task_struct.flags: a kernel thread */

#define TRACKED_ENTRIES      16384   /* tgids in the filter */
#define AGG_ENTRIES          16384   /* keys of an aggregation (wait, sample) map */
#define OPEN_ENTRIES         16384   /* open waits, waits seen per lock */
#define STACK_ENTRIES        16384   /* kernel stacks of lock waits and off-CPU spans */
#define SAMPLE_STACK_ENTRIES 32768   /* kernel stacks of CPU samples */
#define USER_STACK_ENTRIES    8192   /* user stacks of futex waits */
/* copies of the top of the user stack (struct ustack_copy, 2 KiB): one per
 * futex key of a sampled wait; 4 MiB at most, allocated as they come */
#define USTACK_COPY_ENTRIES   2048
/* the same for CPU samples (user-space spinning, unwound with the CFI where
 * frame pointers are missing): the first ones of a window, 2 MiB at most */
#define SAMPLE_COPY_ENTRIES   1024
#define TASK_ENTRIES         16384   /* threads with times (tasks.bpf.c) */
#define WAKEUP_ENTRIES       16384   /* (waker, wakee, futex) wake-up edges: drained by the loader at a quarter full */

/* the tgids to trace: filled by the loader (track, untrack) and by
 * fork-following (contention.bpf.c) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TRACKED_ENTRIES);
	__type(key, __u32);   /* tgid */
	__type(value, __u8);
} tracked SEC(".maps");

/* waits aggregated per CPU by key: count, total, max */
#define WAIT_STATS_MAP(name, key_type)                         \
	struct {                                               \
		__uint(type, BPF_MAP_TYPE_PERCPU_HASH);        \
		__uint(max_entries, AGG_ENTRIES);              \
		__type(key, key_type);                         \
		__type(value, struct wait_stat);               \
	} name SEC(".maps")

/* a program's event counters (one per-CPU slot per counter of its list,
 * summed by the loader), and `fn(c)`, which adds one to counter c */
#define COUNTERS_MAP(name, count, fn)                                  \
	struct {                                                       \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);               \
		__uint(max_entries, count);                            \
		__type(key, __u32);                                    \
		__type(value, __u64);                                  \
	} name SEC(".maps");                                           \
	static __always_inline void fn(__u32 c)                        \
	{                                                              \
		__u64 *v = bpf_map_lookup_elem(&name, &c);             \
		if (v)                                                 \
			__sync_fetch_and_add(v, 1);                    \
	}

/* stacks of up to MAX_STACK_DEPTH frames, by stack id */
#define STACK_MAP(name, entries)                                        \
	struct {                                                        \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                 \
		__uint(max_entries, entries);                           \
		__type(key, __u32);                                     \
		__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));    \
	} name SEC(".maps")

#endif
