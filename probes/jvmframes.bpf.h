/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The JVM's side of usdt.bpf.c: the JVMs and Java threads the loader found
 * (jvm_procs, jvm_threads: probes/jvmmon.c reads their layout from the
 * JVM's own VMStructs), and the call path of a wait inside one (java_stack:
 * the thread's frames walked from its last Java frame as HotSpot's
 * frame::sender does, interpreted and compiled, each frame a return address
 * or, with JVM_METHOD_FRAME set, a Method * named once in jvm_methods), and
 * the class of the object a monitor locks or a thread parks on
 * (monitor_class, blocker_class). Beside pyframes.bpf.h, CPython's walker.
 *
 * Stands on its own: it includes what it uses (vmlinux.h, the libbpf BPF
 * headers, probe.h for struct jvm_proc, usdt_stack and the jvm_method
 * types, usdtcounters.bpf.h for ucount), so it compiles wherever it is
 * included.
 */
#ifndef LOCKSCOPE_JVMFRAMES_BPF_H
#define LOCKSCOPE_JVMFRAMES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "usdtcounters.bpf.h"   /* ucount(): unreadable names, lost stacks, threads not found */
#include "usdt_types.h"

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

#endif
