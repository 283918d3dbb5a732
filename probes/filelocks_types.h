/* SPDX-License-Identifier: MIT */
/* filelocks.bpf.c's types: file-lock waits (POSIX, OFD, flock, leases) by
 * the lock waited for. Shared by the BPF side and the loader (probe.h
 * includes every *_types.h): free of kernel or libc headers, both sides
 * include it after their own. */
#ifndef LOCKSCOPE_FILELOCKS_TYPES_H
#define LOCKSCOPE_FILELOCKS_TYPES_H

#include "common_types.h"

/* include/linux/filelock.h's flc_flags bits this probe reads */
#define FLK_POSIX  1
#define FLK_FLOCK  2
#define FLK_LEASE  32
#define FLK_OFDLCK 1024
#define FLK_KINDS  (FLK_POSIX | FLK_FLOCK | FLK_LEASE | FLK_OFDLCK)
/* lockscope's own flag: a busy wait, from a non-blocking try that failed
 * (F_SETLK: EAGAIN) to the thread's next lock taken on the file (SQLite's
 * retries, a program's own) */
#define FLK_BUSY   (1U << 20)
/* and a sleep (nanosleep, clock_nanosleep) of a thread whose last lock call
 * was on SQLite's lock bytes of the file: a thread of a process whose
 * connections share SQLite's in-memory lock of the file finds it held
 * without a system call and sleeps in its busy handler. Which sleeps are
 * that is decided at record time, from the copy of the sleeper's user stack
 * (`copy`): a frame of SQLite's (analyzer/kernel/filelocks.py) */
#define FLK_SLEEP  (1U << 21)

/* SQLite's lock-byte page of a database file (os_unix.c, sqliteInt.h):
 * PENDING_BYTE, RESERVED_BYTE, then the 510 SHARED bytes */
#define SQLITE_LOCK_FIRST 0x40000000LL
#define SQLITE_LOCK_LAST  (0x40000000LL + 2 + 510 - 1)
/* the sleepers' and releasers' user-stack copies: one per (process, ip,
 * sp), the first ones of a window (2 KiB each) */
#define FLK_COPIES 128
/* (file, releasing process, release site) keys of releases with waiters */
#define FLK_RELEASES 1024

/* a file-lock wait, by what it waited for: the file (inode, its device and
 * number), the lock that blocked it (the root of the kernel's blocker tree:
 * the held lock, not a waiter queued before this one) and who held it, and
 * the waiting thread */
struct flk_key {
	__u64 inode;          /* struct inode * */
	__u64 ino;
	__s64 start;          /* the held lock's range: fl_start, fl_end (OFFSET_MAX: to EOF) */
	__s64 end;
	__u32 dev;            /* the superblock's s_dev (kernel dev_t) */
	__u32 flags;          /* the held lock's flc_flags & FLK_KINDS */
	__u32 type;           /* the held lock's flc_type: F_RDLCK 0, F_WRLCK 1 */
	__s32 holder_tgid;    /* the held lock's flc_pid: the process that took it */
	__u32 tid;            /* the waiting thread */
	__u32 tgid;
	__u32 copy;           /* FLK_SLEEP: the id of its copy in flk_copies; 0: none (their room spent) */
	__u32 pad;
};

struct flk_stat {
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	char holder_comm[16]; /* the holder's process name when the last of these waits began */
};

/* the file's path below its file system's root, from the kernel's
 * dentries: its inode's first alias and that dentry's parents, leaf first
 * (the walked open files name most locked files; a file open only between
 * two of their snapshots, a lease holder's, is named from here) */
#define FLK_PATH_DEPTH 8
#define FLK_NAME_LEN 56
struct flk_path {
	__u32 depth;          /* names kept */
	__u32 more;           /* the path goes on above them */
	char names[FLK_PATH_DEPTH][FLK_NAME_LEN];
};

/* a sleeper's user registers and stack top (FLK_SLEEP), by (process, ip,
 * sp), with the id its waits are keyed by (a random odd number) */
struct flk_copy_sig {
	__u32 tgid;
	__u32 pad;
	__u64 ip;
	__u64 sp;
};

struct flk_copy {
	__u32 id;
	__u32 pad;
	struct ustack_copy c;
};

/* the file of a thread's last lock call on SQLite's lock bytes */
struct flk_sqlite {
	__u64 inode;
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

/* releases of a file's locks while others waited for it, by the releasing
 * process and the copy of its user stack (its release site) */
struct flk_release_key {
	__u64 inode;
	__u32 tgid;
	__u32 copy;           /* the id of its copy in flk_copies; 0: none (their room spent) */
};

/* a wait in progress, by thread */
struct flk_open {
	__u64 start;          /* bpf_ktime_get_ns() when it was deferred first */
	struct flk_key key;
	char holder_comm[16];
};

#define FLK_COUNTERS(X)                                                                   \
	X(FLK_BEGIN, "waits_begun")                                                       \
	X(FLK_END, "waits_ended")                                                         \
	X(FLK_REDEFERRED, "woken_and_blocked_again")                                      \
	X(FLK_OPEN_FULL, "open_map_full")                                                 \
	X(FLK_STATS_FULL, "stats_map_full")                                               \
	X(FLK_NO_BLOCKER, "deferred_without_blocker")                                    \
	X(FLK_BUSY_BEGIN, "busy_waits_begun")                                             \
	X(FLK_BUSY_NO_HOLDER, "busy_without_holder")

enum flk_counter { FLK_COUNTERS(COUNTER_ENUM) FLK__MAX };

/* the loader's row: a key, its stats */
struct flk_row {
	const struct flk_key *k;
	const struct flk_stat *s;
	const char *fs_path;  /* "dir/file" below the file system's root; "" where not read */
};

/* the loader's row of releases: a key, its count */
struct flk_release_row {
	struct flk_release_key k;
	__u64 count;
};

#endif
