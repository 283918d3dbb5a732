// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Lock contention and off-CPU time of the tracked tasks, aggregated in kernel.
 *
 * lock:contention_begin/end: a wait is remembered at begin (lock, flags,
 * start, kernel stack) and added to lock_stats at end, keyed by
 * (lock, flags, stack). Spinning waits (spinlock, rwlock) run with
 * preemption disabled, so they live in a small per-CPU stack that also
 * absorbs waits nested from interrupt context. Sleeping waits (mutex,
 * rwsem, rt_mutex, percpu-rwsem) live in a per-task slot; a mutex emits
 * begin (spinning) then begin (sleeping) then one end, and is counted once.
 *
 * The wait is timed from the moment begin fires. A stack, when one is
 * taken (sampled, see sampled_stack), is walked at begin, where the task
 * waits anyway; end does O(1) work because it runs with the lock taken.
 *
 * sched_switch: time off CPU of the tracked tasks by (kernel stack at
 * switch-out, task state, whether a sleeping-lock wait was open).
 *
 * perf cpu-clock: on-CPU samples of the tracked tasks by kernel stack.
 *
 * Tracked tasks: a set of tgids filled by the loader and by fork-following.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "probe.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define EFAULT 14

const volatile bool system_wide = false;
/* stack walks per CPU per 10 ms beyond the first few of each lock; 0: all */
const volatile __u32 stack_budget = 20;

#define SAMPLE_WINDOW_NS 10000000ULL
#define STACKS_PER_LOCK 8

/* set by the loader between start and stop */
bool enabled = false;

struct task_state {
	__u64 lock;            /* open sleeping-lock wait, 0 if none */
	__u64 lock_start;
	__u32 lock_flags;
	__s32 lock_stack;
	__u64 off_start;       /* switched out at, 0 if on CPU */
	__s32 off_stack;
	__u32 off_state;
	__u32 off_in_lock;
	__u32 pad;
};

struct spin_wait {
	__u64 lock;
	__u64 start;
	__u32 flags;
	__s32 stack;
};

struct spin_stack {
	__u32 depth;
	__u32 pad;
	struct spin_wait e[MAX_SPIN_NEST];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);   /* tgid */
	__type(value, __u8);
} tracked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);   /* pid (thread id) */
	__type(value, struct task_state);
} tstate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct spin_stack);
} spins SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct lock_key);
	__type(value, struct wait_stat);
} lock_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct offcpu_key);
	__type(value, struct wait_stat);
} offcpu_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, __u64);
} cpu_samples SEC(".maps");

struct stack_sampler {
	__u64 window_start;
	__u32 walks;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_sampler);
} sampler SEC(".maps");

/* how many waits of each (lock, flags) got a stack so far */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct lock_key);
	__type(value, __u32);
} stacked_locks SEC(".maps");

/* CPU samples' stacks are nearly all distinct: their own map, so that they
 * never push lock-wait stacks out of theirs */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} sample_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT__MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

#define STALE_SPIN_NS 1000000000ULL

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);

	if (v)
		(*v)++;
}

static __always_inline bool tgid_tracked(__u32 tgid)
{
	if (system_wide)
		return true;
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

static __always_inline bool spinning(__u32 flags)
{
	return (flags & LCB_F_SPIN) && !(flags & LCB_F_MUTEX);
}

static __always_inline struct task_state *task_state_of(__u32 pid)
{
	struct task_state *ts = bpf_map_lookup_elem(&tstate, &pid);
	struct task_state zero = {};

	if (ts)
		return ts;
	bpf_map_update_elem(&tstate, &pid, &zero, BPF_NOEXIST);
	ts = bpf_map_lookup_elem(&tstate, &pid);
	if (!ts)
		count(CNT_TASK_FULL);
	return ts;
}

static __always_inline void add_wait(void *map, void *key, __u64 delta, __u32 full_counter)
{
	struct wait_stat *s = bpf_map_lookup_elem(map, key);

	if (!s) {
		struct wait_stat zero = {};

		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(map, key);
		if (!s) {
			count(full_counter);
			return;
		}
	}
	s->count++;
	s->total_ns += delta;
	if (delta > s->max_ns)
		s->max_ns = delta;
}

static __always_inline __s32 stack_in(void *ctx, void *map)
{
	long id = bpf_get_stackid(ctx, map, 0);

	if (id < 0)
		count(CNT_STACK_LOST);
	return id;
}

static __always_inline __s32 kernel_stack(void *ctx)
{
	return stack_in(ctx, &stacks);
}

/*
 * A kernel stack walk costs about a microsecond, longer than most spin waits.
 * The first STACKS_PER_LOCK waits of every (lock, flags) always get a stack;
 * beyond that, each CPU walks at most stack_budget stacks per 10 ms window.
 * Other waits are still counted, exactly, under their lock with stack id
 * STACK_NOT_SAMPLED; the analyzer spreads them over the lock's sampled stacks.
 */
static __always_inline __s32 sampled_stack(void *ctx, __u64 lock, __u32 flags, __u64 now)
{
	struct lock_key key = { .lock = lock, .flags = flags };
	struct stack_sampler *sm;
	__u32 zero = 0, *seen;

	seen = bpf_map_lookup_elem(&stacked_locks, &key);
	if (!seen || *seen < STACKS_PER_LOCK) {
		__u32 one = 1;

		if (seen)
			__sync_fetch_and_add(seen, 1);
		else
			bpf_map_update_elem(&stacked_locks, &key, &one, BPF_ANY);
		return kernel_stack(ctx);
	}
	if (!stack_budget)
		return kernel_stack(ctx);
	sm = bpf_map_lookup_elem(&sampler, &zero);
	if (!sm)
		return STACK_NOT_SAMPLED;
	if (now - sm->window_start > SAMPLE_WINDOW_NS) {
		sm->window_start = now;
		sm->walks = 0;
	}
	if (sm->walks >= stack_budget) {
		count(CNT_STACK_SKIPPED);
		return STACK_NOT_SAMPLED;
	}
	sm->walks++;
	return kernel_stack(ctx);
}

static __always_inline void record_wait(__u64 lock, __u32 flags, __s32 stack, __u64 start, __u64 now)
{
	struct lock_key key = { .lock = lock, .flags = flags, .stack_id = stack };

	if (!enabled)
		return;
	add_wait(&lock_stats, &key, now - start, CNT_AGG_FULL);
	count(CNT_CONTENTIONS);
}

SEC("tp_btf/contention_begin")
int BPF_PROG(lksc_cont_begin, void *lock, unsigned int flags)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();   /* the wait starts here */
	__u32 zero = 0;

	if (!enabled || !tgid_tracked(id >> 32))
		return 0;

	if (spinning(flags)) {
		struct spin_stack *st = bpf_map_lookup_elem(&spins, &zero);
		struct spin_wait *w;
		__u32 d;
		__s32 stack;

		if (!st)
			return 0;
		d = st->depth;
		if (d > MAX_SPIN_NEST)
			d = 0;
		/* an end missed (e.g. skipped by BPF recursion protection) leaves an
		 * entry behind; spin waits are short, so an old entry is stale */
		if (d > 0 && now - st->e[0].start > STALE_SPIN_NS) {
			count(CNT_STALE_SPIN);
			d = 0;
		}
		/* spinning locks never begin twice within one wait: the same lock
		 * on top means its end was missed; this begin starts a new wait */
		if (d > 0 && st->e[(d - 1) & (MAX_SPIN_NEST - 1)].lock == (__u64)lock) {
			count(CNT_STALE_SPIN);
			d--;
		}
		if (d >= MAX_SPIN_NEST) {
			count(CNT_SPIN_OVERFLOW);
			return 0;
		}
		stack = sampled_stack(ctx, (__u64)lock, flags, now);
		barrier_var(d);  /* keep the mask: the verifier needs the bound */
		w = &st->e[d & (MAX_SPIN_NEST - 1)];
		w->lock = (__u64)lock;
		w->flags = flags;
		w->stack = stack;
		w->start = now;
		st->depth = d + 1;
		return 0;
	}

	struct task_state *ts = task_state_of((__u32)id);

	if (!ts)
		return 0;
	/* a mutex wait begins spinning (MUTEX|SPIN), begins again when it goes
	 * to sleep (MUTEX), and its first waiter spins and sleeps again inside
	 * the wait loop: one wait, counted once. rwsem, rt_mutex and percpu
	 * rwsem waits begin once, so any other begin while a wait is open means
	 * that wait's end was missed (a task waits for one sleeping lock at a
	 * time): it is discarded and this one starts. */
	if (ts->lock == (__u64)lock && (flags & LCB_F_MUTEX)) {
		if (!(flags & LCB_F_SPIN))
			ts->lock_flags |= LS_F_SLEPT;
		return 0;
	}
	if (ts->lock)
		count(CNT_STALE_WAIT);
	ts->lock_stack = sampled_stack(ctx, (__u64)lock, flags, now);
	ts->lock_flags = flags;
	ts->lock_start = now;
	ts->lock = (__u64)lock;
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(lksc_cont_end, void *lock, int ret)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id;
	__u32 zero = 0;
	struct spin_stack *st = bpf_map_lookup_elem(&spins, &zero);

	if (st) {
		__u32 d = st->depth;

		if (d > 0 && d <= MAX_SPIN_NEST) {
			struct spin_wait *w = &st->e[(d - 1) & (MAX_SPIN_NEST - 1)];

			if (w->lock == (__u64)lock) {
				st->depth = d - 1;
				record_wait(w->lock, w->flags, w->stack, w->start, now);
				return 0;
			}
		}
	}

	id = bpf_get_current_pid_tgid();
	if (!system_wide && !tgid_tracked(id >> 32))
		return 0;
	__u32 pid = (__u32)id;
	struct task_state *ts = bpf_map_lookup_elem(&tstate, &pid);

	if (ts && ts->lock == (__u64)lock) {
		ts->lock = 0;
		record_wait((__u64)lock, ts->lock_flags, ts->lock_stack, ts->lock_start, now);
		return 0;
	}
	if (enabled)
		count(CNT_UNMATCHED_END);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(lksc_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	__u32 prev_pid, next_pid, zero = 0;
	struct spin_stack *st;
	__u64 now;

	/* no spin wait is open on a CPU that switches tasks: whatever is left
	 * on this CPU's spin stack lost its end (e.g. to the recursion guard) */
	st = bpf_map_lookup_elem(&spins, &zero);
	if (st && st->depth) {
		if (st->depth <= MAX_SPIN_NEST && enabled)
			count(CNT_STALE_SPIN);
		st->depth = 0;
	}
	if (!enabled)
		return 0;
	now = bpf_ktime_get_ns();

	prev_pid = BPF_CORE_READ(prev, pid);
	if (prev_pid && tgid_tracked(BPF_CORE_READ(prev, tgid))) {
		struct task_state *ts = task_state_of(prev_pid);

		if (ts) {
			ts->off_stack = kernel_stack(ctx);
			/* preempted: runnable, whatever state it was about to enter */
			ts->off_state = preempt ? 0 : prev_state;
			ts->off_in_lock = ts->lock != 0;
			ts->off_start = now;
		}
	}

	next_pid = BPF_CORE_READ(next, pid);
	if (next_pid && tgid_tracked(BPF_CORE_READ(next, tgid))) {
		struct task_state *ts = bpf_map_lookup_elem(&tstate, &next_pid);

		if (ts && ts->off_start) {
			struct offcpu_key key = {
				.stack_id = ts->off_stack,
				.state = ts->off_state,
				.in_lock_wait = ts->off_in_lock,
			};

			if (now > ts->off_start) {
				add_wait(&offcpu_stats, &key, now - ts->off_start, CNT_OFFCPU_FULL);
				count(CNT_OFFCPU);
			}
			ts->off_start = 0;
		}
	}
	return 0;
}

/*
 * CPU samples (cpu-clock, fixed period) of the tracked tasks by kernel stack.
 * rwsem writers spin optimistically before contention_begin fires, so that
 * time reaches no tracepoint: samples inside rwsem_optimistic_spin account
 * for it, and give the on-CPU profile.
 */
SEC("perf_event")
int lksc_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct sample_key key = {};
	__u64 *n, one = 1;
	__u32 pid = (__u32)id;

	if (!enabled || !pid || !tgid_tracked(id >> 32))
		return 0;
	/* no kernel stack: the sample hit user space (-EFAULT) */
	long sid = bpf_get_stackid(ctx, &sample_stacks, 0);

	if (sid == -EFAULT)
		sid = STACK_USER;
	else if (sid < 0)
		count(CNT_STACK_LOST);
	key.stack_id = sid;
	struct task_state *ts = bpf_map_lookup_elem(&tstate, &pid);
	key.in_lock_wait = ts && ts->lock;
	n = bpf_map_lookup_elem(&cpu_samples, &key);
	if (n)
		(*n)++;
	else if (bpf_map_update_elem(&cpu_samples, &key, &one, BPF_NOEXIST))
		count(CNT_SAMPLES_FULL);
	count(CNT_SAMPLES);
	return 0;
}

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
	bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY);
	count(CNT_FORKS_TRACKED);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(lksc_exit, struct task_struct *task, bool group_dead)
{
	__u32 pid = BPF_CORE_READ(task, pid);

	bpf_map_delete_elem(&tstate, &pid);
	return 0;
}
