// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Lock contention, off-CPU time and CPU samples of the tracked tasks,
 * aggregated in the kernel.
 *
 * lock:contention_begin/end: a wait is remembered at begin (lock, flags,
 * start time, sampled kernel stack) and added up at end by (lock, flags,
 * stack): count, total, max. Spinning waits (spinlock, rwlock) run with
 * preemption disabled, so they live on a small per-CPU stack that also holds
 * waits nested from interrupt context. So do mutex waits while their task is
 * on CPU: a mutex wait runs with preemption disabled from its first begin to
 * its end except where it calls schedule(), and sched_switch moves an open
 * mutex wait into the task's storage at switch-out and back onto the CPU's
 * stack at switch-in, so a mutex wait's begin and end (the common case: won
 * by spinning, never slept) touch no task storage. A mutex begins
 * (spinning), begins again (sleeping) and ends once: one wait. Other sleeping
 * waits (rwsem, rt_mutex, percpu rwsem: preemptible) live in task-local
 * storage.
 *
 * contention_end runs with the lock just taken: everything it does lengthens
 * the critical section, and so manufactures contention. So end makes no hash
 * lookup: it reads the per-CPU state and the task's storage, and appends the
 * finished wait to a per-CPU pending buffer. The buffer is added to the
 * aggregation map at the next contention_begin on that CPU (where the task
 * waits anyway) or sched_switch; the loader merges what is left at stop.
 * Ends in preemptible context (rwsem, percpu rwsem, rt_mutex) and ends that
 * interrupt a buffer update aggregate directly instead.
 *
 * sched_switch: time off CPU of the tracked tasks by (kernel stack at
 * switch-out, task state, whether a sleeping-lock wait was open, thread);
 * in the same program, futex waits (futexwaits.bpf.h, with --futex) and
 * per-thread times (tasktimes.bpf.h): one program on sched_switch, one clock
 * read, one tracked-tgid test per switch (three programs cost PMUTEX 3.7
 * points more on the 2-vCPU VM, most of it their dispatch; bench/README.md).
 *
 * perf cpu-clock: on-CPU samples of the tracked tasks by kernel stack; they
 * account for rwsem optimistic spinning, which fires no tracepoint.
 *
 * Tracked tasks: a set of tgids filled by the loader and by fork-following.
 *
 * Beside this file: pending.bpf.h (the per-CPU buffer of finished waits),
 * waitsampling.bpf.h (which waits are timed, get a stack walk, and are
 * recorded as their lock's waiters), futexwaits.bpf.h and tasktimes.bpf.h
 * (sched_switch's futex and per-thread parts), offcpu.bpf.h (its off-CPU
 * part: switch-out stacks, spans, the mutex wait that moves with its task),
 * taskstate.bpf.h (the per-thread state), futexspin.bpf.h (spinning inside
 * a futex syscall, charged to its futex word too), owners.bpf.h (who owns a
 * mutex or rwsem a sampled wait begins on, doing what).
 */
#include "contention.bpf.h"     /* first: the state and helpers the fragments share */
/* the fragments, each including what it uses (in any order) */
#include "futex_wait.bpf.h"
#include "futexspin.bpf.h"
#include "futexwaits.bpf.h"
#include "offcpu.bpf.h"
#include "owners.bpf.h"
#include "pending.bpf.h"
#include "sqlitesleeps.bpf.h"
#include "tasktimes.bpf.h"
#include "usdtwait.bpf.h"
#include "waitsampling.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define EFAULT 14
#define STALE_SPIN_NS 1000000000ULL

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, AGG_ENTRIES);
	__type(key, struct sample_key);
	__type(value, __u64);
} cpu_samples SEC(".maps");

/* CPU samples' stacks are nearly all distinct: their own map, so that they
 * never push lock-wait stacks out of theirs */
STACK_MAP(sample_stacks, SAMPLE_STACK_ENTRIES);

/* user stacks of CPU samples (frame pointers): user-space spinning, charged
 * offline to the lock whose acquire path it is in (analyzer/user/userspin.py) */
STACK_MAP(sample_user_stacks, USER_STACK_ENTRIES);

/* and the user registers and stack top of the first SAMPLE_COPY_ENTRIES of
 * them (a leaf like pthread_spin_lock keeps no frame, and code built without
 * frame pointers breaks the walk): unwound offline with the ELF CFI */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SAMPLE_COPY_ENTRIES);
	__type(key, __u32);
	__type(value, struct ustack_copy);
} sample_copies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ustack_copy);
} sample_copy_buf SEC(".maps");

__u32 sample_copies_taken;      /* reset by the loader with the maps */

/* ---- lock contention ------------------------------------------------------ */

/* a mutex wait begins again (sleeping, or spinning as the first waiter after
 * a wake-up): still one wait; true when this begin is such (d: the depth at
 * the begin) */
static __always_inline bool mutex_wait_continues(struct cpu_state *cs, __u32 d, __u64 lock, __u32 flags)
{
	if (!mutex_open_here(cs) || cs->spins[0].lock != lock)
		return false;
	if (!(flags & LCB_F_SPIN)) {
		cs->spins[0].flags |= LS_F_SLEPT;
		if (cs->spins[0].stack >= 0)    /* about to sleep: the owner again */
			look_at_owner(cs, lock, flags);
	}
	if (d > 1) {            /* spin waits above it lost their end */
		count(cs, CNT_STALE_SPIN);
		cs->depth = 1;
	}
	return true;
}

/* a mutex wait opens at the bottom of the CPU's stack (sched_switch moves it
 * into the task's storage if it sleeps) */
static __always_inline void begin_mutex_wait(void *ctx, struct cpu_state *cs, __u64 lock, __u32 flags, __u32 rnd)
{
	__u32 d = cs->depth, weight = 1;
	__u64 now = 0;

	if (mutex_wait_continues(cs, d, lock, flags))
		return;
	sample_waiter(lock, flags, rnd);
	/* anything left here lost its end: a mutex begins with no wait open */
	if (d > 0 && d <= MAX_SPIN_NEST)
		count(cs, (cs->spins[0].flags & LCB_F_MUTEX) ? CNT_STALE_WAIT : CNT_STALE_SPIN);
	/* the stack before the clock: a timed wait rolls the window,
	 * whose walk budget must not favour timed waits */
	cs->spins[0].stack = sampled_stack(ctx, cs, lock, flags, true);
	timed_wait(cs, rnd, &now, &weight);
	flush_due(cs);              /* the task spins or sleeps anyway */
	cs->spins[0].lock = lock;
	cs->spins[0].flags = flags;
	cs->spins[0].start = now;
	cs->spins[0].weight = weight;
	cs->spins[0].uaddr = 0;
	cs->spins[0].tgid = 0;
	cs->depth = 1;
}

/* the depth of the spin stack (d, of which the open mutex wait at the bottom
 * is base) less the entries that lost their end, seen at a spin wait's begin
 * on `lock` (now: the clock, if timed) */
static __always_inline __u32 drop_stale_spins(struct cpu_state *cs, __u64 lock, __u32 d, __u32 base, bool timed,
					      __u64 now)
{
	struct spin_wait *w;

	if (timed && d > base) {
		w = &cs->spins[base & (MAX_SPIN_NEST - 1)];
		if (w->weight && now - w->start > STALE_SPIN_NS) {
			count(cs, CNT_STALE_SPIN);
			d = base;
		}
	}
	/* spinning locks never begin twice within one wait: the same lock
	 * on top means its end was missed; this begin starts a new wait */
	if (d > 0 && cs->spins[(d - 1) & (MAX_SPIN_NEST - 1)].lock == lock) {
		count(cs, CNT_STALE_SPIN);
		d--;
	}
	return d;
}

/* spinlock, rwlock: preemption disabled, a wait nests only from interrupt
 * context; pushed on the CPU's stack */
static __always_inline void begin_spin_wait(void *ctx, struct cpu_state *cs, __u64 lock, __u32 flags, __u32 rnd)
{
	struct spin_wait *w;
	__u32 d = cs->depth, base, tgid = 0, weight = 1;
	__u64 uaddr, now = 0;
	__s32 stack;
	bool timed;

	if (d > MAX_SPIN_NEST)
		d = 0;
	/* an end missed (e.g. skipped by BPF recursion protection) leaves an
	 * entry behind; spin waits are short, so an old entry is stale (an
	 * open mutex wait at the bottom is not a spin wait: it may be old;
	 * an untimed entry has no start: left to the checks below and to the
	 * next task switch) */
	base = d > 0 && (cs->spins[0].flags & LCB_F_MUTEX) ? 1 : 0;
	/* the stack before the clock (see begin_mutex_wait) */
	stack = sampled_stack(ctx, cs, lock, flags, false);
	timed = timed_wait(cs, rnd, &now, &weight);
	d = drop_stale_spins(cs, lock, d, base, timed, now);
	if (d >= MAX_SPIN_NEST) {
		count(cs, CNT_SPIN_OVERFLOW);
		return;
	}
	flush_due(cs);              /* the task spins anyway */
	uaddr = futex_word_now(ctx, &tgid);
	barrier_var(d);             /* keep the mask: the verifier needs the bound */
	w = &cs->spins[d & (MAX_SPIN_NEST - 1)];
	w->lock = lock;
	w->flags = flags;
	w->stack = stack;
	w->start = now;
	w->weight = weight;
	w->uaddr = uaddr;
	w->tgid = tgid;
	cs->depth = d + 1;
}

/* rwsem, rt_mutex, percpu rwsem: every wait timed (preemptible, fewer); in
 * the task's storage */
static __always_inline void begin_sleeping_wait(void *ctx, struct cpu_state *cs, __u64 lock, __u32 flags)
{
	struct task_state *ts = task_state_of(bpf_get_current_task_btf(), true);
	__u64 now;

	if (!ts) {
		count(cs, CNT_TASK_FULL);
		return;
	}
	now = bpf_ktime_get_ns();
	cs->last_now = now;
	window_roll(cs, now);
	/* they begin once, so a begin while a wait is open means that wait's
	 * end was missed (a task waits for one sleeping lock at a time): it is
	 * discarded and this one starts */
	if (ts->lock)
		count(cs, CNT_STALE_WAIT);
	ts->lock_stack = sampled_stack(ctx, cs, lock, flags, owner_readable(flags));
	ts->lock_flags = flags;
	ts->lock_start = now;
	ts->lock = lock;
}

SEC("tp_btf/contention_begin")
int BPF_PROG(lksc_cont_begin, void *lock, unsigned int flags)
{
	struct cpu_state *cs;
	__u32 rnd;

	/* the filter first: every task's waits come here */
	if (!enabled)
		return 0;
	cs = this_cpu();
	if (!cs || !tracked_here(cs, bpf_get_current_pid_tgid() >> 32))
		return 0;
	rnd = bpf_get_prandom_u32();
	if (flags & LCB_F_MUTEX) {
		begin_mutex_wait(ctx, cs, (__u64)lock, flags, rnd);
		return 0;
	}
	sample_waiter((__u64)lock, flags, rnd);
	if (spinning(flags))
		begin_spin_wait(ctx, cs, (__u64)lock, flags, rnd);
	else
		begin_sleeping_wait(ctx, cs, (__u64)lock, flags);
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(lksc_cont_end, void *lock, int ret)
{
	struct cpu_state *cs = this_cpu();
	struct task_state *ts;
	__u64 now;
	__u32 d;

	if (!cs)
		return 0;
	/* the clock only for a timed wait of ours: every task's waits end here */
	d = cs->depth;
	if (d > 0 && d <= MAX_SPIN_NEST) {
		struct spin_wait *w = &cs->spins[(d - 1) & (MAX_SPIN_NEST - 1)];

		if (w->lock == (__u64)lock) {
			cs->depth = d - 1;
			if (w->weight) {
				now = bpf_ktime_get_ns();
				cs->last_now = now;
				push_wait(cs, w, (now - w->start) * w->weight, now - w->start, 0);
			} else {
				push_wait(cs, w, 0, 0, 1);
			}
			return 0;
		}
	}

	/* only tracked tasks have a slot: no filter lookup needed */
	ts = task_state_of(bpf_get_current_task_btf(), false);
	if (!ts || ts->lock != (__u64)lock) {
		if (ts && enabled)
			count(cs, CNT_UNMATCHED_END);
		return 0;
	}
	now = bpf_ktime_get_ns();
	ts->lock = 0;
	if (enabled)                /* preemptible: no per-CPU buffer */
		aggregate_n(cs, (__u64)lock, ts->lock_flags, ts->lock_stack, 1, now - ts->lock_start,
			    now - ts->lock_start, 0, 0, 0);
	return 0;
}

/* ---- off-CPU -------------------------------------------------------------- */

SEC("tp_btf/sched_switch")
int BPF_PROG(lksc_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	struct cpu_state *cs = this_cpu();
	struct task_state *ts, *prev_ts = NULL;
	__u64 now = 0;      /* the clock only when a tracked thread switches: read once for all parts */
	__u64 uaddr;
	bool prev_tracked;

	if (!cs)
		return 0;
	if (cs->depth)
		switch_out_spin_stack(cs, prev, &now);
	if (!enabled)
		return 0;
	flush_pending(cs);
	prev_tracked = BPF_CORE_READ(prev, pid) && tracked_here(cs, BPF_CORE_READ(prev, tgid));
	if (prev_tracked) {
		prev_ts = switch_out_offcpu(ctx, cs, preempt, prev, prev_state, &now);
		if (prev_ts && !preempt)
			sqlite_sleep_out(prev, prev_ts, prev_state, now);
	}
	ts = task_state_of(next, false);
	if (ts && ts->lock && (ts->lock_flags & LCB_F_MUTEX))
		switch_in_mutex_wait(cs, ts);
	if (ts && ts->off_start) {
		if (ts->off_sqlite)
			sqlite_sleep_in(next, ts, now ? now : (now = bpf_ktime_get_ns()));
		switch_in_offcpu(cs, next, ts, &now);
	}
	/* one program per switch for all its parts (each program on sched_switch
	 * costs a hand-off workload its dispatch: bench/README.md) */
	tasks_switch(preempt, prev, prev_tracked, next, prev_state, &now);
	if (futex_on) {
		uaddr = futex_switch(ctx, preempt, prev, prev_tracked, next, prev_state, &now);
		if (uaddr && prev_ts && !prev_ts->off_lock)
			prev_ts->off_lock = uaddr;
	}
	/* asleep in a wait its program's USDT probes name (on a futex or not):
	 * waiting for that lock */
	if (usdt_on && prev_ts && prev_ts->off_lock < USER_SPACE_END) {
		__u64 id = usdt_lock_of(BPF_CORE_READ(prev, pid));

		if (id)
			prev_ts->off_lock = id;
	}
	return 0;
}

/* ---- CPU samples ---------------------------------------------------------- */

/* the current task's user registers and stack top into sample_copies, while
 * it has room: its number (1..), or 0. The count is not atomic (clang's BPF
 * v1 target has no fetch-and-add): two CPUs may draw one number, and the
 * second copy is then not kept (BPF_NOEXIST) */
static __always_inline __u32 copy_sample_stack(void)
{
	__u32 zero = 0, n = sample_copies_taken + 1;
	struct ustack_copy *c;

	sample_copies_taken = n;
	if (n > SAMPLE_COPY_ENTRIES)
		return 0;
	c = bpf_map_lookup_elem(&sample_copy_buf, &zero);
	if (!c)
		return 0;
	/* interrupted in user space or in a system call: its saved user registers */
	copy_stack_top(c, (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf()));
	if (bpf_map_update_elem(&sample_copies, &n, c, BPF_NOEXIST))
		return 0;
	return n;
}

SEC("perf_event")
int lksc_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct cpu_state *cs;
	struct task_state *ts;
	struct sample_key key = {};
	__u64 *n, one = 1;
	long sid;

	if (!enabled || !(__u32)id || !tgid_tracked(id >> 32))
		return 0;
	cs = this_cpu();
	/* no kernel stack: the sample hit user space (-EFAULT) */
	sid = bpf_get_stackid(ctx, &sample_stacks, 0);
	if (sid == -EFAULT)
		sid = STACK_USER;
	else if (sid < 0)
		count(cs, CNT_STACK_LOST);
	key.stack_id = sid;
	key.user_stack = -1;
	if (futex_on) {
		key.user_stack = bpf_get_stackid(ctx, &sample_user_stacks, BPF_F_USER_STACK);
		if (key.user_stack < 0) {
			key.user_stack = -1;
		} else {
			key.tgid = id >> 32;
			key.tid = (__u32)id;
			key.copy = copy_sample_stack();
		}
	}
	if (cs && mutex_open_here(cs)) {
		key.in_lock_wait = 1;
	} else {
		ts = task_state_of(bpf_get_current_task_btf(), false);
		key.in_lock_wait = ts && ts->lock;
	}
	n = bpf_map_lookup_elem(&cpu_samples, &key);
	if (n)
		(*n)++;
	else if (bpf_map_update_elem(&cpu_samples, &key, &one, BPF_NOEXIST))
		count(cs, CNT_SAMPLES_FULL);
	count(cs, CNT_SAMPLES);
	return 0;
}

/* ---- tracking ------------------------------------------------------------- */

/* fork-following: children of tracked processes are tracked too */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(lksc_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid, ctgid;
	__u8 one = 1;

	if (system_wide)
		return 0;
	ptgid = BPF_CORE_READ(parent, tgid);
	ctgid = BPF_CORE_READ(child, tgid);
	if (ctgid == ptgid || !bpf_map_lookup_elem(&tracked, &ptgid))
		return 0;
	if (bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY))
		count(this_cpu(), CNT_TRACKED_FULL);
	else
		count(this_cpu(), CNT_FORKS_TRACKED);
	return 0;
}

/* a tracked process gone (its last thread exits): out of the filter, so that
 * a fork storm's children never fill it and a reused pid is not traced; the
 * group is dead once signal->live reached 0, which do_exit does before this
 * tracepoint */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(lksc_exit, struct task_struct *task)
{
	__u32 tgid;

	if (system_wide || BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	if (!bpf_map_delete_elem(&tracked, &tgid))
		count(this_cpu(), CNT_EXITS_UNTRACKED);
	return 0;
}
