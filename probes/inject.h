/* SPDX-License-Identifier: MIT */
/* Shared by inject.bpf.c and its loader inject.c. */
#ifndef LOCKSCOPE_INJECT_H
#define LOCKSCOPE_INJECT_H

#define INJECT_MAX_TGIDS 1024
#define INJECT_MAX_LOCKS 256
/* bpf_loop's iterations: each reads the clock (~20-50 ns), so this bounds a
 * wait at a few ms even if the clock misbehaved; the loader caps delays far
 * lower (inject.c) */
#define INJECT_MAX_LOOPS (1 << 20)
/* outside waits paid at one system call return, at most */
#define INJECT_MAX_OWED 8

/* counts: [INJ_LOCK] waits added inside the lock, [INJ_LOCK_NS] their time;
 * the same outside it (the control) */
enum { INJ_LOCK, INJ_LOCK_NS, INJ_CONTROL, INJ_CONTROL_NS, INJ_NR };

/* how a kernel lock of the `locks` map gets its waits */
enum inject_site {
	SITE_CONTENDED = 1,      /* at contended acquisitions (lock:contention_end) */
	SITE_MMAP_LOCK = 2,      /* at every acquisition of mm->mmap_lock (its own tracepoints) */
	SITE_TICK = 3,           /* a mutex or rwsem, at timer ticks while its owner runs (inject_tick) */
	SITE_FILE_LOCK = 4,      /* a file's locks (by its inode): at every acquisition and release */
};

struct ulock_key {
	__u64 addr;      /* the lock's address in the process */
	__u32 tgid;
	__u32 go;        /* 1: its release takes the lock in Go's first register (ax) */
};

#endif
