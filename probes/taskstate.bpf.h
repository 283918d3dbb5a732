/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* The per-thread state of the tracked threads, in task-local storage:
 * contention.bpf.c's open sleeping-lock wait and off-CPU span of each
 * thread, and its last off-CPU spans; tasks.bpf.c reads a lock releaser's
 * spans (holders.bpf.h). One map: the loader makes tasks.bpf.c's the same
 * (bpf_map__reuse_fd of contention.bpf.c's). */
#ifndef LOCKSCOPE_TASKSTATE_BPF_H
#define LOCKSCOPE_TASKSTATE_BPF_H

#include "maps.bpf.h"
#include "tasks_types.h"

#define SLEEP_SIGS 4

struct task_state {
	__u64 lock;            /* open sleeping-lock wait, 0 if none */
	__u64 lock_start;
	__u32 lock_flags;
	__s32 lock_stack;
	__u64 off_start;       /* switched out at, 0 if on CPU */
	__s32 off_stack;
	__u32 off_state;
	__u32 off_in_lock;
	__u32 gen;
	/* the last walked off-CPU stacks of sleeps in a syscall, by signature
	 * (syscall and first argument, or futex op; 0: none), with the sleeps
	 * of that signature since; the slot replaced next */
	__u64 sleep_sig[SLEEP_SIGS];
	__s32 sleep_stack[SLEEP_SIGS];
	__u32 sleeps[SLEEP_SIGS];
	__u32 sleep_next;
	__s32 preempt_stack;   /* the last walked off-CPU stack of a preemption, */
	__u32 preempts;        /* preemptions since the first */
	/* what the thread waited on in the open off-CPU span: a kernel lock's
	 * address or a futex word, 0: neither */
	__u64 off_lock;
	/* its last HOLD_SPANS off-CPU spans, the newest at (span_next - 1) %
	 * HOLD_SPANS: what it did while it held a lock (holders.bpf.h) */
	struct off_span spans[HOLD_SPANS];
	__u32 span_next;
	/* the open off-CPU span is a sleep that may be SQLite's busy wait
	 * (sqlitesleeps.bpf.h: its sqlite_open entry) */
	__u32 off_sqlite;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_state);
} tstate SEC(".maps");

#endif
