// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Go sync.Mutex / sync.RWMutex waits, seen from outside the process: entry
 * uprobes on the Go runtime's own functions (no return probes: they crash Go
 * programs whose goroutine stacks move). amd64, Go's register ABI: the
 * goroutine (g) is in R14, the first arguments in RAX, RBX, RCX.
 *
 * A wait is one park of a goroutine on a sync semaphore:
 *  1. the entry of internal/sync.runtime_SemacquireMutex (sync.Mutex, and
 *     the writer mutex of a sync.RWMutex), sync.runtime_SemacquireRWMutexR
 *     (a reader waiting for the writer) or sync.runtime_SemacquireRWMutex (a
 *     writer waiting for the readers) notes (sema address, kind, user stack,
 *     the time) under the goroutine: the wait starts; its fast path may
 *     still take the semaphore without parking, and then nothing ends it;
 *  2. runtime.readyWithTime(sudog) for that goroutine (sudog.g, offset 0),
 *     called by semrelease1 when it wakes the waiter, ends it: the time Go's
 *     own profile charges as well. A waiter woken but beaten to the lock
 *     parks again in the same semacquire1: a second wait, from that wake-up.
 * readyWithTime also wakes goroutines parked on other semaphores (a
 * WaitGroup, internal/poll's) and in sync.Cond's notify list: the entries of
 * runtime.semacquire1 on another semaphore and of sync.runtime_notifyListWait
 * drop the goroutine's note, so that no such park is taken for a mutex wait.
 * No probe runs inside a runtime lock: runtime.gopark, probed before, is
 * called with the channel's or the semaphore root's lock held, and its
 * uprobe made Go's runtime-lock contention (bench/README.md: a channel
 * program's /sync/mutex/wait/total 1.86 s under the probe against 0.02 s
 * without, 8x fewer sends).
 * Aggregated by (tgid, sema address, kind, user stack, return address):
 * count, total, max. The same wait is also charged to the releaser, the
 * goroutine whose semrelease1 called readyWithTime (it unlocked the mutex
 * and woke the waiter, on the current thread): by its user stack in
 * go_releases (ret 0), as Go's own mutex profile charges the unlocker. The return address is the semacquire's caller, which
 * the frame-pointer walk of the user stack skips at a function's entry
 * (the caller's frame is not linked yet): a reader's RWMutex.RLock is inlined
 * into the program's function, that function is this frame.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "maps.bpf.h"
#include "gomutex.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

bool enabled = false;

/* the tracked Go processes (filled by the loader) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);               /* tgid */
	__type(value, struct go_proc);
} go_procs SEC(".maps");

struct go_note {
	__u64 sema;
	__u64 start;                      /* the wait's start, or the last wake-up's */
	__u32 tgid;
	__u32 kind;
	__s32 stack_id;
	__u32 pad;
	__u64 ret;                        /* the return address at entry */
};

/* noted semacquires by goroutine (g address; goroutines are reused) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, OPEN_ENTRIES);
	__type(key, __u64);
	__type(value, struct go_note);
} go_notes SEC(".maps");

WAIT_STATS_MAP(go_stats, struct go_key);
WAIT_STATS_MAP(go_releases, struct go_key);   /* stack_id: the releaser's, ret 0 */
STACK_MAP(go_stacks, USER_STACK_ENTRIES);

static __always_inline int note(struct pt_regs *ctx, __u32 kind)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct go_note n = {};
	__u64 g = ctx->r14;

	if (!enabled || !g || !bpf_map_lookup_elem(&go_procs, &tgid))
		return 0;
	n.sema = ctx->ax;
	n.tgid = tgid;
	n.kind = kind;
	n.stack_id = bpf_get_stackid(ctx, &go_stacks, BPF_F_USER_STACK);
	bpf_probe_read_user(&n.ret, sizeof(n.ret), (void *)ctx->sp);
	n.start = bpf_ktime_get_ns();
	bpf_map_update_elem(&go_notes, &g, &n, BPF_ANY);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(lksc_go_semacquire_mutex) { return note(ctx, GO_SYNC_MUTEX); }

SEC("uprobe")
int BPF_KPROBE(lksc_go_semacquire_rwmutex_r) { return note(ctx, GO_SYNC_RWMUTEX_R); }

SEC("uprobe")
int BPF_KPROBE(lksc_go_semacquire_rwmutex_w) { return note(ctx, GO_SYNC_RWMUTEX_W); }

/* a semacquire on another semaphore than the noted one (a WaitGroup's, a
 * file's): the note is not this goroutine's wait any more */
SEC("uprobe")
int BPF_KPROBE(lksc_go_semacquire1)
{
	__u64 g = ctx->r14;
	struct go_note *n = bpf_map_lookup_elem(&go_notes, &g);

	if (n && n->sema != ctx->ax)
		bpf_map_delete_elem(&go_notes, &g);
	return 0;
}

/* a sync.Cond wait: readyWithTime will end it, and it is not a mutex's */
SEC("uprobe")
int BPF_KPROBE(lksc_go_notifylist_wait)
{
	__u64 g = ctx->r14;

	bpf_map_delete_elem(&go_notes, &g);
	return 0;
}

/* the (per-CPU) aggregate of key in map, made if new; NULL when full */
static __always_inline struct wait_stat *go_stat_of(void *map, struct go_key *key)
{
	struct wait_stat *s = bpf_map_lookup_elem(map, key);

	if (!s) {
		struct wait_stat zero = {};

		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(map, key);
	}
	return s;
}

static __always_inline void add_go_wait(struct wait_stat *s, __u64 delta)
{
	s->count++;
	s->total_ns += delta;
	if (delta > s->max_ns)
		s->max_ns = delta;
}

SEC("uprobe")
int BPF_KPROBE(lksc_go_ready)
{
	struct go_key key = {};
	struct go_note *n;
	struct wait_stat *s;
	__u64 g = 0, delta, now;

	if (bpf_probe_read_user(&g, sizeof(g), (void *)ctx->ax) || !g)
		return 0;
	n = bpf_map_lookup_elem(&go_notes, &g);
	if (!n || !n->start)
		return 0;
	now = bpf_ktime_get_ns();
	delta = now - n->start;
	n->start = now;               /* it may park again in the same semacquire1: from here */
	if (!enabled)
		return 0;
	key.sema = n->sema;
	key.tgid = n->tgid;
	key.kind = n->kind;
	key.stack_id = n->stack_id;
	key.ret = n->ret;
	s = go_stat_of(&go_stats, &key);
	if (!s)
		return 0;
	add_go_wait(s, delta);
	/* the releaser: the current goroutine, in semrelease1 (the stack walk
	 * comes after the unlock: no critical section is lengthened) */
	key.stack_id = bpf_get_stackid(ctx, &go_stacks, BPF_F_USER_STACK);
	key.ret = 0;
	s = go_stat_of(&go_releases, &key);
	if (s)
		add_go_wait(s, delta);
	return 0;
}
