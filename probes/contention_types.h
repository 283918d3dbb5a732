/* SPDX-License-Identifier: MIT */
/* contention.bpf.c's types: its lock-wait, off-CPU and CPU-sample keys,
 * its per-CPU state and counters, the owner looks. Shared by the BPF side
 * and the loader (probe.h includes every *_types.h): free of kernel or
 * libc headers, both sides include it after their own. */
#ifndef LOCKSCOPE_CONTENTION_TYPES_H
#define LOCKSCOPE_CONTENTION_TYPES_H

#include "common_types.h"

/* flags of lock:contention_begin (include/trace/events/lock.h) */
#define LCB_F_SPIN   (1U << 0)
#define LCB_F_READ   (1U << 1)
#define LCB_F_WRITE  (1U << 2)
#define LCB_F_RT     (1U << 3)
#define LCB_F_PERCPU (1U << 4)
#define LCB_F_MUTEX  (1U << 5)
/* ours: a sleeping lock began again while its wait was open (a mutex that
 * stopped spinning and went to sleep) */
#define LS_F_SLEPT   (1U << 16)

#define MAX_SPIN_NEST   4
#define MAX_PENDING     32

/* lock waits, aggregated in kernel */
struct lock_key {
	__u64 lock;
	__u32 flags;
	__s32 stack_id;     /* kernel stack at contention_begin; <0: not taken */
};

/* spinning waits inside a futex syscall of a tracked task, charged to the
 * futex word the syscall works on (its first argument; futex_waitv: its
 * first futex): the same waits as in lock_stats, keyed by that word too
 * (contention.bpf.c, futex_word_of) */
struct futex_lock_key {
	__u64 lock;
	__u64 uaddr;
	__u32 flags;
	__s32 stack_id;
	__u32 tgid;
	__u32 pad;
};

/* waiters: a (lock, thread) pair of a sampled wait (contention.bpf.c) */
#define WAITER_EVERY   16        /* one spin or mutex wait in this many, at random, is sampled */
#define WAITER_ENTRIES 8192
struct waiter_key {
	__u64 lock;
	__u32 tid;
	__u32 pad;
};

/* off-CPU time of the tracked tasks */
struct offcpu_key {
	__s32 stack_id;     /* kernel stack at switch-out */
	__u32 state;        /* prev->__state at switch-out (0: preempted) */
	__u32 in_lock_wait; /* the task was inside a sleeping-lock wait */
	__u32 tid;
};

/* on-CPU samples of the tracked tasks */
struct sample_key {
	__s32 stack_id;
	__u32 in_lock_wait;
	/* with user-space locks traced (--futex): the user stack (frame
	 * pointers, sample_user_stacks) and its process; -1: none */
	__s32 user_stack;
	__u32 tgid;
	__u32 tid;            /* with a user stack: the thread (its role) */
	__u32 copy;           /* its registers and stack top in sample_copies (CFI unwinding); 0: none */
};

/* counters of events, drops and map-full conditions (per CPU array index),
 * each with its name in the "counters" object of the data event */
#define CONTENTION_COUNTERS(X)                                                                  \
	X(CNT_CONTENTIONS, "contentions")            /* waits aggregated */                     \
	X(CNT_UNMATCHED_END, "unmatched_ends")       /* contention_end without a recorded begin */ \
	X(CNT_AGG_FULL, "lost_agg_map_full")         /* a wait lost: aggregation map full */    \
	/* stack not stored (collision or map full); wait kept, stack -1 */                     \
	X(CNT_STACK_LOST, "stacks_lost")                                                        \
	/* wait counted without a stack (stack sampling budget) */                              \
	X(CNT_STACK_SKIPPED, "stacks_not_sampled")                                              \
	/* per-task state map full: wait or off-CPU span lost */                                \
	X(CNT_TASK_FULL, "lost_task_map_full")                                                  \
	/* per-CPU spin nesting deeper than MAX_SPIN_NEST: wait lost */                         \
	X(CNT_SPIN_OVERFLOW, "lost_spin_nesting")                                               \
	/* sleeping-lock wait left open (its end was missed), discarded */                      \
	X(CNT_STALE_WAIT, "stale_sleeping_waits")                                               \
	/* spin wait whose end was missed (found at a later begin or switch), discarded */      \
	X(CNT_STALE_SPIN, "stale_spin_waits")                                                   \
	X(CNT_OFFCPU, "offcpu_spans")                /* off-CPU spans aggregated */             \
	X(CNT_OFFCPU_FULL, "lost_offcpu_map_full")   /* off-CPU span lost: map full */          \
	/* processes added to the filter by fork-following */                                   \
	X(CNT_FORKS_TRACKED, "forks_tracked")                                                   \
	X(CNT_EXITS_UNTRACKED, "exits_untracked")    /* tracked processes gone: out of the filter */ \
	X(CNT_TRACKED_FULL, "lost_tracked_map_full") /* a child not tracked: the filter full */  \
	X(CNT_SAMPLES, "cpu_samples")                /* CPU samples of tracked tasks */         \
	X(CNT_SAMPLES_FULL, "lost_samples_map_full") /* CPU sample lost: map full */ \
	/* off-CPU span given the thread's last stack of that sleep or preemption */ \
	X(CNT_OFFCPU_STACK_REUSED, "offcpu_stacks_reused")                                     \
	/* spin waits inside a futex syscall, charged to its futex word too */                  \
	X(CNT_FUTEX_SPINS, "futex_internal_waits")                                              \
	/* such a wait not charged (map full): it stays under its kernel lock only */           \
	X(CNT_FUTEX_SPIN_FULL, "lost_futex_internal_map_full")                                  \
	X(CNT_OWNER_LOOKS, "owner_looks")          /* mutex/rwsem owners looked at */         \
	X(CNT_OWNERS_FULL, "lost_owners_map_full") /* such a look lost: map full */

enum counter {
	CONTENTION_COUNTERS(COUNTER_ENUM)
	CNT__MAX,
};

/* per-CPU state of contention.bpf.c: open spin waits, finished waits not
 * yet aggregated, the stack sampler, the counters */
struct spin_wait {
	__u64 lock;
	__u64 start;          /* 0 if not timed */
	__u64 uaddr;          /* spinning inside a futex syscall: its futex word; 0: none or unknown */
	__u32 flags;
	__s32 stack;
	__u32 weight;         /* waits a timed one stands for; 0: not timed */
	__u32 tgid;           /* of the waiter, with uaddr */
};

/* finished waits of one (lock, flags, stack, futex word) in a row,
 * coalesced: count, total, max */
struct pending_wait {
	__u64 lock;
	__u64 delta;
	__u64 max;
	__u64 uaddr;          /* as spin_wait's */
	__u32 flags;
	__s32 stack;
	__u32 count;
	__u32 untimed;
	__u32 tgid;
	__u32 pad;
};

/* per CPU, direct-mapped: locks (lock ^ flags) known to have had their
 * first STACKS_PER_LOCK stacks walked, so that a wait beyond the walk budget
 * makes no lookup in the shared stacked_locks map */
#define STACKED_CACHE 16

struct cpu_state {
	__u32 depth;          /* open spin waits on spins[] */
	__u32 npending;       /* finished waits on pending[] */
	__u32 busy;           /* pending[] being updated: a nested end aggregates directly */
	__u32 walks;          /* stack walks in the current sampling window */
	__u64 window_start;
	__u64 pending_since;  /* when pending[0] was written */
	__u32 tracked_tgid;   /* the last tracked tgid seen here + 1 (0: none) */
	__u32 tracked_epoch;  /* of tracked_epoch then */
	__u64 last_now;       /* the last clock read of a wait here */
	__u32 window_waits;   /* spin and mutex waits in the current window */
	__u32 time_every;     /* one in this many is timed (0, 1: all) */
	struct spin_wait spins[MAX_SPIN_NEST];
	struct pending_wait pending[MAX_PENDING];
	__u64 stacked[STACKED_CACHE];
	__u64 counters[CNT__MAX];
};

/* Owners (owners.bpf.h): the owner of a kernel mutex or rwsem, looked at by
 * a waiter at contention_begin (the waits that get a stack walk): read from
 * the lock's owner word, where the owner is a task pointer with flag bits */
/* how: OWNER_* (proberows.toml) */
struct owner_key {
	__u64 lock;
	__u64 act_lock;       /* OWNER_OFF_CPU: the kernel lock or futex word it waits on, 0: none */
	__u32 tgid;           /* the waiter's process */
	__u32 owner_tgid;
	__u32 how;            /* OWNER_* */
	__u32 state;          /* OWNER_OFF_CPU: its task state (0: preempted) */
	__s32 stack_id;       /* OWNER_OFF_CPU: its kernel stack at the switch-out (stacks map) */
	__u32 pad;
};
struct owner_stat {
	__u64 count;          /* looks */
	__u32 owner_tid;      /* the first owner seen */
	__u32 pad;
	char owner_comm[16];
};

#endif
