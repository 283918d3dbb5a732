/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Python frames of the thread that releases CPython's GIL (holders.bpf.h):
 * the code it ran while it held the GIL, for the GIL's holders.
 *
 * The loader finds each tracked CPython process's GIL and gives its layout
 * (py_procs, pyframes.c). A waiter woken on one of the GIL's futex words was
 * woken by the thread that dropped the GIL (drop_gil signals its condition
 * variable after storing itself in last_holder) or, with FORCE_SWITCHING, by
 * the thread that just took it (take_gil sets last_holder, then signals the
 * dropping thread). Either way the waker is the GIL's last holder: its
 * PyThreadState is read from last_holder, checked against the waker's own
 * thread id (native_thread_id; 3.9, 3.10: thread_id, pthread_self(), the fs
 * base), and its frame chain walked (code object pointers only: the loader
 * reads their names from the process while it runs); the woken waiter's
 * PyThreadState is found from the holder's in the interpreter's thread list
 * and its frames walked too (py_waits). A wake on the GIL's own mutex by a
 * thread that does not hold the GIL fails the check and gets no frames.
 * A releaser has dropped the GIL when it wakes a waiter; with
 * FORCE_SWITCHING the taker wakes the dropper while it holds the GIL, so
 * the walk (up to two stacks of 16 frames) lengthens that hold, once per
 * switch (at most every 5 ms).
 */
#ifndef LOCKSCOPE_PYFRAMES_BPF_H
#define LOCKSCOPE_PYFRAMES_BPF_H

#include "shared.bpf.h"
#include "taskstate.bpf.h"
#include "tasktimes.bpf.h"
#include "tasks_types.h"

#define PY_PROCS      256
#define PY_STACKS     4096
#define PY_OWNED_BY_CSTACK 3    /* a C entry frame (3.12+): no Python code */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PY_PROCS);
	__type(key, __u32);              /* tgid */
	__type(value, struct py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PY_STACKS);
	__type(key, __u32);              /* a hash of tgid and code pointers, not 0 */
	__type(value, struct py_stack);
} py_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_stack);
} py_stack_buf SEC(".maps");

static __always_inline __u64 py_read_ptr(__u64 addr)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr))
		return 0;
	return v;
}

/* a GIL waiter's time asleep until its wait timed out (5 ms: woken by a
 * timer, no releaser), by thread: it waits again at once, and the release
 * that ends that wait is charged with both (the holder held the GIL through
 * them); without it a holder that keeps the GIL until asked to drop it
 * would be charged only the waits' last pieces */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PY_STACKS);
	__type(key, __u32);              /* tid */
	__type(value, __u64);            /* ns */
} py_timed_out SEC(".maps");

static __always_inline bool py_gil_word(__u32 tgid, __u64 uaddr)
{
	const struct py_proc *pp = bpf_map_lookup_elem(&py_procs, &tgid);

	return pp && uaddr >= pp->gil_lo && uaddr < pp->gil_hi;
}

/* p's wait of `wait` ns on futex word uaddr ended by an interrupt (a time-out) */
static __always_inline void py_wait_timed_out(struct task_struct *p, __u64 wait, __u64 uaddr)
{
	__u32 tid = p->pid;
	__u64 *v;

	if (!wait || !py_gil_word(p->tgid, uaddr))
		return;
	v = bpf_map_lookup_elem(&py_timed_out, &tid);
	if (v)
		__sync_fetch_and_add(v, wait);
	else
		bpf_map_update_elem(&py_timed_out, &tid, &wait, BPF_ANY);
}

/* the time p waited on the GIL before its last time-outs, taken */
static __always_inline __u64 py_take_timed_out(struct task_struct *p)
{
	__u32 tid = p->pid;
	__u64 *v = bpf_map_lookup_elem(&py_timed_out, &tid), ns;

	if (!v)
		return 0;
	ns = *v;
	bpf_map_delete_elem(&py_timed_out, &tid);
	return ns;
}

struct py_walk {
	const struct py_proc *pp;
	struct py_stack *st;
	__u64 frame;
	__u64 hash;
	__u32 depth;
};

/* one frame of the chain (a bpf_loop callback: the verifier sees it once) */
static long py_walk_frame(__u64 i, void *ctx)
{
	struct py_walk *w = ctx;
	__u64 code;
	__u8 owner = 0;

	if (!w->frame || w->depth >= PY_DEPTH)
		return 1;
	code = py_read_ptr(w->frame + w->pp->code_off);
	if (!(w->pp->flags & PY_NO_OWNER))
		bpf_probe_read_user(&owner, 1, (const void *)(w->frame + w->pp->owner_off));
	if (code && owner != PY_OWNED_BY_CSTACK) {
		w->st->code[w->depth & (PY_DEPTH - 1)] = code;
		w->depth++;
		w->hash = (w->hash ^ code) * 0x100000001b3ULL;
	}
	w->frame = py_read_ptr(w->frame + w->pp->prev_off);
	return 0;
}

/* the Python stack of the thread whose PyThreadState is `tstate`, stored in
 * py_stacks: its id, or 0 (no frame, map full) */
static __always_inline __u32 py_stack_of(const struct py_proc *pp, __u32 tgid, __u64 tstate)
{
	struct py_walk w = { .pp = pp, .hash = 0xcbf29ce484222325ULL ^ tgid };
	__u32 zero = 0, id;

	w.frame = py_read_ptr(tstate + pp->frame_off);
	if (w.frame && pp->cframe_off != PY_NO_CFRAME)
		w.frame = py_read_ptr(w.frame + pp->cframe_off);
	w.st = bpf_map_lookup_elem(&py_stack_buf, &zero);
	if (!w.st)
		return 0;
	bpf_loop(PY_DEPTH + 4, py_walk_frame, &w, 0);   /* 3.12's C entry frames are skipped */
	if (!w.depth) {
		tcount(TCNT_PY_NO_FRAMES);
		return 0;
	}
	w.st->tgid = tgid;
	w.st->depth = w.depth;        /* code[depth..] are stale: not read */
	id = (__u32)(w.hash ^ (w.hash >> 32)) | 1;
	if (bpf_map_update_elem(&py_stacks, &id, w.st, BPF_NOEXIST) && !bpf_map_lookup_elem(&py_stacks, &id)) {
		tcount(TCNT_PY_FULL);
		return 0;
	}
	return id;
}

/* the interpreter's thread states are a list (PyThreadState.prev at 0, .next
 * at 8 in 3.11 to 3.13): the waiter's is found from the holder's */
#define PY_THREADS 64
struct py_find {
	const struct py_proc *pp;
	__u64 at;
	__u64 found;
	__u64 tid;               /* as py_thread_id gives it */
	__u32 link;              /* 0: prev, 8: next */
};

/* a thread as its PyThreadState names it (tid_off): its thread id, or for
 * 3.9 and 3.10 its pthread_self(), the fs base */
static __always_inline __u64 py_thread_id(const struct py_proc *pp, struct task_struct *t)
{
#if defined(__TARGET_ARCH_x86)
	if (pp->flags & PY_PTHREAD_ID)
		return BPF_CORE_READ(t, thread.fsbase);
#endif
	return BPF_CORE_READ(t, pid);
}

static long py_find_thread(__u64 i, void *ctx)
{
	struct py_find *f = ctx;
	__u64 tid = 0;

	if (!f->at)
		return 1;
	if (!bpf_probe_read_user(&tid, sizeof(tid), (const void *)(f->at + f->pp->tid_off)) && tid == f->tid) {
		f->found = f->at;
		return 1;
	}
	f->at = py_read_ptr(f->at + f->link);
	return 0;
}

/* Python waits on the GIL by the waiter's Python stack: where in its code a
 * thread waited to run again (its frames read at the release that ends the
 * wait, from the releaser's context: one address space) */
/* struct py_wait_key, py_wait_stat: build/proberows.h (lockscope/proberows.toml) */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PY_STACKS);
	__type(key, struct py_wait_key);
	__type(value, struct py_wait_stat);
} py_waits SEC(".maps");

static __always_inline void py_add_wait(__u32 tgid, __u32 py_stack, __u64 wait)
{
	struct py_wait_key k = { .tgid = tgid, .py_stack = py_stack };
	struct py_wait_stat *s = bpf_map_lookup_elem(&py_waits, &k), fresh = { .count = 1, .wait_ns = wait };

	if (s) {
		__sync_fetch_and_add(&s->count, 1);
		__sync_fetch_and_add(&s->wait_ns, wait);
	} else if (bpf_map_update_elem(&py_waits, &k, &fresh, BPF_NOEXIST)) {
		tcount(TCNT_PY_FULL);
	}
}

/* the id of the releasing thread's Python stack in py_stacks, if the waiter
 * (of process tgid, thread waiter_task) waited on futex word `lock` of its
 * process's GIL and the current thread is the GIL's last holder; 0
 * otherwise. The waiter's own Python stack goes in *waiter (0: not found) */
static __always_inline __u32 py_release_stack(__u32 tgid, __u64 lock, struct task_struct *waiter_task,
					      __u32 *waiter)
{
	const struct py_proc *pp = bpf_map_lookup_elem(&py_procs, &tgid);
	struct py_find f = {};
	__u64 tstate, tid = 0;
	__u32 id;

	*waiter = 0;
	if (!pp || lock < pp->gil_lo || lock >= pp->gil_hi)
		return 0;
	if (bpf_get_current_pid_tgid() >> 32 != tgid) {
		tcount(TCNT_PY_NOT_HOLDER);     /* a timer's wake-up in another process's context, say */
		return 0;
	}
	tstate = py_read_ptr(pp->last_holder);
	if (!tstate || bpf_probe_read_user(&tid, sizeof(tid), (const void *)(tstate + pp->tid_off))) {
		tcount(TCNT_PY_UNREADABLE);
		return 0;
	}
	if (tid != py_thread_id(pp, bpf_get_current_task_btf())) {
		tcount(TCNT_PY_NOT_HOLDER);
		return 0;
	}
	id = py_stack_of(pp, tgid, tstate);
	if (!id)
		return 0;
	tcount(TCNT_PY_STACKS);
	f.pp = pp;
	f.tid = py_thread_id(pp, waiter_task);
	for (__u32 link = 8; ; link = 0) {       /* after the holder, then before it */
		f.at = py_read_ptr(tstate + link);
		f.link = link;
		bpf_loop(PY_THREADS, py_find_thread, &f, 0);
		if (f.found || !link)
			break;
	}
	if (f.found)
		*waiter = py_stack_of(pp, tgid, f.found);
	return id;
}

#endif
