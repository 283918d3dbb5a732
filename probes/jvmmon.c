// SPDX-License-Identifier: MIT
/* Loader side of usdt.bpf.c's Java monitor names at ObjectMonitor::EnterI:
 * for each tracked process that maps a watched libjvm.so, read from the
 * process's memory where HotSpot keeps what names a monitor's class (the
 * JVM's own gHotSpotVMStructs table, which it exports for the serviceability
 * agent: the offsets of ObjectMonitor::_object, oopDesc's klass word,
 * Klass::_name, Symbol::_length and _body, and CompressedKlassPointers' base
 * and shift) and its flags (the JVMFlag table), and give them to the BPF
 * program (jvm_procs); and for its parks (LockSupport.park), where the
 * thread's java.lang.Thread and its parkBlocker field lie, with the JVM's
 * threads by tid, read again every tick (jvm_threads). A JVM started with
 * -XX:+DTraceMonitorProbes is marked so: its monitor probes name its
 * monitors (usdt.toml), and EnterI would count each enter twice. The
 * tables are filled while the JVM starts: a JVM not yet initialized is
 * looked at again next tick. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include "probe.h"
#include "jsonw.h"
#include "elfsym.h"
#include "jvmmon.h"

#define MAX_JVMS      64
#define MAX_FILES     8
#define MAX_OTHERS    256
#define OTHER_LOOKS   20      /* ticks a process's maps are looked at for a libjvm.so, per executable */
#define MAX_TRIES     600     /* ticks a JVM is waited for to initialize its tables */
#define MAX_ENTRIES   20000   /* VMStructs entries read at most */

struct jvm {
	__u32 tgid;
	int tries;
	bool decided;
	bool by_probes;          /* -XX:+DTraceMonitorProbes: its monitor probes name its monitors */
	bool mapped;             /* in jvm_procs */
	__u32 frames;            /* JVM_FRAMES, JVM_CODE_CACHE: how its waits' Java frames are walked */
	int mem;                 /* /proc/PID/mem while mapped (its threads are read every tick), else -1 */
	__u64 thread_list;       /* &ThreadsSMRSupport::_java_thread_list, 0: its threads are not read */
	__u32 length_off, threads_off, osthread_off, tid_off;   /* ThreadsList::_length, _threads; JavaThread::_osthread; OSThread::_thread_id */
	char file[PATH_MAX];
	char reason[160];        /* why its monitors are not named at EnterI (nor its parks), "" where they are */
};

/* a tracked process that maps no watched libjvm.so (yet): looked at again
 * OTHER_LOOKS ticks, and again after an exec (its executable changed) */
struct other {
	__u32 tgid;
	int looks;
	__u64 exe_hash;
};

static int map_fd = -1, threads_fd = -1;
static char files[MAX_FILES][PATH_MAX];
static int nfiles;
static struct jvm jvms[MAX_JVMS];
static int njvms;
static struct other others[MAX_OTHERS];
static int nothers;

void jvmmon_set_maps(int procs_fd, int thread_map_fd)
{
	map_fd = procs_fd;
	threads_fd = thread_map_fd;
}

void jvmmon_watch(const char *path)
{
	for (int i = 0; i < nfiles; i++)
		if (!strcmp(files[i], path))
			return;
	if (nfiles < MAX_FILES)
		snprintf(files[nfiles++], PATH_MAX, "%s", path);
}

/* ---- the process's memory ------------------------------------------------ */

static bool rd(int mem, __u64 addr, void *buf, size_t n)
{
	return addr && pread(mem, buf, n, (off_t)addr) == (ssize_t)n;
}

static __u64 rd64(int mem, __u64 addr)
{
	__u64 v = 0;

	return rd(mem, addr, &v, sizeof(v)) ? v : 0;
}

/* a C string of the process (up to size - 1 bytes); "" if unreadable */
static void rdstr(int mem, __u64 addr, char *out, size_t size)
{
	ssize_t n = addr ? pread(mem, out, size - 1, (off_t)addr) : -1;

	if (n <= 0 && addr)          /* at the end of a mapping: a shorter read */
		n = pread(mem, out, 16 < size ? 15 : size - 1, (off_t)addr);
	out[n > 0 ? n : 0] = '\0';
}

/* ---- gHotSpotVMStructs ---------------------------------------------------- */

enum { Y_STRUCTS, Y_TYPE_NAME, Y_FIELD_NAME, Y_TYPE_STRING, Y_IS_STATIC, Y_OFFSET, Y_ADDRESS, Y_STRIDE,
       Y_TYPES, Y_TTYPE_NAME, Y_TSIZE, Y_TSTRIDE, Y_INTS, Y_INT_NAME, Y_INT_VALUE, Y_INT_STRIDE, Y_BLOCKER,
       Y_NM_VTABLE, NSYMS };
static const char *const sym_names[NSYMS] = {
	"gHotSpotVMStructs", "gHotSpotVMStructEntryTypeNameOffset", "gHotSpotVMStructEntryFieldNameOffset",
	"gHotSpotVMStructEntryTypeStringOffset", "gHotSpotVMStructEntryIsStaticOffset",
	"gHotSpotVMStructEntryOffsetOffset", "gHotSpotVMStructEntryAddressOffset",
	"gHotSpotVMStructEntryArrayStride", "gHotSpotVMTypes", "gHotSpotVMTypeEntryTypeNameOffset",
	"gHotSpotVMTypeEntrySizeOffset", "gHotSpotVMTypeEntryArrayStride", "gHotSpotVMIntConstants",
	"gHotSpotVMIntConstantEntryNameOffset", "gHotSpotVMIntConstantEntryValueOffset",
	"gHotSpotVMIntConstantEntryArrayStride",
	"_ZN16java_lang_Thread20_park_blocker_offsetE",   /* an int: Thread.parkBlocker's offset (.symtab) */
	"_ZTV7nmethod",                                   /* nmethod's vtable (JDK 17; none in 25) */
};

/* the fields read (JDK 17 and 25 names; the first of two alternatives found wins) */
enum { F_OBJECT, F_CKLASS, F_KLASS, F_NAME, F_LENGTH, F_BODY, F_BASE, F_BASE25, F_SHIFT, F_SHIFT25, F_FLAGS,
       F_NUMFLAGS, F_FLAG_NAME, F_FLAG_ADDR, F_HEAP, F_THREAD_OBJ, F_OSTHREAD, F_OSTHREAD25, F_TID, F_LIST, F_LENGTH_L,
       F_THREADS, F_OOP_BASE, F_OOP_BASE25, F_OOP_SHIFT, F_OOP_SHIFT25, F_CONST_METHOD, F_CONSTANTS, F_NAME_INDEX,
       F_HOLDER, F_INTERP, F_STUB_BUFFER, F_BUFFER_LIMIT, F_ANCHOR, F_LAST_SP, F_LAST_PC, F_LAST_FP, F_HEAPS,
       F_MEMORY, F_SEGMAP, F_LOG2_SEG, F_VS_LOW, F_VS_HIGH, F_NM_METHOD, F_NM_METHOD25, F_FRAME_SIZE, F_KIND,
       F_GA_LEN, F_GA_DATA, NFIELDS };
static const char *const fields[NFIELDS][2] = {
	{ "ObjectMonitor", "_object" }, { "oopDesc", "_metadata._compressed_klass" },
	{ "oopDesc", "_metadata._klass" }, { "Klass", "_name" }, { "Symbol", "_length" }, { "Symbol", "_body" },
	{ "CompressedKlassPointers", "_narrow_klass._base" }, { "CompressedKlassPointers", "_base" },
	{ "CompressedKlassPointers", "_narrow_klass._shift" }, { "CompressedKlassPointers", "_shift" },
	{ "JVMFlag", "flags" }, { "JVMFlag", "numFlags" }, { "JVMFlag", "_name" }, { "JVMFlag", "_addr" },
	{ "Universe", "_collectedHeap" }, { "JavaThread", "_threadObj" }, { "JavaThread", "_osthread" },
	{ "Thread", "_osthread" },
	{ "OSThread", "_thread_id" }, { "ThreadsSMRSupport", "_java_thread_list" }, { "ThreadsList", "_length" },
	{ "ThreadsList", "_threads" }, { "CompressedOops", "_narrow_oop._base" }, { "CompressedOops", "_base" },
	{ "CompressedOops", "_narrow_oop._shift" }, { "CompressedOops", "_shift" },
	{ "Method", "_constMethod" }, { "ConstMethod", "_constants" }, { "ConstMethod", "_name_index" },
	{ "ConstantPool", "_pool_holder" }, { "AbstractInterpreter", "_code" }, { "StubQueue", "_stub_buffer" },
	{ "StubQueue", "_buffer_limit" }, { "JavaThread", "_anchor" }, { "JavaFrameAnchor", "_last_Java_sp" },
	{ "JavaFrameAnchor", "_last_Java_pc" }, { "JavaFrameAnchor", "_last_Java_fp" }, { "CodeCache", "_heaps" },
	{ "CodeHeap", "_memory" }, { "CodeHeap", "_segmap" }, { "CodeHeap", "_log2_segment_size" },
	{ "VirtualSpace", "_low_boundary" }, { "VirtualSpace", "_high_boundary" }, { "CompiledMethod", "_method" },
	{ "nmethod", "_method" }, { "CodeBlob", "_frame_size" }, { "CodeBlob", "_kind" },
	{ "GrowableArrayBase", "_len" }, { "GrowableArray<int>", "_data" },
};

/* the sizes read from gHotSpotVMTypes */
enum { T_FLAG, T_CONSTANT_POOL, T_HEAP_BLOCK, NTYPES };
static const char *const type_names[NTYPES] = { "JVMFlag", "ConstantPool", "HeapBlock" };

/* the int constant naming an nmethod's CodeBlob::_kind (JDK 25) */
#define NMETHOD_KIND "CodeBlobKind::Nmethod"

/* an interpreted frame's Method * lies one word below its last sp on x86-64
 * (frame_x86.hpp: interpreter_frame_method_offset is
 * interpreter_frame_last_sp_offset - 1; gHotSpotVMIntConstants has the
 * latter, -2 in JDK 17 and 25), in words from its frame pointer */
#define INTERP_LAST_SP "frame::interpreter_frame_last_sp_offset"
#define INTERP_LAST_SP_DEFAULT (-2)

struct field {
	bool found;
	bool typed;              /* a type string: ObjectMonitor::_object's is none where it is a WeakHandle */
	__u64 offset, address;   /* a field's offset; a static's address */
};

/* the flags read */
enum { G_CCP, G_COMPACT, G_DTRACE_MON, G_DTRACE_EXT, G_COOPS, NFLAGS };
static const char *const flag_names[NFLAGS] = {
	"UseCompressedClassPointers", "UseCompactObjectHeaders", "DTraceMonitorProbes", "ExtendedDTraceProbes",
	"UseCompressedOops",
};

/* the fields of gHotSpotVMStructs, and the sizes of type_names from
 * gHotSpotVMTypes (0: not found); false while the JVM has not filled them
 * (the strides are 0) */
static bool read_structs(int mem, const __u64 *g, struct field *f, __u64 *size)
{
	__u64 stride = g[Y_STRIDE], tstride = g[Y_TSTRIDE];
	unsigned char e[256];
	char type[64], name[64];

	if (!stride || stride > sizeof(e) || !tstride || tstride > sizeof(e) || !g[Y_STRUCTS] || !g[Y_TYPES])
		return false;
	for (int k = Y_TYPE_NAME; k <= Y_ADDRESS; k++)
		if (g[k] + 8 > stride)
			return false;
	if (g[Y_TTYPE_NAME] + 8 > tstride || g[Y_TSIZE] + 8 > tstride)
		return false;
	for (__u64 i = 0, at = g[Y_STRUCTS]; i < MAX_ENTRIES && rd(mem, at, e, stride); i++, at += stride) {
		__u64 tn = *(__u64 *)(e + g[Y_TYPE_NAME]);
		bool named = false;

		if (!tn)
			break;
		rdstr(mem, tn, type, sizeof(type));
		for (int k = 0; k < NFIELDS; k++) {
			if (f[k].found || strcmp(type, fields[k][0]))
				continue;
			if (!named)
				rdstr(mem, *(__u64 *)(e + g[Y_FIELD_NAME]), name, sizeof(name));
			named = true;
			if (strcmp(name, fields[k][1]))
				continue;
			f[k].found = true;
			f[k].typed = *(__u64 *)(e + g[Y_TYPE_STRING]) != 0;
			f[k].offset = *(__u64 *)(e + g[Y_OFFSET]);
			f[k].address = *(__u64 *)(e + g[Y_ADDRESS]);
		}
	}
	for (int k = 0; k < NTYPES; k++)
		size[k] = 0;
	for (__u64 i = 0, at = g[Y_TYPES]; i < MAX_ENTRIES && rd(mem, at, e, tstride); i++, at += tstride) {
		__u64 tn = *(__u64 *)(e + g[Y_TTYPE_NAME]);

		if (!tn)
			break;
		rdstr(mem, tn, type, sizeof(type));
		for (int k = 0; k < NTYPES; k++)
			if (!strcmp(type, type_names[k]))
				size[k] = *(__u64 *)(e + g[Y_TSIZE]);
	}
	return true;
}

/* the boolean flags of flag_names (-1: not found) from the JVMFlag table */
static void read_flags(int mem, const struct field *f, __u64 flag_size, int *flags)
{
	__u64 n = f[F_NUMFLAGS].found ? rd64(mem, f[F_NUMFLAGS].address) : 0;
	__u64 table = f[F_FLAGS].found ? rd64(mem, f[F_FLAGS].address) : 0;
	unsigned char *buf;

	for (int k = 0; k < NFLAGS; k++)
		flags[k] = -1;
	if (!n || n > 10000 || !table || !flag_size || flag_size > 256 || !f[F_FLAG_NAME].found ||
	    !f[F_FLAG_ADDR].found || f[F_FLAG_NAME].offset + 8 > flag_size || f[F_FLAG_ADDR].offset + 8 > flag_size ||
	    !(buf = malloc(n * flag_size)))
		return;
	if (rd(mem, table, buf, n * flag_size)) {
		for (__u64 i = 0; i < n; i++) {
			const unsigned char *e = buf + i * flag_size;
			char name[40];

			rdstr(mem, *(const __u64 *)(e + f[F_FLAG_NAME].offset), name, sizeof(name));
			for (int k = 0; k < NFLAGS; k++) {
				unsigned char v = 0;

				if (flags[k] < 0 && !strcmp(name, flag_names[k]) &&
				    rd(mem, *(const __u64 *)(e + f[F_FLAG_ADDR].offset), &v, 1))
					flags[k] = v != 0;
			}
		}
	}
	free(buf);
}

/* field k, or its JDK 25 name at k + 1 */
static const struct field *either(const struct field *f, int k)
{
	return f[k].found ? &f[k] : &f[k + 1];
}

/* the static at field k (or its JDK 25 name at k + 1): its value, 8 or 4 bytes; false if not found */
static bool read_static(int mem, const struct field *f, int k, void *v, size_t n)
{
	const struct field *x = either(f, k);

	return x->found && rd(mem, x->address, v, n);
}

/* the values of sym_names in libjvm.so `file` (tens of thousands of
 * symbols: parsed once per file, not per JVM nor per look at one starting) */
static bool symbols_of(const char *file, __u64 *g, struct elf_base *eb)
{
	static struct { char path[PATH_MAX]; bool ok; __u64 g[NSYMS]; struct elf_base eb; } cache[MAX_FILES];
	static int ncache;
	int i;

	for (i = 0; i < ncache && strcmp(cache[i].path, file); i++)
		;
	if (i == ncache) {
		if (ncache == MAX_FILES)
			return elf_symbol_values(file, sym_names, NSYMS, g, eb);
		snprintf(cache[i].path, sizeof(cache[i].path), "%s", file);
		cache[i].ok = elf_symbol_values(file, sym_names, NSYMS, cache[i].g, &cache[i].eb);
		ncache++;
	}
	memcpy(g, cache[i].g, sizeof(cache[i].g));
	*eb = cache[i].eb;
	return cache[i].ok;
}

/* gHotSpotVMIntConstants' `name`, false if not there */
static bool read_int_constant(int mem, const __u64 *g, const char *name, __s32 *v)
{
	unsigned char e[64];
	char n[64];

	if (!g[Y_INTS] || !g[Y_INT_STRIDE] || g[Y_INT_STRIDE] > sizeof(e) || g[Y_INT_NAME] + 8 > g[Y_INT_STRIDE] ||
	    g[Y_INT_VALUE] + 4 > g[Y_INT_STRIDE])
		return false;
	for (__u64 i = 0, at = g[Y_INTS]; i < MAX_ENTRIES && rd(mem, at, e, g[Y_INT_STRIDE]); i++, at += g[Y_INT_STRIDE]) {
		__u64 np = *(__u64 *)(e + g[Y_INT_NAME]);

		if (!np)
			break;
		rdstr(mem, np, n, sizeof(n));
		if (!strcmp(n, name)) {
			*v = *(__s32 *)(e + g[Y_INT_VALUE]);
			return true;
		}
	}
	return false;
}

/* where its waits' Java frames are found: the interpreter's code
 * (AbstractInterpreter::_code, a StubQueue) and how a Method * is named;
 * JVM_FRAMES set where all are known */
static void read_frames(int mem, const struct field *f, const __u64 *g, __u64 cp_size, struct jvm_proc *jp)
{
	__u64 queue = f[F_INTERP].found ? rd64(mem, f[F_INTERP].address) : 0;
	__s32 limit = 0, last_sp = INTERP_LAST_SP_DEFAULT;

	for (int k = F_CONST_METHOD; k <= F_BUFFER_LIMIT; k++)
		if (!f[k].found)
			return;
	if (!queue || !cp_size || !(jp->interp_lo = rd64(mem, queue + f[F_STUB_BUFFER].offset)) ||
	    !rd(mem, queue + f[F_BUFFER_LIMIT].offset, &limit, sizeof(limit)) || limit <= 0)
		return;
	jp->interp_hi = jp->interp_lo + (__u64)limit;
	read_int_constant(mem, g, INTERP_LAST_SP, &last_sp);
	jp->method_fp_off = (last_sp - 1) * 8;
	jp->const_method_off = f[F_CONST_METHOD].offset;
	jp->constants_off = f[F_CONSTANTS].offset;
	jp->name_index_off = f[F_NAME_INDEX].offset;
	jp->holder_off = f[F_HOLDER].offset;
	jp->cp_size = cp_size;
	jp->flags |= JVM_FRAMES;
}

/* compiled frames: the code heaps (CodeCache::_heaps, a GrowableArray of
 * CodeHeap *: each one's reserved range, segment map and segment size),
 * how a blob is told to be an nmethod (`nm_vtable`: nmethod's vtable in the
 * process, JDK 17; else CodeBlob::_kind), its Method * and frame size, and
 * the thread's last Java frame; JVM_CODE_CACHE set where all are known */
static void read_code_cache(int mem, const struct field *f, const __u64 *g, __u64 block_size, __u64 nm_vtable,
			    struct jvm_proc *jp)
{
	__u64 heaps = f[F_HEAPS].found ? rd64(mem, f[F_HEAPS].address) : 0, data;
	__u32 len_off = f[F_GA_LEN].found ? f[F_GA_LEN].offset : 0, data_off = f[F_GA_DATA].found ? f[F_GA_DATA].offset : 8;
	__s32 n = 0, kind;

	for (int k = F_ANCHOR; k <= F_VS_HIGH; k++)
		if (!f[k].found)
			return;
	if (!either(f, F_NM_METHOD)->found || !f[F_FRAME_SIZE].found || !block_size || !heaps ||
	    !rd(mem, heaps + len_off, &n, sizeof(n)) || n <= 0 || !(data = rd64(mem, heaps + data_off)))
		return;
	for (int i = 0; i < n && i < JVM_HEAPS; i++) {
		__u64 h = rd64(mem, data + 8 * i);
		struct jvm_heap *x = &jp->heaps[i];

		x->lo = rd64(mem, h + f[F_MEMORY].offset + f[F_VS_LOW].offset);
		x->hi = rd64(mem, h + f[F_MEMORY].offset + f[F_VS_HIGH].offset);
		x->segmap = rd64(mem, h + f[F_SEGMAP].offset + f[F_VS_LOW].offset);
		if (!h || !x->lo || x->hi <= x->lo || !x->segmap ||
		    !rd(mem, h + f[F_LOG2_SEG].offset, &x->log2_seg, sizeof(x->log2_seg)) || x->log2_seg > 20)
			return;
	}
	if (nm_vtable) {
		jp->nm_tag = nm_vtable;
		jp->nm_tag_size = 8;             /* at offset 0 */
	} else if (f[F_KIND].found && read_int_constant(mem, g, NMETHOD_KIND, &kind)) {
		jp->nm_tag = (__u8)kind;
		jp->nm_tag_off = f[F_KIND].offset;
		jp->nm_tag_size = 1;
	} else {
		return;
	}
	jp->nm_method_off = either(f, F_NM_METHOD)->offset;
	jp->frame_size_off = f[F_FRAME_SIZE].offset;
	jp->block_size = block_size;
	jp->anchor_sp_off = f[F_ANCHOR].offset + f[F_LAST_SP].offset;
	jp->anchor_pc_off = f[F_ANCHOR].offset + f[F_LAST_PC].offset;
	jp->anchor_fp_off = f[F_ANCHOR].offset + f[F_LAST_FP].offset;
	jp->flags |= JVM_CODE_CACHE;
}

/* what names the monitors and parks of JVM j, whose libjvm.so is mapped
 * at map_start: true once decided (the map entry made, or j->reason says
 * why not), false to look again next tick */
static bool read_layout(struct jvm *j, __u64 map_start)
{
	struct field f[NFIELDS] = {};
	struct jvm_proc jp = {};
	__u64 g[NSYMS], size[NTYPES];
	int flags[NFLAGS], mem;
	struct elf_base eb;
	__u32 blocker = 0;
	char path[64];

	if (!symbols_of(j->file, g, &eb) || !g[Y_STRUCTS] || !g[Y_STRIDE]) {
		snprintf(j->reason, sizeof(j->reason), "its libjvm.so exports no gHotSpotVMStructs table");
		return true;
	}
	snprintf(path, sizeof(path), "/proc/%u/mem", j->tgid);
	if ((mem = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(j->reason, sizeof(j->reason), "%s: %s", path, strerror(errno));
		return true;
	}
	if (g[Y_BLOCKER])                    /* an int; 0 until java.lang.Thread's offsets are computed */
		rd(mem, elf_address(&eb, g[Y_BLOCKER], map_start), &blocker, sizeof(blocker));
	for (int k = 0; k < Y_BLOCKER; k++)  /* each is a variable: its value, in the process */
		g[k] = g[k] ? rd64(mem, elf_address(&eb, g[k], map_start)) : 0;
	if (!read_structs(mem, g, f, size) || (f[F_HEAP].found && !rd64(mem, f[F_HEAP].address)) ||
	    (f[F_INTERP].found && !rd64(mem, f[F_INTERP].address)) ||
	    (g[Y_BLOCKER] && !blocker)) {
		close(mem);
		return false;                /* not initialized yet */
	}
	read_flags(mem, f, size[T_FLAG], flags);
	if (flags[G_DTRACE_MON] > 0 || flags[G_DTRACE_EXT] > 0) {
		j->by_probes = true;         /* its monitors are its probes'; its parks are still named here */
		jp.flags |= JVM_MONITOR_PROBES;
	}
	if (flags[G_COMPACT] > 0) {
		snprintf(j->reason, sizeof(j->reason), "-XX:+UseCompactObjectHeaders: the class is in the object's "
			 "mark word, which is not read");
		goto out;
	}
	for (int k = 0; k < NFIELDS; k++) {
		if (f[k].found || (k != F_OBJECT && k != F_NAME && k != F_LENGTH && k != F_BODY))
			continue;     /* the others are looked at where needed */
		snprintf(j->reason, sizeof(j->reason), "no %s::%s in its gHotSpotVMStructs", fields[k][0],
			 fields[k][1]);
		goto out;
	}
	if (flags[G_CCP] < 0) {
		snprintf(j->reason, sizeof(j->reason), "its UseCompressedClassPointers flag was not found");
		goto out;
	}
	jp.object_off = f[F_OBJECT].offset;
	jp.name_off = f[F_NAME].offset;
	jp.length_off = f[F_LENGTH].offset;
	jp.body_off = f[F_BODY].offset;
	jp.flags |= f[F_OBJECT].typed ? 0 : JVM_OBJECT_HANDLE;
	if (flags[G_CCP]) {
		if (!f[F_CKLASS].found || !read_static(mem, f, F_BASE, &jp.klass_base, 8) ||
		    !read_static(mem, f, F_SHIFT, &jp.klass_shift, 4)) {
			snprintf(j->reason, sizeof(j->reason), "compressed class pointers whose base and shift are "
				 "not in its gHotSpotVMStructs");
			goto out;
		}
		jp.flags |= JVM_COMPRESSED_KLASS;
		jp.klass_off = f[F_CKLASS].offset;
	} else if (f[F_KLASS].found) {
		jp.klass_off = f[F_KLASS].offset;
	} else {
		snprintf(j->reason, sizeof(j->reason), "no oopDesc::_metadata._klass in its gHotSpotVMStructs");
		goto out;
	}
	/* parks: the blocker field of the thread object, the thread list (else parks stay unnamed) */
	if (blocker && f[F_THREAD_OBJ].found && either(f, F_OSTHREAD)->found && f[F_TID].found && f[F_LIST].found &&
	    f[F_LENGTH_L].found && f[F_THREADS].found && flags[G_COOPS] >= 0 &&
	    (flags[G_COOPS] == 0 || (read_static(mem, f, F_OOP_BASE, &jp.oop_base, 8) &&
				     read_static(mem, f, F_OOP_SHIFT, &jp.oop_shift, 4)))) {
		jp.blocker_off = blocker;
		jp.thread_obj_off = f[F_THREAD_OBJ].offset;
		jp.flags |= flags[G_COOPS] ? JVM_COMPRESSED_OOPS : 0;
		j->thread_list = f[F_LIST].address;
		j->length_off = f[F_LENGTH_L].offset;
		j->threads_off = f[F_THREADS].offset;
		j->osthread_off = either(f, F_OSTHREAD)->offset;
		j->tid_off = f[F_TID].offset;
	}
	read_frames(mem, f, g, size[T_CONSTANT_POOL], &jp);
	if (jp.flags & JVM_FRAMES)
		read_code_cache(mem, f, g, size[T_HEAP_BLOCK],
				g[Y_NM_VTABLE] ? elf_address(&eb, g[Y_NM_VTABLE], map_start) + 16 : 0, &jp);
	if (bpf_map_update_elem(map_fd, &j->tgid, &jp, BPF_ANY)) {
		snprintf(j->reason, sizeof(j->reason), "jvm_procs map: %s", strerror(errno));
		goto out;
	}
	j->mapped = true;
	j->frames = jp.flags & (JVM_FRAMES | JVM_CODE_CACHE);
	j->mem = mem;                        /* kept: its threads are read every tick */
	return true;
out:
	close(mem);
	return true;
}

/* the JVM's Java threads into jvm_threads, (tgid << 32 | tid) -> JavaThread *:
 * ThreadsSMRSupport::_java_thread_list -> its _threads[_length] -> each one's
 * _osthread -> _thread_id. Threads started since the last tick are added;
 * a park of one not yet here is not named (usdt_parks_of_unknown_threads) */
static void read_threads(const struct jvm *j)
{
	__u64 list = rd64(j->mem, j->thread_list), arr, *threads;
	__u32 n = 0;

	if (!list || !rd(j->mem, list + j->length_off, &n, sizeof(n)) || !n || n > 8192 ||
	    !(arr = rd64(j->mem, list + j->threads_off)) || !(threads = calloc(n, sizeof(*threads))))
		return;
	if (rd(j->mem, arr, threads, n * sizeof(*threads))) {
		for (__u32 i = 0; i < n; i++) {
			__u64 os = rd64(j->mem, threads[i] + j->osthread_off), key;
			__s32 tid = 0;

			if (!os || !rd(j->mem, os + j->tid_off, &tid, sizeof(tid)) || tid <= 0)
				continue;
			key = (__u64)j->tgid << 32 | (__u32)tid;
			bpf_map_update_elem(threads_fd, &key, &threads[i], BPF_ANY);
		}
	}
	free(threads);
}

/* ---- the tracked processes -------------------------------------------------- */

/* the start of the mapping of a watched libjvm.so at file offset 0 in
 * process tgid, and its path; 0: none */
static __u64 mapped_jvm(__u32 tgid, char *file)
{
	char path[64], line[PATH_MAX + 128];
	__u64 start = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/maps", tgid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (!start && fgets(line, sizeof(line), f)) {
		unsigned long long lo, off;
		char *name = strchr(line, '/'), *nl;

		if (!name || sscanf(line, "%llx-%*x %*s %llx", &lo, &off) != 2 || off != 0)
			continue;
		if ((nl = strchr(name, '\n')))
			*nl = '\0';
		for (int i = 0; i < nfiles && !start; i++)
			if (!strcmp(name, files[i])) {
				start = lo;
				snprintf(file, PATH_MAX, "%s", name);
			}
	}
	fclose(f);
	return start;
}

static __u64 exe_hash(__u32 tgid)
{
	char link[32], exe[PATH_MAX];
	__u64 h = 0xcbf29ce484222325ULL;
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%u/exe", tgid);
	n = readlink(link, exe, sizeof(exe));
	for (ssize_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)exe[i]) * 0x100000001b3ULL;
	return h;
}

/* false if tgid was found to map no libjvm.so OTHER_LOOKS times with its executable unchanged */
static bool worth_a_look(__u32 tgid)
{
	__u64 h = exe_hash(tgid);

	for (int i = 0; i < nothers; i++)
		if (others[i].tgid == tgid) {
			if (others[i].exe_hash != h)
				others[i].exe_hash = h, others[i].looks = 0;
			return others[i].looks++ < OTHER_LOOKS;
		}
	if (nothers < MAX_OTHERS)
		others[nothers++] = (struct other){ .tgid = tgid, .looks = 1, .exe_hash = h };
	return true;
}

static struct jvm *jvm_of(__u32 tgid)
{
	for (int i = 0; i < njvms; i++)
		if (jvms[i].tgid == tgid)
			return &jvms[i];
	return NULL;
}

void jvmmon_scan(int tracked_fd)
{
	__u32 tgid, *prev = NULL;

	if (map_fd < 0 || !nfiles)
		return;
	while (bpf_map_get_next_key(tracked_fd, prev, &tgid) == 0) {
		struct jvm *j = jvm_of(tgid);
		char file[PATH_MAX];
		__u64 start;

		prev = &tgid;
		if (j && j->mapped && j->thread_list)
			read_threads(j);
		if (j && j->decided)
			continue;
		if (!j && (njvms >= MAX_JVMS || !worth_a_look(tgid)))
			continue;
		if (!(start = mapped_jvm(tgid, file)))
			continue;
		if (!j) {
			j = &jvms[njvms++];
			memset(j, 0, sizeof(*j));
			j->tgid = tgid;
			j->mem = -1;
			snprintf(j->file, sizeof(j->file), "%s", file);
		}
		j->decided = read_layout(j, start);
		if (j->mapped && j->thread_list)
			read_threads(j);
		if (!j->decided && ++j->tries >= MAX_TRIES) {
			snprintf(j->reason, sizeof(j->reason), "its gHotSpotVMStructs table was not filled in %d ticks",
				 MAX_TRIES);
			j->decided = true;
		}
	}
}

void jvmmon_json(struct jw *w)
{
	jw_key(w, "jvms");
	jw_arr(w);
	for (int i = 0; i < njvms; i++)
		EMIT_ROW_USDT_PROBE_JVMS(w, &jvms[i]);
	jw_arr_end(w);
}

void jvmmon_destroy(void)
{
	for (int i = 0; i < njvms; i++)
		if (jvms[i].mem >= 0)
			close(jvms[i].mem);
	njvms = nfiles = nothers = 0;
	map_fd = threads_fd = -1;
}
