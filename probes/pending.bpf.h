/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* contention.bpf.c's per-CPU buffer of finished waits: contention_end
 * appends to it (no hash lookup while the lock is just taken), the next
 * contention_begin or sched_switch on that CPU adds it to lock_stats.
 */
#ifndef LOCKSCOPE_PENDING_BPF_H
#define LOCKSCOPE_PENDING_BPF_H

#include "contention.bpf.h"
#include "futexspin.bpf.h"      /* charge_futex_word */

/* n waits of one key: their (estimated) total, the max of the timed ones,
 * how many were not timed; spun inside a futex syscall on `uaddr` (0: not),
 * charged to that word too (futexspin.bpf.h) */
static __always_inline void aggregate_n(struct cpu_state *cs, __u64 lock, __u32 flags, __s32 stack, __u32 n,
					__u64 total, __u64 max, __u32 untimed, __u64 uaddr, __u32 tgid)
{
	struct lock_key key = { .lock = lock, .flags = flags, .stack_id = stack };
	bool added = add_waits(cs, &lock_stats, &key, n, total, max, untimed, CNT_AGG_FULL);

	if (cs)
		__sync_fetch_and_add(&cs->counters[CNT_CONTENTIONS], n);
	if (added && uaddr)
		charge_futex_word(cs, &key, uaddr, tgid, n, total, max, untimed);
}

#define FLUSH_AFTER_NS 1000000ULL

_Static_assert((MAX_PENDING & (MAX_PENDING - 1)) == 0, "MAX_PENDING: a power of 2");

struct flush_ctx {
	struct cpu_state *cs;
	__u32 n;
};

/* bpf_loop callback: pending wait i into lock_stats (the verifier sees
 * aggregate_n once, not once per buffer entry and calling state) */
static long flush_one(__u32 i, void *data)
{
	struct flush_ctx *f = data;
	struct pending_wait *p;

	if (i >= f->n)
		return 1;
	p = &f->cs->pending[i & (MAX_PENDING - 1)];     /* bounded for the verifier: a power of 2 */
	aggregate_n(f->cs, p->lock, p->flags, p->stack, p->count, p->delta, p->max, p->untimed, p->uaddr, p->tgid);
	return 0;
}

/* move the pending finished waits of this CPU into lock_stats; only from
 * non-preemptible context */
static __always_inline void flush_pending(struct cpu_state *cs)
{
	struct flush_ctx f = { .cs = cs, .n = cs->npending };

	if (!f.n || cs->busy)
		return;
	cs->busy = 1;
	bpf_loop(MAX_PENDING, flush_one, &f, 0);
	cs->npending = 0;
	cs->busy = 0;
}

/* at a contention_begin: flush when the buffer is half full or its first
 * entry waited FLUSH_AFTER_NS by this CPU's last clock read (the time series
 * reads only the map); runs of one key take one entry, so a serialized
 * workload flushes seldom */
static __always_inline void flush_due(struct cpu_state *cs)
{
	if (cs->npending >= MAX_PENDING / 2 ||
	    (cs->npending && cs->last_now - cs->pending_since > FLUSH_AFTER_NS))
		flush_pending(cs);
}

/* the finished wait w (estimated total, timed duration or 0, untimed 0 or
 * 1), from non-preemptible context */
static __always_inline void push_wait(struct cpu_state *cs, const struct spin_wait *w, __u64 total, __u64 max,
				      __u32 untimed)
{
	__u64 lock = w->lock, uaddr = w->uaddr;
	__u32 flags = w->flags, tgid = w->tgid;
	__s32 stack = w->stack;
	__u32 n;

	if (!enabled)
		return;
	/* an interrupt inside a buffer update on this CPU: add it directly */
	if (cs->busy) {
		aggregate_n(cs, lock, flags, stack, 1, total, max, untimed, uaddr, tgid);
		return;
	}
	cs->busy = 1;
	n = cs->npending;
	/* the same key as the last one (a serialized workload's waits, mostly
	 * unsampled): one entry, so the flush makes one lookup for all */
	if (n > 0 && n <= MAX_PENDING) {
		struct pending_wait *last = &cs->pending[(n - 1) & (MAX_PENDING - 1)];

		if (last->lock == lock && last->flags == flags && last->stack == stack && last->uaddr == uaddr &&
		    last->tgid == tgid) {
			last->count++;
			last->delta += total;
			last->untimed += untimed;
			if (max > last->max)
				last->max = max;
			cs->busy = 0;
			return;
		}
	}
	if (n >= MAX_PENDING) {
		cs->busy = 0;
		flush_pending(cs);
		cs->busy = 1;
		n = 0;
	}
	n &= MAX_PENDING - 1;
	cs->pending[n].lock = lock;
	cs->pending[n].flags = flags;
	cs->pending[n].stack = stack;
	cs->pending[n].delta = total;
	cs->pending[n].max = max;
	cs->pending[n].count = 1;
	cs->pending[n].untimed = untimed;
	cs->pending[n].uaddr = uaddr;
	cs->pending[n].tgid = tgid;
	if (!n)
		cs->pending_since = cs->last_now;
	cs->npending = n + 1;
	cs->busy = 0;
}

#endif
