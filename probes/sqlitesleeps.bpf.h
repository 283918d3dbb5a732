/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * contention.bpf.c's part for SQLite's busy waits of threads of one
 * process. SQLite's unix VFS keeps one lock of a database file per inode
 * and process, shared by the process's connections: a thread that finds it
 * held by another thread of its process gets SQLITE_BUSY without a system
 * call, and its busy handler sleeps (nanosleep, clock_nanosleep) and tries
 * again. filelocks.bpf.c notes in flk_sqlite (shared with it) the file of
 * each thread's last lock call on SQLite's lock bytes that succeeded (a
 * failed one, between processes, opens a busy wait of its own there and
 * removes the note). Here, such a thread going to sleep in nanosleep or
 * clock_nanosleep (its saved user registers say the syscall, as futex
 * waits are found: no syscall tracepoint, which would put every syscall of
 * every task on the slow path) opens a sleep on that file, timed to its
 * switch-in (sqlite_open) and added to sqlite_sleeps; the first sleep of each (process,
 * user ip, user sp), one per call site and depth, keeps a copy of the user
 * registers and stack top (flk_copies). At record time a sleep whose stack,
 * unwound from its copy, has a frame of SQLite's is its busy wait; the
 * others (the program's own sleeps) are left out
 * (analyzer/kernel/filelocks.py).
 */
#ifndef LOCKSCOPE_SQLITESLEEPS_BPF_H
#define LOCKSCOPE_SQLITESLEEPS_BPF_H

#include "contention.bpf.h"
#include "futex_wait.bpf.h"
#include "flkshared.bpf.h"
#include "flkopen.bpf.h"        /* owned here, used by filelocks.bpf.c and tasks.bpf.c */

const volatile long nr_nanosleep = -1;
const volatile long nr_clock_nanosleep = -1;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct flk_key);
	__type(value, struct flk_stat);
} sqlite_sleeps SEC(".maps");

/* the sleeps in progress, by thread (the loader adds those open at stop:
 * SQLite's default busy handler sleeps up to 100 ms at a time) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);                 /* tid */
	__type(value, struct flk_open);
} sqlite_open SEC(".maps");

/* prev goes to sleep (not preempted): in nanosleep or clock_nanosleep after
 * a lock call on SQLite's lock bytes? Its sleep opens, on that file, with
 * its stack's copy; marked in its state */
static __always_inline void sqlite_sleep_out(struct task_struct *prev, struct task_state *ts,
					     unsigned int state, __u64 now)
{
	struct flk_open o = {};
	struct flk_sqlite *q;
	struct pt_regs *regs;
	__u32 tid;
	long nr;

	ts->off_sqlite = 0;
	if (!(state & TASK_INTERRUPTIBLE) || nr_nanosleep < 0 ||
	    !(regs = (struct pt_regs *)bpf_task_pt_regs(prev)))
		return;
	nr = SYSCALL_NR(regs);
	if (nr != nr_nanosleep && nr != nr_clock_nanosleep)
		return;
	tid = BPF_CORE_READ(prev, pid);
	q = bpf_map_lookup_elem(&flk_sqlite, &tid);
	/* a busy wait between processes open (a failed F_SETLK) has its sleeps */
	if (!q || bpf_map_lookup_elem(&flk_open, &tid))
		return;
	o.start = now;
	o.key.inode = q->inode;
	o.key.ino = q->ino;
	o.key.dev = q->dev;
	o.key.tid = tid;
	o.key.tgid = BPF_CORE_READ(prev, tgid);
	o.key.flags = FLK_POSIX | FLK_BUSY | FLK_SLEEP;
	o.key.type = 1;                     /* F_WRLCK */
	o.key.start = SQLITE_LOCK_FIRST;
	o.key.end = SQLITE_LOCK_LAST;
	o.key.holder_tgid = o.key.tgid;     /* a thread of its own process */
	o.key.copy = flk_stack_copy(regs, o.key.tgid);
	bpf_probe_read_kernel_str(o.holder_comm, sizeof(o.holder_comm), prev->group_leader->comm);
	if (!bpf_map_update_elem(&sqlite_open, &tid, &o, BPF_ANY))
		ts->off_sqlite = 1;
}

/* next, asleep so marked, comes back: its sleep ends */
static __always_inline void sqlite_sleep_in(struct task_struct *next, struct task_state *ts, __u64 now)
{
	__u32 tid = BPF_CORE_READ(next, pid);
	struct flk_open *o = bpf_map_lookup_elem(&sqlite_open, &tid);

	ts->off_sqlite = 0;
	if (!o)
		return;
	flk_add_wait(&sqlite_sleeps, o, now > o->start ? now - o->start : 0);
	bpf_map_delete_elem(&sqlite_open, &tid);
}

#endif
