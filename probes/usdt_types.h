/* SPDX-License-Identifier: MIT */
/* usdt.bpf.c's types: application lock waits named by a program's USDT
 * probes or functions, the JVMs' layouts and frames, its counters. Shared
 * by the BPF side and the loader (probe.h includes every *_types.h): free
 * of kernel or libc headers, both sides include it after their own. */
#ifndef LOCKSCOPE_USDT_TYPES_H
#define LOCKSCOPE_USDT_TYPES_H

#include "common_types.h"

/* application lock waits from USDT probes (usdt.bpf.c), by process, probe
 * table entry, the lock's name (a string argument) or number (a tag), mode */
struct usdt_key {
	__u32 tgid;
	__u32 entry;          /* the table's probe index (the attach cookie's low byte) */
	__u64 value;          /* the numeric argument naming the lock (a tag type); a JVM's: the object */
	__u32 mode;
	__u32 pad;
	char name[USDT_NAME_LEN];   /* the string argument naming the lock */
};

/* usdt_stats' key: the lock (the key its holders know it by) and the call
 * path of the wait (a JVM's: usdt_stacks), 0: none */
struct usdt_stat_key {
	struct usdt_key key;
	__u64 stack;
};

/* the call path of a JVM's waits (usdt_stacks, by a hash of it): its Java
 * frames, innermost first, each as its Method * with JVM_METHOD_FRAME set
 * (named in jvm_methods), walked from the thread's last Java frame; where
 * the JVM's code heaps are not known, frame-pointer return addresses from
 * the probed function's caller outwards instead, an interpreted frame as
 * its Method *; 0 past the end */
#define USDT_FRAMES 24
struct usdt_stack {
	__u32 tgid;
	__u32 n;
	__u64 pc[USDT_FRAMES];
};

/* the name of an interpreted Java frame's method, by (tgid, Method *): its
 * class (internal form, java/util/Hashtable) and its name */
#define JVM_METHOD_LEN 64
struct jvm_method_key {
	__u32 tgid;
	__u32 pad;
	__u64 method;
};

struct jvm_method {
	char cls[USDT_NAME_LEN];
	char name[JVM_METHOD_LEN];
};

/* a USDT-named lock as hold_key.lock (holders.bpf.h): this bit, which no
 * user-space address has, and a hash of its usdt_key */

#define USDT_COUNTERS(X)                                                                        \
	X(UCNT_STARTS, "usdt_wait_starts")        /* wait starts seen in tracked processes */   \
	X(UCNT_DONES, "usdt_waits")               /* waits timed */                             \
	X(UCNT_NAME_UNREADABLE, "usdt_names_unreadable") /* name string not readable */          \
	X(UCNT_LOST_OPEN, "lost_usdt_open_map_full")     /* a wait lost: open-wait map full */    \
	X(UCNT_LOST_WAITS, "lost_usdt_map_full")  /* a wait lost: aggregation map full */     \
	/* a HotSpot monitor enter in a JVM whose layout is not known (yet, or its monitor probes name it) */ \
	X(UCNT_NO_JVM_LAYOUT, "usdt_monitor_enters_without_layout")                             \
	/* a park of a thread not (yet) in the JVM's thread list as read by the loader */        \
	X(UCNT_NO_JVM_THREAD, "usdt_parks_of_unknown_threads")                                  \
	X(UCNT_NOT_NAMED, "usdt_starts_of_other_names") /* a name not among the entry's: no wait */ \
	X(UCNT_LOST_STACKS, "lost_usdt_stacks_map_full") /* a JVM wait's call path not kept: map full */

/* a JVM whose Java monitors usdt.bpf.c names at ObjectMonitor::EnterI (or
 * enter_internal) by the locked object's class, by process; the offsets are
 * the JVM's own (its exported gHotSpotVMStructs table, probes/jvmmon.c) */
#define JVM_HEAPS 3            /* code heaps: non-nmethods, profiled and non-profiled nmethods */
struct jvm_proc {
	__u64 klass_base;     /* CompressedKlassPointers' base (compressed class pointers) */
	__u32 klass_shift;    /* and shift */
	__u32 object_off;     /* ObjectMonitor::_object: a WeakHandle, the address of the object's slot */
	__u32 klass_off;      /* oopDesc::_metadata._compressed_klass (or ._klass) */
	__u32 name_off;       /* Klass::_name, a Symbol * */
	__u32 length_off;     /* Symbol::_length, a u2 */
	__u32 body_off;       /* Symbol::_body: the name's bytes, internal form (java/lang/Object) */
	__u32 flags;          /* JVM_* below */
	__u32 thread_obj_off; /* JavaThread::_threadObj: an OopHandle, the address of the java.lang.Thread's slot */
	__u32 blocker_off;    /* java.lang.Thread.parkBlocker in the Thread object (0: not known) */
	__u32 oop_shift;      /* CompressedOops' shift */
	__u64 oop_base;       /* and base (compressed oops: a reference field is a 32-bit narrowOop) */
	/* Java frames (JVM_FRAMES): the template interpreter's code, where a
	 * return address into it is an interpreted frame's; that frame's
	 * Method * at its frame pointer + method_fp_off; Method::_constMethod,
	 * ConstMethod::_constants and _name_index, ConstantPool::_pool_holder,
	 * sizeof(ConstantPool) (its entries follow it) */
	__u64 interp_lo, interp_hi;
	__s32 method_fp_off;
	__u32 const_method_off, constants_off, name_index_off, holder_off, cp_size;
	/* compiled frames (JVM_CODE_CACHE): a wait's Java frames walked from the
	 * thread's last Java frame (JavaThread::_anchor's sp, pc, fp), a return
	 * address found in the code heaps through their segment maps (as
	 * CodeHeap::find_blob does), an nmethod told by its tag (its vtable,
	 * JDK 17; its kind, JDK 25), its Method * and frame size read */
	struct jvm_heap {
		__u64 lo, hi, segmap;
		__u32 log2_seg, pad;
	} heaps[JVM_HEAPS];
	__u64 nm_tag;
	__u32 nm_tag_off, nm_tag_size;
	__u32 nm_method_off, frame_size_off, block_size;
	__u32 anchor_sp_off, anchor_pc_off, anchor_fp_off;
};
#define JVM_COMPRESSED_KLASS 1   /* the klass word is a 32-bit narrowKlass */
#define JVM_OBJECT_HANDLE    2   /* _object holds the address of the object's slot, not the object */
#define JVM_COMPRESSED_OOPS  4   /* reference fields are narrowOops */
#define JVM_MONITOR_PROBES   8   /* -XX:+DTraceMonitorProbes: its monitor probes name its monitors, not EnterI */
#define JVM_FRAMES          16   /* its interpreter and Method layout known: waits keep their Java frames */
#define JVM_CODE_CACHE      32   /* its code heaps and thread anchor known: compiled frames walked too */

/* a name filter of a probe table entry (usdt.bpf.c): a wait counts only if
 * its name ends with one of its entry's suffixes, by (entry << 2 | i) */
struct usdt_suffix {
	__u32 len;
	char s[USDT_NAME_LEN];
};

enum usdt_counter {
	USDT_COUNTERS(COUNTER_ENUM)
	UCNT__MAX,
};

#endif
