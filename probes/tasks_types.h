/* SPDX-License-Identifier: MIT */
/* tasks.bpf.c's types: the release sites and what their releasers did
 * (holders.bpf.h), CPython's GIL releasers (pyframes.bpf.h), its counters.
 * Shared by the BPF side and the loader (probe.h includes every
 * *_types.h): free of kernel or libc headers, both sides include it after
 * their own. */
#ifndef LOCKSCOPE_TASKS_TYPES_H
#define LOCKSCOPE_TASKS_TYPES_H

#include "common_types.h"

/* per-thread times and wake-ups (tasks.bpf.c): struct task_times,
 * wakeup_key, wakeup_stat in build/proberows.h (lockscope/proberows.toml) */

/* Holders (holders.bpf.h): a thread that wakes another out of a lock wait
 * (a kernel mutex/rwsem wait, or a futex wait) has just released that lock.
 * Its stack there is the release site, the end of its critical section: its
 * kernel stack for a kernel lock, its user stack for a futex. What it did
 * during the waiter's wait comes from its last HOLD_SPANS off-CPU spans. */
#define HOLD_SPANS 8
struct off_span {
	__u64 start;
	__u64 end;            /* 0: no span in this slot */
	__u64 lock;           /* the kernel lock or futex word it waited on, 0: none */
	__s32 stack_id;       /* its kernel stack at the switch-out */
	__u32 state;          /* its task state then (0: preempted) */
};

/* releases of one lock by one release site (a waiter woken) */
struct hold_key {
	__u64 lock;           /* kernel lock address, or futex word (user address) */
	__u32 tgid;           /* the waiter's process */
	__s32 stack_id;       /* the releaser's stack (kernel or user); STACK_NOT_SAMPLED */
	/* a user-space release: the number of its own stack copy (1..), 0: none.
	 * Code without frame pointers gives one frame-pointer stack id to many
	 * call paths: each walked release keeps its own copy to be unwound */
	__u32 sample;
	__u32 py_stack;       /* a release of CPython's GIL: its Python stack's id in py_stacks, 0: none */
};

struct hold_stat {
	__u64 count;          /* waits ended */
	__u64 wait_ns;        /* their time off CPU until the release */
	__u64 offcpu_ns;      /* of which the releaser was off CPU (by class: hold_activity) */
	__u64 queued_ns;      /* of which the releaser itself waited for this lock */
	__u64 unseen_ns;      /* of which the releaser's spans are not known (not tracked, older spans) */
	__u32 waker_tgid;
	__u32 waker_tid;
	char waker_comm[16];
};

/* the releaser's time off CPU during the waits it ended, by what it waited on */
struct hold_act_key {
	__u64 lock;
	__u32 tgid;
	__s32 stack_id;       /* the release site, as in hold_key */
	__u64 act_lock;       /* the lock or futex word it waited on, 0: none */
	__s32 act_stack;      /* its kernel stack at the switch-out */
	__u32 act_state;      /* its task state (0: preempted) */
	__u32 sample;         /* as in hold_key */
	__u32 py_stack;       /* as in hold_key */
};

/* Python frames of the GIL's releaser (pyframes.bpf.h): the loader finds each
 * tracked CPython process's GIL and gives its layout (pyframes.c) */
#define PY_DEPTH 16
#define PY_NO_CFRAME 0xffffffffu
struct py_proc {
	__u64 gil_lo;         /* the GIL's futex words lie in [gil_lo, gil_hi) */
	__u64 gil_hi;
	__u64 last_holder;    /* the address of the GIL's last_holder (a PyThreadState *) */
	__u32 tid_off;        /* PyThreadState.native_thread_id */
	__u32 frame_off;      /* PyThreadState.cframe (3.11, 3.12) or .current_frame (3.13) */
	__u32 cframe_off;     /* _PyCFrame.current_frame, or PY_NO_CFRAME */
	__u32 code_off;       /* _PyInterpreterFrame.f_code / f_executable */
	__u32 prev_off;       /* _PyInterpreterFrame.previous */
	__u32 owner_off;      /* _PyInterpreterFrame.owner (FRAME_OWNED_BY_CSTACK frames are left out) */
	__u32 flags;          /* PY_* below */
	__u32 pad;
};
/* py_proc.flags: 3.9 and 3.10 keep no native thread id: tid_off is
 * PyThreadState.thread_id, pthread_self(), which is the thread's fs base
 * (x86-64 glibc); and their frames (PyFrameObject) have no owner */
struct py_stack {
	__u32 tgid;
	__u32 depth;
	__u64 code[PY_DEPTH]; /* code objects, innermost first */
};

/* task_switches and task_wakeups are added up from the maps by the loader;
 * the program counts only what it loses */
#define TASK_COUNTERS(X)                                                                        \
	X(TCNT_SWITCHES, "task_switches")         /* switch-outs of tracked threads counted */  \
	X(TCNT_WAKEUPS, "task_wakeups")           /* wake-ups of tracked threads counted */     \
	/* of which of a thread on its way to sleep, not yet switched out (wait_ns 0) */       \
	X(TCNT_WAKEUPS_ON_CPU, "task_wakeups_on_cpu")                                           \
	/* an event of a thread without an entry lost: map full */                              \
	X(TCNT_TASKS_FULL, "lost_task_times_map_full")                                          \
	X(TCNT_WAKEUPS_FULL, "lost_wakeups_map_full") /* a wake-up lost: map full */                \
	X(TCNT_HOLDS, "holds_counted")            /* lock waits ended by a release, counted */  \
	X(TCNT_HOLD_STACK_SKIPPED, "hold_stacks_not_sampled")                                   \
	X(TCNT_HOLD_STACK_LOST, "lost_hold_stacks")                                             \
	X(TCNT_HOLDS_FULL, "lost_holds_map_full")                                               \
	/* a walked user-space release beyond the stack copies' room: spread over the sampled */ \
	X(TCNT_HOLD_COPY_FULL, "hold_stacks_without_copy")                                      \
	X(TCNT_PY_STACKS, "py_stacks_read")       /* GIL releases given the releaser's Python frames */ \
	/* a release on the GIL's words by a thread not its last holder (the GIL's own mutex) */ \
	X(TCNT_PY_NOT_HOLDER, "py_releases_not_by_holder")                                      \
	X(TCNT_PY_UNREADABLE, "py_stacks_unreadable") /* thread state not readable */           \
	X(TCNT_PY_NO_FRAMES, "py_releases_without_frames") /* no Python frame (a thread's start or end) */ \
	X(TCNT_PY_FULL, "lost_py_stacks_map_full")

enum task_counter {
	TASK_COUNTERS(COUNTER_ENUM)
	TCNT__MAX,
};

#endif
