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
 *   bit  13     that argument is a HotSpot ObjectMonitor *: the lock is
 *               named by the class of the object it locks (jvm_procs)
 *   bit  14     the lock is named by the class of the calling Java thread's
 *               park blocker (java.lang.Thread.parkBlocker: LockSupport.park's
 *               argument), through jvm_threads
 *   bit  15     only names ending with one of the entry's suffixes
 *               (usdt_suffixes) are waits
 *   bits 16-19  argument giving the mode, 1-based (0: none)
 *   bits 20-23  argument giving the name string's length, 1-based (0: none,
 *               the string ends with a NUL): a JVM's class name is a
 *               Symbol's bytes, not NUL-terminated
 *   bits 32-63  the numeric name values that are lock waits, as a bit mask
 *               of 0..31 (0: all): a start naming another value (MariaDB's
 *               thd_wait_begin of a network read) is not a wait here
 * A program that publishes no USDT probes but exports a "wait begins" and
 * a "wait ends" function (MariaDB's thd_wait_begin/thd_wait_end) has the
 * same two programs as entry uprobes (lksc_func_start/done): its arguments
 * are the function's first five, from the registers. Where the wait is done
 * when the start function returns (HotSpot's ObjectMonitor::EnterI, which
 * returns holding the monitor), lksc_func_done is its return probe.
 * A JVM's wait keeps its call path (usdt_stacks: its Java frames walked as
 * HotSpot's frame::sender does, each as its Method *, named in
 * jvm_methods), part of its usdt_stats key beside the lock.
 * Only tracked processes count (the `tracked` map shared with
 * contention.bpf.c), so the probes may be attached for every process that
 * runs the binary.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/usdt.bpf.h>
#include "maps.bpf.h"
#include "usdt_types.h"
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
	struct usdt_stat_key sk;
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

WAIT_STATS_MAP(usdt_stats, struct usdt_stat_key);


#include "usdtcounters.bpf.h"   /* usdt_counters, ucount() */

/* the name suffixes of the entries whose waits are filtered by name (bit 15) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256 * USDT_SUFFIXES);
	__type(key, __u32);
	__type(value, struct usdt_suffix);
} usdt_suffixes SEC(".maps");

#include "jvmframes.bpf.h"   /* the JVM maps and its frame walker (java_stack, monitor_class, blocker_class) */

static __always_inline bool traced(__u32 tgid)
{
	return system_wide || bpf_map_lookup_elem(&tracked, &tgid);
}

struct suffix_find {
	const char *name;
	__u32 n;              /* the name's length */
	__u32 entry;
	bool hit;
};

/* bpf_loop callback: whether the name ends with suffix i of its entry */
static long suffix_one(__u32 i, void *ctx)
{
	struct suffix_find *f = ctx;
	__u32 k = (f->entry & 0xff) * USDT_SUFFIXES + i;
	struct usdt_suffix *x = bpf_map_lookup_elem(&usdt_suffixes, &k);

	if (!x || !x->len || x->len > f->n || f->n >= USDT_NAME_LEN)
		return 0;
	for (__u32 c = 0; c < USDT_NAME_LEN; c++) {
		__u32 at = f->n - x->len + c;

		if (c >= x->len) {
			f->hit = true;
			return 1;
		}
		if (at >= USDT_NAME_LEN || f->name[at] != x->s[c])
			return 0;
	}
	return 0;
}

/* whether `name` (n bytes) ends with one of entry's suffixes (usdt_suffixes) */
static __always_inline bool name_wanted(__u32 entry, const char *name, __u32 n)
{
	struct suffix_find f = { .name = name, .n = n, .entry = entry };

	bpf_loop(USDT_SUFFIXES, suffix_one, &f, 0);
	return f.hit;
}

/* a wait starts: `name_v`/`mode_v`/`len_v` are the arguments the cookie
 * names (read when `name_ok`/`mode_ok`/`len_ok`) */
static __always_inline void wait_start(struct pt_regs *ctx, __u64 cookie, long name_v, bool name_ok, long mode_v, bool mode_ok,
				       long len_v, bool len_ok)
{
	__u64 id = bpf_get_current_pid_tgid(), values = cookie >> USDT_COOKIE_VALUES_SHIFT;
	struct usdt_open_key ok = { .tid = (__u32)id, .entry = cookie & 0xff };
	const struct jvm_proc *jvm = NULL;
	int name_n = -1;      /* the name string's length, -1: none */
	__u64 thread = 0;     /* a JVM wait's JavaThread, 0: not known */
	__u32 zero = 0;
	struct usdt_open *o;

	if (!enabled || !traced(id >> 32))
		return;
	if (values && !(cookie & USDT_COOKIE_NAME_STRING) && (!name_ok || (__u64)name_v > 31 || !(values & (1ULL << name_v))))
		return;       /* a value that is not a lock wait */
	if (cookie & (USDT_COOKIE_HOTSPOT_MONITOR | USDT_COOKIE_PARK_BLOCKER)) {
		__u32 tgid = id >> 32;

		jvm = bpf_map_lookup_elem(&jvm_procs, &tgid);
		if (!jvm || ((cookie & USDT_COOKIE_HOTSPOT_MONITOR) && (jvm->flags & JVM_MONITOR_PROBES))) {
			ucount(UCNT_NO_JVM_LAYOUT);   /* not read yet, or its monitor probes name its monitors */
			return;
		}
	}
	o = bpf_map_lookup_elem(&usdt_scratch, &zero);
	if (!o)
		return;
	__builtin_memset(o, 0, sizeof(*o));
	o->sk.key.tgid = id >> 32;
	o->sk.key.entry = ok.entry;
	if (jvm) {         /* the calling JavaThread: EnterI's (enter_internal's) second argument, or a park's by tid */
		__u64 *thr = (cookie & USDT_COOKIE_HOTSPOT_MONITOR) ? NULL : bpf_map_lookup_elem(&jvm_threads, &id);

		thread = (cookie & USDT_COOKIE_HOTSPOT_MONITOR) ? PT_REGS_PARM2_CORE(ctx) : thr ? *thr : 0;
	}
	if (jvm && (cookie & USDT_COOKIE_PARK_BLOCKER)) {
		if ((name_n = blocker_class(jvm, thread, o->sk.key.name)) < 0)
			return;       /* no blocker: not named, no wait here */
	} else if (name_ok && jvm) {
		name_n = monitor_class(jvm, (__u64)name_v, o->sk.key.name);
		o->sk.key.value = (__u64)name_v;   /* the monitor (C heap, not moved): its instances apart */
	} else if (name_ok) {
		if ((cookie & USDT_COOKIE_NAME_STRING) && len_ok) {     /* the key was zeroed: it stays NUL-terminated */
			__u32 n = len_v < 0 ? 0 : len_v > USDT_NAME_LEN - 1 ? USDT_NAME_LEN - 1 : (__u32)len_v;

			if (n && bpf_probe_read_user(o->sk.key.name, n, (void *)name_v) < 0)
				ucount(UCNT_NAME_UNREADABLE);
			else
				name_n = n;
		} else if (cookie & USDT_COOKIE_NAME_STRING) {
			name_n = bpf_probe_read_user_str(o->sk.key.name, sizeof(o->sk.key.name), (void *)name_v) - 1;
			if (name_n < 0)
				ucount(UCNT_NAME_UNREADABLE);
		} else {
			o->sk.key.value = (__u64)name_v;
		}
	}
	if ((cookie & USDT_COOKIE_SUFFIXES) && (name_n < 0 || !name_wanted(ok.entry, o->sk.key.name, name_n))) {
		ucount(UCNT_NOT_NAMED);
		return;
	}
	if (mode_ok)
		o->sk.key.mode = (__u32)mode_v;
	if (jvm && (jvm->flags & JVM_FRAMES))
		o->sk.stack = java_stack(ctx, jvm, id >> 32, thread);
	o->t0 = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&usdt_open, &ok, o, BPF_ANY))
		ucount(UCNT_LOST_OPEN);
	else
		bpf_map_update_elem(&usdt_waiting, &ok.tid, &o->sk.key, BPF_ANY);
	ucount(UCNT_STARTS);
}

SEC("usdt")
int lksc_usdt_start(struct pt_regs *ctx)
{
	__u64 cookie = bpf_usdt_cookie(ctx);
	__u32 name_arg = (cookie >> USDT_COOKIE_NAME_ARG_SHIFT) & 0xf, mode_arg = (cookie >> USDT_COOKIE_MODE_ARG_SHIFT) & 0xf,
	      len_arg = (cookie >> USDT_COOKIE_LEN_ARG_SHIFT) & 0xf;
	long name_v = 0, mode_v = 0, len_v = 0;
	bool name_ok = name_arg && bpf_usdt_arg(ctx, name_arg - 1, &name_v) == 0;
	bool mode_ok = mode_arg && bpf_usdt_arg(ctx, mode_arg - 1, &mode_v) == 0;
	bool len_ok = len_arg && bpf_usdt_arg(ctx, len_arg - 1, &len_v) == 0;

	wait_start(ctx, cookie, name_v, name_ok, mode_v, mode_ok, len_v, len_ok);
	return 0;
}

/* argument i (1-based, 1..5: this libbpf's bpf_tracing.h has no sixth) of a
 * function, at its entry; read, not loaded from ctx (a switch over ctx loads
 * compiles to one load at a computed ctx offset, which the verifier refuses) */
static __always_inline long func_arg(struct pt_regs *ctx, __u32 i)
{
	switch (i) {
	case 1: return PT_REGS_PARM1_CORE(ctx);
	case 2: return PT_REGS_PARM2_CORE(ctx);
	case 3: return PT_REGS_PARM3_CORE(ctx);
	case 4: return PT_REGS_PARM4_CORE(ctx);
	case 5: return PT_REGS_PARM5_CORE(ctx);
	}
	return 0;
}

SEC("uprobe")
int lksc_func_start(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 name_arg = (cookie >> USDT_COOKIE_NAME_ARG_SHIFT) & 0xf, mode_arg = (cookie >> USDT_COOKIE_MODE_ARG_SHIFT) & 0xf,
	      len_arg = (cookie >> USDT_COOKIE_LEN_ARG_SHIFT) & 0xf;

	wait_start(ctx, cookie, func_arg(ctx, name_arg), name_arg >= 1 && name_arg <= 5,
		   func_arg(ctx, mode_arg), mode_arg >= 1 && mode_arg <= 5,
		   func_arg(ctx, len_arg), len_arg >= 1 && len_arg <= 5);
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
			bpf_map_update_elem(&usdt_waiting, &done->tid, &o->sk.key, BPF_ANY);
			return;
		}
	}
	bpf_map_delete_elem(&usdt_waiting, &done->tid);
}

static __always_inline void wait_done(__u32 entry)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns(), delta;
	struct usdt_open_key ok = { .tid = (__u32)id, .entry = entry };
	struct usdt_open *o = bpf_map_lookup_elem(&usdt_open, &ok);
	struct wait_stat *s, one = {};

	if (!o)
		return;               /* started before the window, not traced, or not a lock wait */
	delta = now - o->t0;
	if (enabled) {
		s = bpf_map_lookup_elem(&usdt_stats, &o->sk);
		if (s) {
			s->count++;
			s->total_ns += delta;
			if (delta > s->max_ns)
				s->max_ns = delta;
		} else {
			one.count = 1;
			one.total_ns = one.max_ns = delta;
			if (bpf_map_update_elem(&usdt_stats, &o->sk, &one, BPF_NOEXIST))
				ucount(UCNT_LOST_WAITS);
		}
		ucount(UCNT_DONES);
	}
	bpf_map_delete_elem(&usdt_open, &ok);
	waiting_done(&ok);
}

SEC("usdt")
int lksc_usdt_done(struct pt_regs *ctx)
{
	wait_done(bpf_usdt_cookie(ctx) & 0xff);
	return 0;
}

SEC("uprobe")
int lksc_func_done(struct pt_regs *ctx)
{
	wait_done(bpf_get_attach_cookie(ctx) & 0xff);
	return 0;
}
