// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Application lock waits from USDT probes: a program that publishes a
 * "wait starts" and a "wait is done" probe (PostgreSQL's lwlock__wait__start
 * /done, lock__wait__start/done; a JVM's monitor probes...) has each wait
 * timed here, start to done of the same thread (entry probes only, no
 * return probes), aggregated by (process, table entry, lock name or tag,
 * mode).
 *
 * The probe table is data (analyzer/user/usdt.toml); the loader attaches these
 * two programs to every probe of it, with a cookie saying which entry the
 * probe belongs to and which of its arguments name the lock:
 *   bits  0-7   entry (the table's probe index)
 *   bits  8-11  argument naming the lock, 1-based (0: none)
 *   bit  12     that argument is a char * (copied as a string), else a number
 *   bits 16-19  argument giving the mode, 1-based (0: none)
 * Only tracked processes count (the `tracked` map shared with
 * contention.bpf.c), so the probes may be attached for every process that
 * runs the binary.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "probe.h"
#include "maps.bpf.h"
#include "usdtwait.bpf.h"   /* usdt_waiting: the wait open on each thread, innermost (contention.bpf.c's) */

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile bool system_wide = false;
bool enabled = false;

/* an open wait, by (thread, entry): nested waits of different entries (an
 * LWLock taken while waiting for a heavyweight lock) are timed apart */
struct usdt_open_key {
	__u32 tid;
	__u32 entry;
};

struct usdt_open {
	__u64 t0;
	struct usdt_key key;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OPEN_ENTRIES);
	__type(key, struct usdt_open_key);
	__type(value, struct usdt_open);
} usdt_open SEC(".maps");

/* scratch for the key being built (too large for the stack with the rest) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct usdt_open);
} usdt_scratch SEC(".maps");

WAIT_STATS_MAP(usdt_stats, struct usdt_key);


COUNTERS_MAP(usdt_counters, UCNT__MAX, ucount);

static __always_inline bool traced(__u32 tgid)
{
	return system_wide || bpf_map_lookup_elem(&tracked, &tgid);
}

SEC("usdt")
int lksc_usdt_start(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), cookie = bpf_usdt_cookie(ctx);
	struct usdt_open_key ok = { .tid = (__u32)id, .entry = cookie & 0xff };
	__u32 name_arg = (cookie >> 8) & 0xf, mode_arg = (cookie >> 16) & 0xf, zero = 0;
	struct usdt_open *o;
	long v = 0;

	if (!enabled || !traced(id >> 32))
		return 0;
	o = bpf_map_lookup_elem(&usdt_scratch, &zero);
	if (!o)
		return 0;
	__builtin_memset(o, 0, sizeof(*o));
	o->key.tgid = id >> 32;
	o->key.entry = ok.entry;
	if (name_arg && bpf_usdt_arg(ctx, name_arg - 1, &v) == 0) {
		if (cookie & (1 << 12)) {
			if (bpf_probe_read_user_str(o->key.name, sizeof(o->key.name), (void *)v) < 0)
				ucount(UCNT_NAME_UNREADABLE);
		} else {
			o->key.value = (__u64)v;
		}
	}
	if (mode_arg && bpf_usdt_arg(ctx, mode_arg - 1, &v) == 0)
		o->key.mode = (__u32)v;
	o->t0 = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&usdt_open, &ok, o, BPF_ANY))
		ucount(UCNT_LOST_OPEN);
	else
		bpf_map_update_elem(&usdt_waiting, &ok.tid, &o->key, BPF_ANY);
	ucount(UCNT_STARTS);
	return 0;
}

/* the thread's innermost wait is done: the wait it is nested in (another
 * entry's, still open) is the one it waits in again, or none */
static __always_inline void waiting_done(const struct usdt_open_key *done)
{
	struct usdt_key *w = bpf_map_lookup_elem(&usdt_waiting, &done->tid);
	struct usdt_open_key ok = { .tid = done->tid };
	struct usdt_open *o;

	if (!w || w->entry != done->entry)
		return;
	for (__u32 e = 0; e < USDT_ENTRIES; e++) {
		ok.entry = e;
		o = e == done->entry ? NULL : bpf_map_lookup_elem(&usdt_open, &ok);
		if (o) {
			bpf_map_update_elem(&usdt_waiting, &done->tid, &o->key, BPF_ANY);
			return;
		}
	}
	bpf_map_delete_elem(&usdt_waiting, &done->tid);
}

SEC("usdt")
int lksc_usdt_done(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns(), delta;
	struct usdt_open_key ok = { .tid = (__u32)id, .entry = bpf_usdt_cookie(ctx) & 0xff };
	struct usdt_open *o = bpf_map_lookup_elem(&usdt_open, &ok);
	struct wait_stat *s, one = {};

	if (!o)
		return 0;             /* started before the window, or not traced */
	delta = now - o->t0;
	if (enabled) {
		s = bpf_map_lookup_elem(&usdt_stats, &o->key);
		if (s) {
			s->count++;
			s->total_ns += delta;
			if (delta > s->max_ns)
				s->max_ns = delta;
		} else {
			one.count = 1;
			one.total_ns = one.max_ns = delta;
			if (bpf_map_update_elem(&usdt_stats, &o->key, &one, BPF_NOEXIST))
				ucount(UCNT_LOST_WAITS);
		}
		ucount(UCNT_DONES);
	}
	bpf_map_delete_elem(&usdt_open, &ok);
	waiting_done(&ok);
	return 0;
}
