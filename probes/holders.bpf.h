/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Holders: who held a lock that a tracked thread waited for, where it let go,
 * and what it did meanwhile. Called by tasks.bpf.c's sched_waking program.
 *
 * A thread woken out of a lock wait is woken by the thread that released the
 * lock: a kernel mutex or rwsem hands over in mutex_unlock/up_write (the
 * waker runs __mutex_unlock_slowpath, rwsem_wake), a futex lock in the
 * releaser's FUTEX_WAKE (glibc's __lll_lock_wake, Rust's and Go's futex
 * wakes). The waker is `current` there, after the lock is released, so
 * nothing here lengthens a critical section. Its stack is the release site,
 * the end of its critical section: the kernel stack for a kernel lock, the
 * user stack for a futex (with a copy of the stack top for each walked
 * release, for unwinding through code without frame pointers: there one
 * frame-pointer stack id stands for many call paths).
 *
 * The waiter's wait is charged to that site: its time off CPU up to the
 * wake-up (a waiter woken and beaten to the lock sleeps again, and that sleep
 * is charged to whoever wakes it next). What the releaser did during that
 * wait comes from its last HOLD_SPANS off-CPU spans (taskstate.bpf.h, kept by
 * contention.bpf.c's sched_switch program): the parts of the wait it spent
 * off CPU, by kernel stack, task state and the lock or futex it waited on
 * itself (hold_activity); time it waited for this same lock (queued behind
 * it, not holding it) apart; the rest of the wait it was on CPU, except what
 * its spans do not cover (an untracked releaser, older spans) counted unseen.
 *
 * Stacks are walked for the first HOLD_STACKS_PER_LOCK releases of each
 * lock, then for one in HOLD_STACK_EVERY on each CPU; the others are counted
 * under STACK_NOT_SAMPLED and the analyzer spreads them over the lock's
 * sampled sites.
 *
 * A thread woken out of a blocking file-lock wait (flkopen.bpf.h) was woken
 * by the holder that let go of the file's lock (locks_wake_up_blocks): the
 * release is charged to the file's inode, a kernel address.
 *
 * A thread woken in a wait the program's USDT probes name (usdt.bpf.c keeps
 * it in usdt_waiting) was woken by that lock's releaser, whatever it slept
 * on: the release is charged to the USDT lock (USDT_LOCK_BIT and a hash of
 * its key; usdt_held keeps the keys), with the user stack.
 */
#ifndef LOCKSCOPE_HOLDERS_BPF_H
#define LOCKSCOPE_HOLDERS_BPF_H

#include "shared.bpf.h"
#include "taskstate.bpf.h"
#include "tasktimes.bpf.h"
#include "futex_wait.bpf.h"
#include "tasks_types.h"
#include "usdt_types.h"

#include "usdtwait.bpf.h"
#include "flkopen.bpf.h"
#include "pyframes.bpf.h"

#define HOLD_STACKS_PER_LOCK 8
#define HOLD_STACK_EVERY     64
#define HOLD_ENTRIES         8192
#define HOLD_COPY_ENTRIES    512     /* 1 MiB of user stack copies at most */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HOLD_ENTRIES);
	__type(key, struct hold_key);
	__type(value, struct hold_stat);
} holds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HOLD_ENTRIES);
	__type(key, struct hold_act_key);
	__type(value, __u64);        /* ns */
} hold_activity SEC(".maps");

/* releases seen per (lock, waiter process): the first are walked */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, HOLD_ENTRIES);
	__type(key, struct hold_key);   /* stack_id 0 */
	__type(value, __u32);
} hold_seen SEC(".maps");

/* releases on this CPU, for the one-in-HOLD_STACK_EVERY sampling */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hold_cpu_releases SEC(".maps");

STACK_MAP(hold_stacks, STACK_ENTRIES / 4);
STACK_MAP(hold_user_stacks, USER_STACK_ENTRIES / 4);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HOLD_COPY_ENTRIES);
	__type(key, struct hold_key);
	__type(value, struct ustack_copy);
} hold_copies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ustack_copy);
} hold_copy_buf SEC(".maps");

/* whether this release gets its stack walked */
static __always_inline bool hold_sampled(__u64 lock, __u32 tgid)
{
	struct hold_key id = { .lock = lock, .tgid = tgid };
	__u32 *seen = bpf_map_lookup_elem(&hold_seen, &id), one = 1, zero = 0;
	__u64 *n;

	if (!seen) {
		bpf_map_update_elem(&hold_seen, &id, &one, BPF_ANY);
		return true;
	}
	if (*seen < HOLD_STACKS_PER_LOCK) {
		__sync_fetch_and_add(seen, 1);     /* a race only shifts the sampling */
		return true;
	}
	n = bpf_map_lookup_elem(&hold_cpu_releases, &zero);
	return n && (*n)++ % HOLD_STACK_EVERY == 0;
}

/* the releaser's registers and user stack top, for this walked release
 * (key->sample set: a random number, not 0), while the map has room */
static __always_inline void copy_release_stack(struct hold_key *key)
{
	struct task_struct *me = bpf_get_current_task_btf();
	struct pt_regs *regs;
	struct ustack_copy *c;
	__u32 zero = 0;
	long err;

	key->sample = bpf_get_prandom_u32() | 1;
	c = bpf_map_lookup_elem(&hold_copy_buf, &zero);
	regs = (struct pt_regs *)bpf_task_pt_regs(me);
	if (!c || !regs)
		return;
	copy_stack_top(c, regs);
	err = bpf_map_update_elem(&hold_copies, key, c, BPF_NOEXIST);
	if (err) {              /* full (or, rarely, the same number drawn twice) */
		key->sample = 0;
		tcount(TCNT_HOLD_COPY_FULL);
	}
}

/* the release site: the releaser's kernel stack (kernel lock) or user stack
 * (futex), or STACK_NOT_SAMPLED */
static __always_inline __s32 release_site(void *ctx, struct hold_key *key)
{
	long id;

	if (!hold_sampled(key->lock, key->tgid)) {
		tcount(TCNT_HOLD_STACK_SKIPPED);
		return STACK_NOT_SAMPLED;
	}
	if (key->lock >= USER_SPACE_END)
		id = bpf_get_stackid(ctx, &hold_stacks, 0);
	else
		id = bpf_get_stackid(ctx, &hold_user_stacks, BPF_F_USER_STACK);
	if (id < 0) {
		tcount(TCNT_HOLD_STACK_LOST);
		return STACK_NOT_SAMPLED;
	}
	key->stack_id = id;
	if (key->lock < USER_SPACE_END)
		copy_release_stack(key);
	return id;
}

static __always_inline void add_activity(const struct hold_key *key, const struct off_span *sp, __u64 ns)
{
	struct hold_act_key k = {
		.lock = key->lock, .tgid = key->tgid, .stack_id = key->stack_id, .sample = key->sample,
		.act_lock = sp->lock, .act_stack = sp->stack_id, .act_state = sp->state, .py_stack = key->py_stack,
	};
	__u64 *v = bpf_map_lookup_elem(&hold_activity, &k);

	if (v) {
		__sync_fetch_and_add(v, ns);
	} else if (bpf_map_update_elem(&hold_activity, &k, &ns, BPF_NOEXIST)) {
		v = bpf_map_lookup_elem(&hold_activity, &k);   /* another CPU made it */
		if (v)
			__sync_fetch_and_add(v, ns);
		else
			tcount(TCNT_HOLDS_FULL);
	}
}

/* the releaser's off-CPU spans within [from, now): added to `s` and to
 * hold_activity */
static __always_inline void releaser_activity(const struct hold_key *key, struct hold_stat *s, __u64 from,
					      __u64 now)
{
	struct task_state *ts = bpf_task_storage_get(&tstate, bpf_get_current_task_btf(), NULL, 0);
	__u64 lo, hi, covered_from = from, off = 0, queued = 0;

	if (!ts) {                       /* never tracked: nothing known */
		__sync_fetch_and_add(&s->unseen_ns, now - from);
		return;
	}
	for (__u32 i = 0; i < HOLD_SPANS; i++) {
		const struct off_span *sp = &ts->spans[i];

		if (!sp->end)
			continue;
		lo = sp->start > from ? sp->start : from;
		hi = sp->end < now ? sp->end : now;
		if (hi <= lo)
			continue;
		if (sp->lock == key->lock) {
			queued += hi - lo;   /* waiting for it too: not holding it */
			continue;
		}
		off += hi - lo;
		add_activity(key, sp, hi - lo);
	}
	/* the oldest span kept: before it, the releaser's time is not known */
	if (ts->span_next >= HOLD_SPANS) {
		const struct off_span *oldest = &ts->spans[ts->span_next % HOLD_SPANS];

		if (oldest->start > from)
			covered_from = oldest->start;
	}
	if (covered_from > from)
		__sync_fetch_and_add(&s->unseen_ns, covered_from - from);
	__sync_fetch_and_add(&s->offcpu_ns, off);
	__sync_fetch_and_add(&s->queued_ns, queued);
}

/* `p`, tracked, is woken by the current task (not in interrupt context) after
 * `wait` ns off CPU (0: woken on its way to sleep, a release all the same,
 * that kept it from sleeping) waiting on futex `uaddr` (0: none): if it
 * waited for a lock, the current task released it */
static __always_inline void hold_released(void *ctx, struct task_struct *p, __u64 wait, __u64 uaddr)
{
	struct task_state *pts;
	struct hold_stat *s;
	struct hold_key key = {};
	__u64 now, lock = uaddr;
	__u32 waiter_py;

	if (!lock) {
		/* a kernel sleeping-lock wait (mutex, rwsem) open in its storage */
		pts = bpf_task_storage_get(&tstate, p, NULL, 0);
		if (pts)
			lock = pts->lock;
	}
	if (!lock) {
		/* a blocking file-lock wait (filelocks.bpf.c): woken by the holder
		 * that let go of the file's lock, keyed by the file's inode */
		__u32 ptid = p->pid;
		struct flk_open *o = bpf_map_lookup_elem(&flk_open, &ptid);

		if (o && !(o->key.flags & FLK_BUSY))
			lock = o->key.inode;
	}
	/* a wait the program's USDT probes name (PostgreSQL's LWLock waits
	 * sleep on a semaphore's futex, its heavyweight lock waits on a latch)
	 * is that lock's, unless a kernel lock's */
	if (usdt_on && lock < USER_SPACE_END) {
		__u64 id = usdt_lock_of(p->pid);

		if (id)
			lock = id;
	}
	if (!lock)
		return;
	now = bpf_ktime_get_ns();
	key.lock = lock;
	key.tgid = p->tgid;
	key.stack_id = STACK_NOT_SAMPLED;
	release_site(ctx, &key);
	if (lock < USER_SPACE_END && (key.py_stack = py_release_stack(p->tgid, lock, p, &waiter_py))) {
		wait += py_take_timed_out(p);
		if (waiter_py)
			py_add_wait(p->tgid, waiter_py, wait);
	}
	s = bpf_map_lookup_elem(&holds, &key);
	if (!s) {
		struct hold_stat fresh = {};
		__u64 id = bpf_get_current_pid_tgid();

		fresh.waker_tgid = id >> 32;
		fresh.waker_tid = (__u32)id;
		bpf_get_current_comm(fresh.waker_comm, sizeof(fresh.waker_comm));
		bpf_map_update_elem(&holds, &key, &fresh, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&holds, &key);
		if (!s) {
			tcount(TCNT_HOLDS_FULL);
			return;
		}
	}
	__sync_fetch_and_add(&s->count, 1);
	__sync_fetch_and_add(&s->wait_ns, wait);
	tcount(TCNT_HOLDS);
	releaser_activity(&key, s, now - wait, now);
}

#endif
