/* SPDX-License-Identifier: MIT */
/* Types shared by the BPF programs and the loader. Keep this file free of
 * kernel or libc headers: both sides include it after their own. */
#ifndef LOCKSCOPE_PROBE_H
#define LOCKSCOPE_PROBE_H

#include "lockfields.h"
#include "proberows.h"

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

struct wait_stat {
	__u64 count;
	__u64 total_ns;       /* lock waits: estimated from the timed ones (contention.bpf.c) */
	__u64 max_ns;
	__u64 untimed;        /* lock waits counted but not timed; 0 elsewhere */
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

/* the enum of a counter list, and its names (an array indexed by it) */
#define COUNTER_ENUM(id, name) id,
#define COUNTER_NAME(id, name) [id] = name,

enum counter {
	CONTENTION_COUNTERS(COUNTER_ENUM)
	CNT__MAX,
};

/* records written by the object iterators (objects.bpf.c) */
enum obj_type {
	OBJ_FILE = 1,
	OBJ_TASK = 2,
};

/* the lock fields of both records are generated from analyzer/kernel/lockfields.toml
 * (build/lockfields.h): one __u64 address per field, 0 when not reached */
struct obj_file {
	__u32 type;           /* OBJ_FILE */
	__u32 tgid;
	__u32 fd;
	__u32 i_mode;
	__u64 ino;
	__u32 dev;            /* sb->s_dev */
	__u32 pad;
	char fstype[16];
	__u64 inode;
	__u64 sb;
	__u64 parent_inode;
	__u64 parent_ino;
	/* the objects behind the file, typed offline (analyzer/kernel/fileobjects.toml) */
	__u64 file;
	__u64 f_release;      /* f_op->release: its text symbol tells the kind */
	__u64 private_data;
	__u64 i_flctx;        /* struct file_lock_context */
	__u64 s_fs_info;
	__u64 sk;             /* sockets: socket->sk */
	__u16 sk_family;
	__u16 sk_type;
	__u16 sk_protocol;
	__u16 sport;          /* host order */
	__u16 dport;          /* host order */
	__u16 unix_len;       /* unix sockets: bytes of sun_path bound (0: unbound) */
	__u32 saddr;          /* IPv4, network order */
	__u32 daddr;
	__u32 pad2;
	char unix_path[112];  /* sun_path (108); abstract names start with a 0 byte */
	LOCKFIELD_KEYS_FILE(LOCKFIELD_MEMBER)
};

struct obj_task {
	__u32 type;           /* OBJ_TASK */
	__u32 tgid;
	__u32 pid;
	__u32 cpu;            /* the CPU the thread was on */
	char comm[16];
	__u64 mm;
	/* the objects the thread holds, typed offline (analyzer/kernel/objlocks.py) */
	__u64 task;
	__u64 signal;
	__u64 files;
	__u64 fs;
	__u64 sighand;
	__u64 ipc_ns;         /* task->nsproxy->ipc_ns: SysV IPC ids (their rwsems) */
	/* the file system of the working directory (fs->pwd): a program's
	 * files live there even when none is open (tmpfs used_blocks, ...) */
	__u64 cwd_sb;
	__u64 cwd_fs_info;    /* its s_fs_info */
	__u32 cwd_dev;        /* its s_dev, a key of the record's mounts */
	__u32 pad;
	char cwd_fstype[16];
	LOCKFIELD_KEYS_TASK(LOCKFIELD_MEMBER)
};

/* slab cache of a lock address (kmem.bpf.c): addr in, the rest out */
/* kernel text read by ktext.bpf.c: KTEXT_BYTES at each address */
#define KTEXT_BATCH 64
struct ktext_ent {
	__u64 addr;
	__u32 ok;             /* 1: bytes read */
	__u32 pad;
	__u8 bytes[KTEXT_BYTES];
};

#define KMEM_BATCH 128
#define KMEM_HEAD 32
struct kmem_ent {
	__u64 addr;
	__u64 cache;          /* struct kmem_cache *; 0: not a slab object */
	__u64 base;           /* object start; 0: unknown */
	__u32 size;           /* slab stride (object and metadata) */
	__u32 object_size;
	char name[32];        /* cache name */
	__u32 head_ok;        /* 1: head read */
	__u32 pad;
	__u8 head[KMEM_HEAD]; /* the object's first bytes (a SysV IPC object's id and key) */
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

/* user-space lock waits (futexwaits.bpf.h) */
#define FUTEX_OP_WAITV 0x100   /* futex_key.op of futex_waitv (keyed by its first futex) */

struct ufutex_open {
	__u64 start;
	__u64 uaddr;
	__u32 tgid;
	__u32 op;
	__s32 stack_id;     /* user stack at enter; <0: not taken */
	__u32 sample;       /* as in ufutex_key */
	__u32 in_wait;      /* as in ufutex_key */
	__u32 pad;
};

struct ufutex_key {
	__u64 uaddr;
	__u32 tgid;
	__u32 op;           /* futex op & FUTEX_CMD_MASK, or FUTEX_OP_WAITV */
	__s32 stack_id;
	__u32 tid;          /* the waiting thread */
	/* a walked wait with a stack copy of its own: the copy's number (a
	 * random number, not 0); 0: none. Code without frame pointers gives one
	 * frame-pointer stack id to many call paths: each walked wait keeps
	 * its own copy, unwound apart */
	__u32 sample;
	/* the table wait (usdt.bpf.c: a USDT or exported-function wait) the
	 * thread was in when this futex wait began, its entry + 1; 0: none. Such
	 * a futex sleep is that wait's sleep (MariaDB's row-lock wait sleeping
	 * on a condition variable), not a lock of its own */
	__u32 in_wait;
};

/* the user registers and the top of the user stack at a sampled futex wait,
 * once per futex key: the frame-pointer walk misses the caller of a function
 * without a frame pointer (most of glibc); a CFI unwinder in user space
 * starts from these */
#define USTACK_BYTES       2048
#define USTACK_SHORT_BYTES  512  /* read instead when USTACK_BYTES from sp fault (top of a stack mapping) */
struct ustack_copy {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 len;          /* bytes read from sp: USTACK_BYTES, USTACK_SHORT_BYTES, or 0 */
	__u32 pad;
	__u8 bytes[USTACK_BYTES];
};

struct ufutex_id {
	__u64 uaddr;
	__u32 tgid;
	__u32 pad;
};

#define FUTEX_COUNTERS(X)                                                                       \
	X(FCNT_WAITS, "futex_waits")                      /* futex waits aggregated */          \
	X(FCNT_AGG_FULL, "lost_futex_map_full")           /* a wait lost: aggregation map full */ \
	X(FCNT_OPEN_FULL, "lost_futex_open_map_full")     /* a wait lost: open-wait map full */ \
	/* user stack not stored; wait kept, stack -1 */                                        \
	X(FCNT_STACK_LOST, "futex_stacks_lost")                                                 \
	/* wait counted without a stack (sampling) */                                           \
	X(FCNT_STACK_SKIPPED, "futex_stacks_not_sampled")                                       \
	/* a walked wait beyond the stack copies' room: spread over the walked ones */          \
	X(FCNT_COPY_FULL, "futex_stacks_without_copy")

enum futex_counter {
	FUTEX_COUNTERS(COUNTER_ENUM)
	FCNT__MAX,
};

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

/* application lock waits from USDT probes (usdt.bpf.c), by process, probe
 * table entry, the lock's name (a string argument) or number (a tag), mode */
struct usdt_key {
	__u32 tgid;
	__u32 entry;          /* the table's probe index (the attach cookie's low byte) */
	__u64 value;          /* the numeric argument naming the lock (a tag type); a JVM's: the object */
	__u32 mode;
	__u32 pad;
	char name[USDT_NAME_LEN];   /* the string argument naming the lock */
};

/* usdt_stats' key: the lock (the key its holders know it by) and the call
 * path of the wait (a JVM's: usdt_stacks), 0: none */
struct usdt_stat_key {
	struct usdt_key key;
	__u64 stack;
};

/* the call path of a JVM's waits (usdt_stacks, by a hash of it): its Java
 * frames, innermost first, each as its Method * with JVM_METHOD_FRAME set
 * (named in jvm_methods), walked from the thread's last Java frame; where
 * the JVM's code heaps are not known, frame-pointer return addresses from
 * the probed function's caller outwards instead, an interpreted frame as
 * its Method *; 0 past the end */
#define USDT_FRAMES 24
struct usdt_stack {
	__u32 tgid;
	__u32 n;
	__u64 pc[USDT_FRAMES];
};

/* the name of an interpreted Java frame's method, by (tgid, Method *): its
 * class (internal form, java/util/Hashtable) and its name */
#define JVM_METHOD_LEN 64
struct jvm_method_key {
	__u32 tgid;
	__u32 pad;
	__u64 method;
};

struct jvm_method {
	char cls[USDT_NAME_LEN];
	char name[JVM_METHOD_LEN];
};

/* a USDT-named lock as hold_key.lock (holders.bpf.h): this bit, which no
 * user-space address has, and a hash of its usdt_key */

#define USDT_COUNTERS(X)                                                                        \
	X(UCNT_STARTS, "usdt_wait_starts")        /* wait starts seen in tracked processes */   \
	X(UCNT_DONES, "usdt_waits")               /* waits timed */                             \
	X(UCNT_NAME_UNREADABLE, "usdt_names_unreadable") /* name string not readable */          \
	X(UCNT_LOST_OPEN, "lost_usdt_open_map_full")     /* a wait lost: open-wait map full */    \
	X(UCNT_LOST_WAITS, "lost_usdt_map_full")  /* a wait lost: aggregation map full */     \
	/* a HotSpot monitor enter in a JVM whose layout is not known (yet, or its monitor probes name it) */ \
	X(UCNT_NO_JVM_LAYOUT, "usdt_monitor_enters_without_layout")                             \
	/* a park of a thread not (yet) in the JVM's thread list as read by the loader */        \
	X(UCNT_NO_JVM_THREAD, "usdt_parks_of_unknown_threads")                                  \
	X(UCNT_NOT_NAMED, "usdt_starts_of_other_names") /* a name not among the entry's: no wait */ \
	X(UCNT_LOST_STACKS, "lost_usdt_stacks_map_full") /* a JVM wait's call path not kept: map full */

/* a JVM whose Java monitors usdt.bpf.c names at ObjectMonitor::EnterI (or
 * enter_internal) by the locked object's class, by process; the offsets are
 * the JVM's own (its exported gHotSpotVMStructs table, probes/jvmmon.c) */
#define JVM_HEAPS 3            /* code heaps: non-nmethods, profiled and non-profiled nmethods */
struct jvm_proc {
	__u64 klass_base;     /* CompressedKlassPointers' base (compressed class pointers) */
	__u32 klass_shift;    /* and shift */
	__u32 object_off;     /* ObjectMonitor::_object: a WeakHandle, the address of the object's slot */
	__u32 klass_off;      /* oopDesc::_metadata._compressed_klass (or ._klass) */
	__u32 name_off;       /* Klass::_name, a Symbol * */
	__u32 length_off;     /* Symbol::_length, a u2 */
	__u32 body_off;       /* Symbol::_body: the name's bytes, internal form (java/lang/Object) */
	__u32 flags;          /* JVM_* below */
	__u32 thread_obj_off; /* JavaThread::_threadObj: an OopHandle, the address of the java.lang.Thread's slot */
	__u32 blocker_off;    /* java.lang.Thread.parkBlocker in the Thread object (0: not known) */
	__u32 oop_shift;      /* CompressedOops' shift */
	__u64 oop_base;       /* and base (compressed oops: a reference field is a 32-bit narrowOop) */
	/* Java frames (JVM_FRAMES): the template interpreter's code, where a
	 * return address into it is an interpreted frame's; that frame's
	 * Method * at its frame pointer + method_fp_off; Method::_constMethod,
	 * ConstMethod::_constants and _name_index, ConstantPool::_pool_holder,
	 * sizeof(ConstantPool) (its entries follow it) */
	__u64 interp_lo, interp_hi;
	__s32 method_fp_off;
	__u32 const_method_off, constants_off, name_index_off, holder_off, cp_size;
	/* compiled frames (JVM_CODE_CACHE): a wait's Java frames walked from the
	 * thread's last Java frame (JavaThread::_anchor's sp, pc, fp), a return
	 * address found in the code heaps through their segment maps (as
	 * CodeHeap::find_blob does), an nmethod told by its tag (its vtable,
	 * JDK 17; its kind, JDK 25), its Method * and frame size read */
	struct jvm_heap {
		__u64 lo, hi, segmap;
		__u32 log2_seg, pad;
	} heaps[JVM_HEAPS];
	__u64 nm_tag;
	__u32 nm_tag_off, nm_tag_size;
	__u32 nm_method_off, frame_size_off, block_size;
	__u32 anchor_sp_off, anchor_pc_off, anchor_fp_off;
};
#define JVM_COMPRESSED_KLASS 1   /* the klass word is a 32-bit narrowKlass */
#define JVM_OBJECT_HANDLE    2   /* _object holds the address of the object's slot, not the object */
#define JVM_COMPRESSED_OOPS  4   /* reference fields are narrowOops */
#define JVM_MONITOR_PROBES   8   /* -XX:+DTraceMonitorProbes: its monitor probes name its monitors, not EnterI */
#define JVM_FRAMES          16   /* its interpreter and Method layout known: waits keep their Java frames */
#define JVM_CODE_CACHE      32   /* its code heaps and thread anchor known: compiled frames walked too */

/* a name filter of a probe table entry (usdt.bpf.c): a wait counts only if
 * its name ends with one of its entry's suffixes, by (entry << 2 | i) */
struct usdt_suffix {
	__u32 len;
	char s[USDT_NAME_LEN];
};

enum usdt_counter {
	USDT_COUNTERS(COUNTER_ENUM)
	UCNT__MAX,
};

#endif
