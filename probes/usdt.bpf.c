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


COUNTERS_MAP(usdt_counters, UCNT__MAX, ucount);

/* the JVMs whose monitors are named at ObjectMonitor::EnterI, by tgid (the
 * loader fills it: probes/jvmmon.c); a JVM absent here has its monitor
 * enters left to its monitor probes, or unnamed */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct jvm_proc);
} jvm_procs SEC(".maps");

/* the Java threads of those JVMs, by (tgid << 32 | tid): their JavaThread
 * (the loader reads the JVM's thread list every tick) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u64);
} jvm_threads SEC(".maps");

/* the call paths of JVM waits, by a hash of their frames and process */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct usdt_stack);
} usdt_stacks SEC(".maps");

/* the interpreted Java methods in them, named once */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct jvm_method_key);
	__type(value, struct jvm_method);
} jvm_methods SEC(".maps");

/* scratch for the stack being walked and the method being named */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct usdt_stack);
} usdt_walk SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jvm_method);
} method_scratch SEC(".maps");

/* the name suffixes of the entries whose waits are filtered by name (bit 15) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256 * USDT_SUFFIXES);
	__type(key, __u32);
	__type(value, struct usdt_suffix);
} usdt_suffixes SEC(".maps");

/* the bytes of HotSpot Symbol `sym` (a u2 length and the bytes, not
 * NUL-terminated) into `out` of `size` (zeroed: it stays NUL-terminated);
 * their length, -1 if unreadable */
static __always_inline int symbol_bytes(const struct jvm_proc *j, __u64 sym, char *out, __u32 size)
{
	__u16 len = 0;

	if (!sym || bpf_probe_read_user(&len, sizeof(len), (void *)(sym + j->length_off)))
		return -1;
	if (len > size - 1)
		len = size - 1;
	if (len && bpf_probe_read_user(out, len, (void *)(sym + j->body_off)) == 0)
		return len;
	return -1;
}

/* the class name of Java object `obj` into `name` (zeroed): its klass (a
 * narrowKlass, decoded) -> Klass::_name; its length, -1 if unreadable */
static __always_inline int object_class(const struct jvm_proc *j, __u64 obj, char *name)
{
	__u64 klass = 0, sym = 0;
	__u32 narrow = 0;
	int n = -1;

	if (j->flags & JVM_COMPRESSED_KLASS) {
		if (bpf_probe_read_user(&narrow, sizeof(narrow), (void *)(obj + j->klass_off)) == 0)
			klass = j->klass_base + ((__u64)narrow << (j->klass_shift & 63));
	} else {
		bpf_probe_read_user(&klass, sizeof(klass), (void *)(obj + j->klass_off));
	}
	if (klass && bpf_probe_read_user(&sym, sizeof(sym), (void *)(klass + j->name_off)) == 0)
		n = symbol_bytes(j, sym, name, USDT_NAME_LEN);
	if (n < 0)
		ucount(UCNT_NAME_UNREADABLE);
	return n;
}

/* Method `m` of JVM `j` (tgid) named in jvm_methods, once: its class (the
 * constant pool's holder) and name (a constant pool entry) */
static __always_inline void name_method(const struct jvm_proc *j, __u32 tgid, __u64 m)
{
	struct jvm_method_key k = { .tgid = tgid, .method = m };
	__u64 cm = 0, cp = 0, holder = 0, sym = 0, csym = 0;
	struct jvm_method *n;
	__u32 zero = 0;
	__u16 idx = 0;

	if (bpf_map_lookup_elem(&jvm_methods, &k) || !(n = bpf_map_lookup_elem(&method_scratch, &zero)))
		return;
	__builtin_memset(n, 0, sizeof(*n));
	if (bpf_probe_read_user(&cm, sizeof(cm), (void *)(m + j->const_method_off)) || !cm ||
	    bpf_probe_read_user(&cp, sizeof(cp), (void *)(cm + j->constants_off)) || !cp ||
	    bpf_probe_read_user(&idx, sizeof(idx), (void *)(cm + j->name_index_off)) ||
	    bpf_probe_read_user(&holder, sizeof(holder), (void *)(cp + j->holder_off)) || !holder ||
	    bpf_probe_read_user(&sym, sizeof(sym), (void *)(cp + j->cp_size + (__u64)idx * 8)) ||
	    bpf_probe_read_user(&csym, sizeof(csym), (void *)(holder + j->name_off)))
		return;
	if (symbol_bytes(j, sym, n->name, JVM_METHOD_LEN) > 0 && symbol_bytes(j, csym, n->cls, USDT_NAME_LEN) > 0)
		bpf_map_update_elem(&jvm_methods, &k, n, BPF_NOEXIST);
}

/* a walk of a thread's frames: (pc, sp, fp) a frame's return address into
 * it, its (unextended) stack pointer, its frame pointer; the hash of the
 * frames recorded so far */
struct walk {
	__u64 pc, sp, fp, hash;
	__u32 tgid;
};

/* frame value v (a return address, or a Method * with JVM_METHOD_FRAME)
 * appended to the walked stack; false where it is full */
static __always_inline bool push_frame(struct usdt_stack *st, struct walk *w, __u64 v)
{
	__u32 k = st->n;

	if (k >= USDT_FRAMES)
		return false;
	st->pc[k] = v;
	st->n = k + 1;
	w->hash = (w->hash ^ v) * 0x100000001b3ULL;
	return true;
}

/* bpf_loop callback, by frame pointers: the next frame into usdt_walk (an
 * interpreted one as its Method *), then its caller's; 1 to stop */
static long frame_one(__u32 i, void *ctx)
{
	struct walk *w = ctx;
	__u32 zero = 0;
	struct usdt_stack *st = bpf_map_lookup_elem(&usdt_walk, &zero);
	const struct jvm_proc *j = bpf_map_lookup_elem(&jvm_procs, &w->tgid);
	__u64 pc = w->pc, m = 0, up[2];

	if (!st || !j || !pc)
		return 1;
	if (pc >= j->interp_lo && pc < j->interp_hi &&
	    bpf_probe_read_user(&m, sizeof(m), (void *)(w->fp + (__s64)j->method_fp_off)) == 0 && m) {
		name_method(j, w->tgid, m);
		pc = m | JVM_METHOD_FRAME;
	}
	if (!push_frame(st, w, pc))
		return 1;
	/* the caller: its frame pointer saved at fp, the return address above;
	 * a frame without one (compiled Java code without
	 * -XX:+PreserveFramePointer) ends the walk where its fp is no frame's */
	if (!w->fp || bpf_probe_read_user(up, sizeof(up), (void *)w->fp) || up[0] <= w->fp || (up[0] & 7))
		return 1;
	w->fp = up[0];
	w->pc = up[1];
	return 0;
}

/* the CodeBlob of code-heap address pc, 0 if none: its segment in the
 * heap's segment map, stepped back to its block's first (each byte the
 * distance to go back, 0 at a block's start, 0xff free), past the block's
 * header (CodeHeap::find_blob) */
#define SEGMAP_HOPS 16
static __always_inline __u64 find_blob(const struct jvm_proc *j, __u64 pc)
{
	const struct jvm_heap *h = NULL;
	__u64 seg;
	__u8 b = 0;

	for (int i = 0; i < JVM_HEAPS; i++)
		if (pc >= j->heaps[i].lo && pc < j->heaps[i].hi) {
			h = &j->heaps[i];
			break;
		}
	if (!h)
		return 0;
	seg = (pc - h->lo) >> (h->log2_seg & 31);
	for (int i = 0; i < SEGMAP_HOPS; i++) {
		if (bpf_probe_read_user(&b, sizeof(b), (void *)(h->segmap + seg)) || b == 0xff || seg < b)
			return 0;
		if (!b)
			return h->lo + (seg << (h->log2_seg & 31)) + j->block_size;
		seg -= b;
	}
	return 0;
}

/* the frame size in words of code blob `blob` (0: it makes no frame of its
 * own: the call stub where the thread's Java frames begin), and its
 * Method * if it is an nmethod (else 0: a runtime stub the JVM was entered
 * through); false if unreadable */
static __always_inline bool blob_frame(const struct jvm_proc *j, __u64 blob, __u64 *m, __s32 *words)
{
	__u64 tag = 0;
	__u8 kind = 0;

	if (j->nm_tag_size == 1) {
		if (bpf_probe_read_user(&kind, sizeof(kind), (void *)(blob + j->nm_tag_off)))
			return false;
		tag = kind;
	} else if (bpf_probe_read_user(&tag, sizeof(tag), (void *)(blob + j->nm_tag_off))) {
		return false;
	}
	*m = 0;
	if (tag == j->nm_tag && (bpf_probe_read_user(m, sizeof(*m), (void *)(blob + j->nm_method_off)) || !*m))
		return false;
	return !bpf_probe_read_user(words, sizeof(*words), (void *)(blob + j->frame_size_off)) &&
	       *words >= 0 && *words < 65536;
}

/* bpf_loop callback, as HotSpot's frame::sender (fp is an interpreted
 * frame's only): the next Java frame into usdt_walk as its Method * (a
 * runtime stub's frame passed over), then its caller's; 1 to stop */
static long jframe_one(__u32 i, void *ctx)
{
	struct walk *w = ctx;
	__u32 zero = 0;
	struct usdt_stack *st = bpf_map_lookup_elem(&usdt_walk, &zero);
	const struct jvm_proc *j = bpf_map_lookup_elem(&jvm_procs, &w->tgid);
	__u64 m = 0, blob, up[2] = {}, sp = 0;
	__s32 words = 0;
	bool more;

	if (!st || !j || !w->pc)
		return 1;
	if (w->pc >= j->interp_lo && w->pc < j->interp_hi) {
		/* interpreted: its Method * below fp, its caller's sp (sender_sp) just below fp */
		if (bpf_probe_read_user(&m, sizeof(m), (void *)(w->fp + (__s64)j->method_fp_off)) || !m)
			return 1;
		more = !bpf_probe_read_user(up, sizeof(up), (void *)w->fp) &&
		       !bpf_probe_read_user(&sp, sizeof(sp), (void *)(w->fp - 8));
	} else {
		/* compiled, or a stub: its caller's frame begins frame-size words up;
		 * the return address and the saved rbp (an interpreted caller's fp)
		 * below that */
		blob = find_blob(j, w->pc);
		if (!blob || !blob_frame(j, blob, &m, &words) || !words)
			return 1;
		sp = w->sp + (__u64)words * 8;
		more = !bpf_probe_read_user(up, sizeof(up), (void *)(sp - 16));
	}
	if (m) {
		name_method(j, w->tgid, m);
		if (!push_frame(st, w, m | JVM_METHOD_FRAME))
			return 1;
	}
	if (!more)
		return 1;
	w->fp = up[0];
	w->pc = up[1];
	w->sp = sp;
	return 0;
}

/* the thread's last Java frame, where it entered the JVM (JavaThread::
 * _anchor: its sp, and its pc or the return address just below sp, and an
 * interpreted frame's fp); false where it has none */
static __always_inline bool java_anchor(const struct jvm_proc *j, __u64 thread, struct walk *w)
{
	if (!thread || bpf_probe_read_user(&w->sp, sizeof(w->sp), (void *)(thread + j->anchor_sp_off)) || !w->sp ||
	    bpf_probe_read_user(&w->pc, sizeof(w->pc), (void *)(thread + j->anchor_pc_off)) ||
	    bpf_probe_read_user(&w->fp, sizeof(w->fp), (void *)(thread + j->anchor_fp_off)))
		return false;
	return w->pc || !bpf_probe_read_user(&w->pc, sizeof(w->pc), (void *)(w->sp - 8));
}

/* the call path of the wait starting in the probed function into
 * usdt_stacks: its hash, 0 if none. With the JVM's code heaps known, its
 * Java frames from the thread's last one (`thread`: its JavaThread);
 * else by frame pointers from the probed function's entry (the return
 * address on top of the stack, the caller's frame pointer in rbp), which
 * finds compiled frames only with -XX:+PreserveFramePointer */
static __always_inline __u64 java_stack(struct pt_regs *ctx, const struct jvm_proc *j, __u32 tgid, __u64 thread)
{
	struct walk w = { .hash = 0xcbf29ce484222325ULL ^ tgid, .tgid = tgid };
	struct usdt_stack *st = NULL;
	__u32 zero = 0;

	if (!(st = bpf_map_lookup_elem(&usdt_walk, &zero)))
		return 0;
	__builtin_memset(st, 0, sizeof(*st));
	if ((j->flags & JVM_CODE_CACHE) && java_anchor(j, thread, &w)) {
		bpf_loop(USDT_FRAMES, jframe_one, &w, 0);
	} else {
		w.fp = PT_REGS_FP_CORE(ctx);
		if (bpf_probe_read_user(&w.pc, sizeof(w.pc), (void *)PT_REGS_SP_CORE(ctx)))
			return 0;
		bpf_loop(USDT_FRAMES, frame_one, &w, 0);
	}
	if (!st->n)
		return 0;
	st->tgid = tgid;
	w.hash |= 1;
	if (!bpf_map_lookup_elem(&usdt_stacks, &w.hash) && bpf_map_update_elem(&usdt_stacks, &w.hash, st, BPF_NOEXIST))
		ucount(UCNT_LOST_STACKS);
	return w.hash;
}

/* the class of the object HotSpot's ObjectMonitor `mon` locks: mon->_object
 * (a WeakHandle: the object's slot) -> the object */
static __always_inline int monitor_class(const struct jvm_proc *j, __u64 mon, char *name)
{
	__u64 obj = 0;

	if (bpf_probe_read_user(&obj, sizeof(obj), (void *)(mon + j->object_off)) ||
	    ((j->flags & JVM_OBJECT_HANDLE) && (!obj || bpf_probe_read_user(&obj, sizeof(obj), (void *)obj))) || !obj) {
		ucount(UCNT_NAME_UNREADABLE);
		return -1;
	}
	return object_class(j, obj, name);
}

/* the class of the park blocker of the calling thread, whose JavaThread is
 * `thread` (0: not in the JVM's thread list as last read): _threadObj (an OopHandle: the slot) -> the java.lang.Thread
 * -> its parkBlocker field (a narrowOop, decoded); false where there is
 * none (LockSupport.park() without one) or it is not readable; else the
 * name's length. (Its address is not kept: the GC moves a young lock
 * object at each collection, and would count it many times over.) */
static __always_inline int blocker_class(const struct jvm_proc *j, __u64 thread, char *name)
{
	__u64 slot = 0, tobj = 0, blocker = 0;
	__u32 narrow = 0;

	if (!thread) {
		ucount(UCNT_NO_JVM_THREAD);
		return -1;
	}
	if (!j->blocker_off || bpf_probe_read_user(&slot, sizeof(slot), (void *)(thread + j->thread_obj_off)) || !slot ||
	    bpf_probe_read_user(&tobj, sizeof(tobj), (void *)slot) || !tobj)
		return -1;
	if (j->flags & JVM_COMPRESSED_OOPS) {
		if (bpf_probe_read_user(&narrow, sizeof(narrow), (void *)(tobj + j->blocker_off)) || !narrow)
			return -1;
		blocker = j->oop_base + ((__u64)narrow << (j->oop_shift & 63));
	} else if (bpf_probe_read_user(&blocker, sizeof(blocker), (void *)(tobj + j->blocker_off)) || !blocker) {
		return -1;
	}
	return object_class(j, blocker, name);
}

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
