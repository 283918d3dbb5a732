// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * User-space lock waits: futex wait syscalls of the tracked tasks, aggregated
 * in the kernel by (tgid, futex address, wait op, user stack): count, total,
 * max.
 *
 * This kernel has no syscalls:sys_enter_futex events (CONFIG_FTRACE_SYSCALLS
 * off), so the raw syscall tracepoints are used (tp_btf sys_enter/sys_exit),
 * filtered to the futex and futex_waitv syscall numbers first. Only ops that
 * can sleep count: FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI(2),
 * FUTEX_WAIT_REQUEUE_PI, and futex_waitv (keyed by its first futex).
 *
 * A wait is remembered at enter in a hash keyed by thread id (the loader
 * adds the waits still open at stop, up to the stop time) and added up at
 * exit. The user stack (frame pointers) is taken at enter, for the first
 * waits of each futex and then one in STACK_EVERY; the others are counted
 * under stack STACK_NOT_SAMPLED and the analyzer spreads them over the
 * futex's sampled stacks.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "probe.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define FUTEX_WAIT             0
#define FUTEX_LOCK_PI          6
#define FUTEX_WAIT_BITSET      9
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_LOCK_PI2        13
#define FUTEX_CMD_MASK      0x7f   /* ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) */
/* user stacks: the first waits of every futex, then one wait in STACK_EVERY */
#define STACKS_PER_FUTEX 8
#define STACK_EVERY 64

const volatile bool system_wide = false;
/* syscall numbers of this architecture, set by the loader (from its headers) */
const volatile long nr_futex = -1;
const volatile long nr_futex_waitv = -1;

bool enabled = false;

/* shared with contention.bpf.c (the loader reuses its fd) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);   /* tgid */
	__type(value, __u8);
} tracked SEC(".maps");

/* waits seen per futex, for stack sampling */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ufutex_id);
	__type(value, __u32);
} futex_seen SEC(".maps");

/* open waits by thread id */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct ufutex_open);
} futex_open SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ufutex_key);
	__type(value, struct wait_stat);
} futex_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} user_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __s32);
	__type(value, struct ustack_words);
} user_stack_words SEC(".maps");

/* scratch for one ustack_words (too large for the BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ustack_words);
} words_buf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FCNT__MAX);
	__type(key, __u32);
	__type(value, __u64);
} futex_counters SEC(".maps");

static __always_inline void fcount(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&futex_counters, &c);

	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline long syscall_nr(struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(regs, orig_ax);
#elif defined(__TARGET_ARCH_arm64)
	return BPF_CORE_READ(regs, syscallno);
#else
	return -1;   /* the exit side is matched through futex_open instead */
#endif
}

SEC("tp_btf/sys_enter")
int BPF_PROG(lksc_futex_enter, struct pt_regs *regs, long id)
{
	struct ufutex_open w = {};
	__u64 pid_tgid;
	__u32 tid, tgid, op;

	if (id != nr_futex && id != nr_futex_waitv)
		return 0;
	if (!enabled)
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	tgid = pid_tgid >> 32;
	tid = (__u32)pid_tgid;
	if (!system_wide && !bpf_map_lookup_elem(&tracked, &tgid))
		return 0;

	if (id == nr_futex) {
		op = (__u32)PT_REGS_PARM2_CORE_SYSCALL(regs) & FUTEX_CMD_MASK;
		if (op != FUTEX_WAIT && op != FUTEX_WAIT_BITSET && op != FUTEX_LOCK_PI &&
		    op != FUTEX_LOCK_PI2 && op != FUTEX_WAIT_REQUEUE_PI)
			return 0;
		w.uaddr = PT_REGS_PARM1_CORE_SYSCALL(regs);
	} else {
		/* futex_waitv(struct futex_waitv *waiters, ...): the first futex
		 * (struct futex_waitv { u64 val; u64 uaddr; ... }) */
		__u64 waiters = PT_REGS_PARM1_CORE_SYSCALL(regs);

		op = FUTEX_OP_WAITV;
		if (bpf_probe_read_user(&w.uaddr, sizeof(w.uaddr), (void *)(waiters + 8)))
			w.uaddr = 0;
	}
	w.op = op;
	w.tgid = tgid;
	{
		struct ufutex_id fid = { .uaddr = w.uaddr, .tgid = tgid };
		__u32 *seen = bpf_map_lookup_elem(&futex_seen, &fid), one = 1, n = 0;

		if (seen)
			n = (*seen)++;     /* a race only shifts the sampling */
		else
			bpf_map_update_elem(&futex_seen, &fid, &one, BPF_ANY);
		if (n < STACKS_PER_FUTEX || n % STACK_EVERY == 0) {
			w.stack_id = bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
		} else {
			w.stack_id = STACK_NOT_SAMPLED;
			fcount(FCNT_STACK_SKIPPED);
		}
	}
	if (w.stack_id < 0 && w.stack_id != STACK_NOT_SAMPLED) {
		fcount(FCNT_STACK_LOST);
	} else if (w.stack_id >= 0 && !bpf_map_lookup_elem(&user_stack_words, &w.stack_id)) {
		__u32 zero = 0;
		struct ustack_words *buf = bpf_map_lookup_elem(&words_buf, &zero);

		if (buf && !bpf_probe_read_user(buf, sizeof(*buf), (void *)PT_REGS_SP_CORE(regs)))
			bpf_map_update_elem(&user_stack_words, &w.stack_id, buf, BPF_NOEXIST);
	}
	w.start = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&futex_open, &tid, &w, BPF_ANY))
		fcount(FCNT_OPEN_FULL);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(lksc_futex_exit, struct pt_regs *regs, long ret)
{
	struct ufutex_open *w;
	struct wait_stat *s;
	struct ufutex_key key = {};
	__u32 tid;
	__u64 delta;
	long nr;

	/* after stop, open waits stay in futex_open: the loader counts them up
	 * to the stop time */
	if (!enabled)
		return 0;
	nr = syscall_nr(regs);
	if (nr != nr_futex && nr != nr_futex_waitv && nr != -1)
		return 0;
	tid = (__u32)bpf_get_current_pid_tgid();
	w = bpf_map_lookup_elem(&futex_open, &tid);
	if (!w)
		return 0;
	delta = bpf_ktime_get_ns() - w->start;
	key.tgid = w->tgid;
	key.op = w->op;
	key.uaddr = w->uaddr;
	key.stack_id = w->stack_id;
	bpf_map_delete_elem(&futex_open, &tid);

	s = bpf_map_lookup_elem(&futex_stats, &key);
	if (!s) {
		struct wait_stat zero = {};

		bpf_map_update_elem(&futex_stats, &key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&futex_stats, &key);
		if (!s) {
			fcount(FCNT_AGG_FULL);
			return 0;
		}
	}
	s->count++;
	s->total_ns += delta;
	if (delta > s->max_ns)
		s->max_ns = delta;
	fcount(FCNT_WAITS);
	return 0;
}
