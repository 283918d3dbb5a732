/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* Which of contention.bpf.c's lock waits are timed, get a kernel stack and
 * are recorded as a lock's waiters: per CPU, a 10 ms window sets how many.
 * Part of contention.bpf.c (its helpers and stack map: contention.bpf.h). */
#ifndef LOCKSCOPE_WAITSAMPLING_BPF_H
#define LOCKSCOPE_WAITSAMPLING_BPF_H

#include "contention.bpf.h"
#include "owners.bpf.h"

#define SAMPLE_WINDOW_NS 10000000ULL
#define STACKS_PER_LOCK 8

/* stack walks per CPU per 10 ms beyond the first few of each lock; 0: all
 * (the loader's --stack-rate, default 500/s: 5). Writable while loaded: the
 * cost budget lowers it (budget.c) */
volatile __u32 stack_budget = 5;
/* spin and mutex waits timed per CPU per 10 ms before the rest are sampled
 * (the loader's --timed-rate, default 10,000/s: 100); 0: every wait timed.
 * Writable while loaded, as stack_budget */
volatile __u32 timed_per_window = 100;

/* how many waits of each (lock, flags) got a stack so far */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, OPEN_ENTRIES);
	__type(key, struct lock_key);
	__type(value, __u32);
} stacked_locks SEC(".maps");

/* ---- waiters (issue 11): which threads wait on each lock ------------------
 * One lock address waited on by every worker is one shared object; one per
 * worker is not. A thread in lock_stats' key would multiply its entries and
 * cost every wait; instead, from contention_begin, where the task waits
 * anyway, every rwsem, per-CPU rwsem and rt_mutex wait (the task is about
 * to sleep) and a random one in WAITER_EVERY of the spinning and mutex waits
 * (mutexes begin again under their wait_lock) add their (lock, thread) pair
 * here. A lock waited on often is seen from all its waiters. Random, not
 * every Nth: a loop that waits on the same locks in the same order would
 * alias. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WAITER_ENTRIES);
	__type(key, struct waiter_key);
	__type(value, __u64);
} waiters SEC(".maps");

static __always_inline void sample_waiter(__u64 lock, __u32 flags, __u32 rnd)
{
	struct waiter_key k = { .lock = lock };
	__u64 one = 1, *n;

	if ((flags & (LCB_F_SPIN | LCB_F_MUTEX)) && rnd % WAITER_EVERY)
		return;
	k.tid = (__u32)bpf_get_current_pid_tgid();
	n = bpf_map_lookup_elem(&waiters, &k);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&waiters, &k, &one, BPF_NOEXIST);
}

/*
 * Per CPU, a 10 ms window (rolled at a clock read, see timed_wait): its stack
 * walks and its spin and mutex waits. The waits' rate in one window sets how
 * many of the next window's are timed.
 */
static __always_inline void window_roll(struct cpu_state *cs, __u64 now)
{
	__u64 elapsed = now - cs->window_start;

	if (elapsed <= SAMPLE_WINDOW_NS)
		return;
	/* one in time_every: about timed_per_window timed waits per window */
	if (timed_per_window && elapsed < 100 * SAMPLE_WINDOW_NS)
		cs->time_every = cs->window_waits * SAMPLE_WINDOW_NS / elapsed / timed_per_window + 1;
	else
		cs->time_every = 1;
	cs->window_start = now;
	cs->window_waits = 0;
	cs->walks = 0;
}

/*
 * Two clock reads cost about 110 ns here (bpf_ktime_get_ns, ~55 ns each in
 * this VM), more than the rest of a wait's begin and end together. A spin
 * or mutex wait is timed when the CPU has fewer than timed_per_window such
 * waits per 10 ms, else one in time_every at random (a run of waits at
 * regular places would alias with every Nth); an untimed wait is counted,
 * exactly, and a timed one adds its duration times time_every to the
 * total, so that each lock's and stack's total estimates the sum of all its
 * waits without bias (max: of the timed ones). A wait that sleeps is timed
 * from then on anyway and weighs one (sched_switch): long waits are never
 * left to chance.
 */
static __always_inline bool timed_wait(struct cpu_state *cs, __u32 rnd, __u64 *now, __u32 *weight)
{
	__u32 every = cs->time_every;

	cs->window_waits++;
	if (every > 1 && (rnd >> 8) % every) {
		*weight = 0;
		return false;
	}
	*now = bpf_ktime_get_ns();
	*weight = every > 1 ? every : 1;
	cs->last_now = *now;
	window_roll(cs, *now);
	return true;
}

/*
 * A kernel stack walk costs about a microsecond, longer than most spin waits.
 * Each CPU walks at most stack_budget stacks per 10 ms window; beyond that,
 * the first STACKS_PER_LOCK waits of every (lock, flags) still get a stack.
 * Other waits are counted, exactly, under their lock with stack id
 * STACK_NOT_SAMPLED; the analyzer spreads them over the lock's sampled stacks.
 * A walked mutex or rwsem wait looks at the lock's owner first (`owner`,
 * owners.bpf.h).
 */
static __always_inline __s32 sampled_stack(void *ctx, struct cpu_state *cs, __u64 lock, __u32 flags, bool owner)
{
	struct lock_key key = { .lock = lock, .flags = flags };
	__u64 tag = lock ^ ((__u64)flags << 56);     /* kernel addresses: top byte 0xff */
	__u32 *seen, one = 1, slot = (__u32)((lock >> 6) ^ flags) & (STACKED_CACHE - 1);

	if (!stack_budget) {
		if (owner)
			look_at_owner(cs, lock, flags);
		return stack_in(ctx, &stacks, cs);
	}
	/* budget spent and the lock known to have its first stacks: no lookup */
	if (cs->walks >= stack_budget && cs->stacked[slot] == tag) {
		count(cs, CNT_STACK_SKIPPED);
		return STACK_NOT_SAMPLED;
	}
	seen = bpf_map_lookup_elem(&stacked_locks, &key);
	if (seen && *seen >= STACKS_PER_LOCK)
		cs->stacked[slot] = tag;
	if (cs->walks < stack_budget || !seen || *seen < STACKS_PER_LOCK) {
		cs->walks++;
		if (seen && *seen < STACKS_PER_LOCK)    /* read only after: no shared write */
			__sync_fetch_and_add(seen, 1);
		else
			bpf_map_update_elem(&stacked_locks, &key, &one, BPF_ANY);
		if (owner)      /* before the walk: a short critical section may end during it */
			look_at_owner(cs, lock, flags);
		return stack_in(ctx, &stacks, cs);
	}
	count(cs, CNT_STACK_SKIPPED);
	return STACK_NOT_SAMPLED;
}

#endif
