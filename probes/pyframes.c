// SPDX-License-Identifier: MIT
/* Loader side of pyframes.bpf.h: find the CPython interpreter of each tracked
 * process (the executable or libpython that defines _PyRuntime, exported in
 * .dynsym even by a stripped build), give the BPF program where its GIL lies
 * and how to walk its frames, and read the names of the code objects in the
 * Python stacks it kept, from the process's memory, while the process runs.
 *
 * CPython's layouts by minor version are data: analyzer/user/pylayouts.toml,
 * made into PY_LAYOUTS (build/pylayouts.h) by gen_pylayouts.py; where a
 * layout does not fit a build, the BPF program's check (the GIL's last
 * holder is the waking thread) fails and the GIL's holders keep their C
 * stacks. */
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
#include "pyframes.h"
#include "grow.h"
#include "elfsym.h"
#include "pylayouts.h"

#define MAX_PY_PROCS  256
#define LABEL_LEN     160
#define NAME_LEN      96

struct py_layout {
	int minor;               /* CPython 3.minor */
	__u32 gil_off;           /* the GIL (struct _gil_runtime_state) in _PyRuntime */
	__u32 gil_size;
	__u32 last_holder_off;   /* in the GIL */
	__u32 tid_off, frame_off, cframe_off, code_off, prev_off, owner_off;   /* as in struct py_proc */
	__u32 qualname_off, filename_off, firstlineno_off;                     /* PyCodeObject */
	__u32 ascii_size;        /* sizeof(PyASCIIObject): a compact ASCII string's characters follow it */
	__u32 compact_size;      /* sizeof(PyCompactUnicodeObject): a compact Latin-1 string's */
	__u32 flags;             /* PY_* of probe.h */
};

static const struct py_layout layouts[] = { PY_LAYOUTS };

struct pyp {
	__u32 tgid;
	int mem;                 /* /proc/PID/mem, -1: closed */
	const struct py_layout *lay;   /* &own, or NULL: no layout known */
	struct py_layout own;    /* the table's, or the interpreter's own debug offsets (3.13) */
	__u64 gil;               /* the GIL's address in the process */
	bool debug_offsets;      /* own came from the interpreter's _Py_DebugOffsets */
	__u64 code_type;         /* &PyCode_Type in the process, 0: not known */
	char file[PATH_MAX];
	char reason[128];        /* why its frames are not read, or "" */
	__u64 exec_id;           /* the image it was read from (exec_id), 0: not known */
};

struct code_name {
	__u32 tgid;
	__u64 code;
	char label[LABEL_LEN];
};

struct stack_row {
	__u32 id;
	struct py_stack s;
	int resolved;            /* names read (some may be "?") */
	int labels[PY_DEPTH];    /* index in names, -1: not read */
};

/* an open-addressing index from a non-zero (a, b) key to a position in an
 * array (the stack rows by id, the code names by process and code object):
 * each tick looks up every stack of the map, up to thousands */
struct index {
	struct index_slot {
		__u64 a, b;      /* a == 0: empty */
		size_t pos;
	} *slots;
	size_t cap, n;           /* cap a power of two, or 0 */
};

static size_t index_home(const struct index *x, __u64 a, __u64 b)
{
	__u64 h = (a * 0x9e3779b97f4a7c15ULL) ^ (b * 0xc2b2ae3d27d4eb4fULL);

	return (size_t)(h ^ (h >> 29)) & (x->cap - 1);
}

/* the position of key (a, b), or -1 */
static long index_find(const struct index *x, __u64 a, __u64 b)
{
	for (size_t i = x->cap ? index_home(x, a, b) : 0, k = 0; k < x->cap; i = (i + 1) & (x->cap - 1), k++) {
		if (!x->slots[i].a)
			return -1;
		if (x->slots[i].a == a && x->slots[i].b == b)
			return (long)x->slots[i].pos;
	}
	return -1;
}

/* adds key (a, b) at pos (not already in); false without memory */
static bool index_put(struct index *x, __u64 a, __u64 b, size_t pos)
{
	size_t i;

	if ((x->n + 1) * 2 > x->cap) {     /* at most half full: grow, and place the keys again */
		struct index old = *x;

		x->cap = old.cap ? old.cap * 2 : 256;
		if (!(x->slots = calloc(x->cap, sizeof(*x->slots)))) {
			*x = old;
			return false;
		}
		x->n = 0;
		for (size_t k = 0; k < old.cap; k++)
			if (old.slots[k].a)
				index_put(x, old.slots[k].a, old.slots[k].b, old.slots[k].pos);
		free(old.slots);
	}
	for (i = index_home(x, a, b); x->slots[i].a; i = (i + 1) & (x->cap - 1))
		;
	x->slots[i] = (struct index_slot){ .a = a, .b = b, .pos = pos };
	x->n++;
	return true;
}

static void index_free(struct index *x)
{
	free(x->slots);
	memset(x, 0, sizeof(*x));
}

static int procs_fd = -1, stacks_fd = -1, waits_fd = -1;
static struct pyp procs[MAX_PY_PROCS];
static int nprocs;
static struct code_name *names;
static size_t nnames, cnames;
static struct stack_row *rows;
static size_t nrows, crows;
static struct index rows_by_id, names_by_code;   /* (id + 1, 0); (code, tgid) */

void pyframes_set_maps(int procs_map_fd, int stacks_map_fd, int waits_map_fd)
{
	procs_fd = procs_map_fd;
	stacks_fd = stacks_map_fd;
	waits_fd = waits_map_fd;
}

/* the CPython minor version a file's base name says (python3.N, libpython3.N.so...), or -1 */
static int minor_of(const char *path)
{
	const char *base = strrchr(path, '/');
	int minor;

	base = base ? base + 1 : path;
	if (sscanf(base, "python3.%d", &minor) == 1 || sscanf(base, "libpython3.%d", &minor) == 1)
		return minor;
	return -1;
}

static bool read_mem(const struct pyp *p, __u64 addr, void *buf, size_t n);

/* 3.13 keeps its own layout at the start of _PyRuntime (_Py_DebugOffsets,
 * for out-of-process debuggers and profilers): where it says otherwise than
 * the table (another 3.13 build), it is used. Its layout (3.13.0's) as
 * offsets into it; 3.14 moved these. False while the interpreter is not
 * initialized (no main interpreter yet) */
static bool debug_layout(struct pyp *p, __u64 runtime)
{
	__u64 d[73], interp = 0;          /* struct _Py_DebugOffsets: 584 bytes */
	struct py_layout *l = &p->own;

	if (!read_mem(p, runtime, d, sizeof(d)) || memcmp(d, "xdebugpy", 8) || (d[1] >> 16) != 0x030d)
		return true;                  /* no debug offsets of 3.13's layout: the table's */
	if (!read_mem(p, runtime + d[5], &interp, sizeof(interp)) || !interp)
		return false;                 /* runtime_state.interpreters_head */
	p->gil = interp + d[15];          /* interpreter_state.gil_runtime_state */
	l->last_holder_off = d[18] - d[15];   /* .gil_runtime_state_holder, from the GIL */
	l->tid_off = d[25];               /* thread_state.native_thread_id */
	l->frame_off = d[23];             /* .current_frame */
	l->cframe_off = PY_NO_CFRAME;
	l->prev_off = d[29];              /* interpreter_frame.previous */
	l->code_off = d[30];              /* .executable */
	l->owner_off = d[33];             /* .owner */
	l->filename_off = d[35];          /* code_object.filename */
	l->qualname_off = d[37];          /* .qualname */
	l->firstlineno_off = d[39];       /* .firstlineno */
	l->ascii_size = d[70];            /* unicode_object.asciiobject_size */
	p->debug_offsets = true;
	return true;
}

/* look for the interpreter in a process's mappings: the first python3.N or
 * libpython3.N file mapped at offset 0 that defines _PyRuntime */
static void find_interpreter(struct pyp *p)
{
	char path[64], line[PATH_MAX + 128];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/maps", p->tgid);
	if (!(f = fopen(path, "re")))
		return;
	while (fgets(line, sizeof(line), f)) {
		static const char *const want[] = { "_PyRuntime", "PyCode_Type" };
		unsigned long long lo, off;
		__u64 sym[2], runtime, code_type;
		char *name = strchr(line, '/'), *nl;
		struct elf_base eb;
		int minor;

		if (!name || sscanf(line, "%llx-%*x %*s %llx", &lo, &off) != 2 || off != 0)
			continue;
		if ((nl = strchr(name, '\n')))
			*nl = '\0';
		if ((minor = minor_of(name)) < 0 || !elf_symbol_values(name, want, 2, sym, &eb) || !sym[0])
			continue;
		for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
			if (layouts[i].minor == minor)
				p->own = layouts[i], p->lay = &p->own;
		if (!p->lay) {
			snprintf(p->file, sizeof(p->file), "%s", name);
			snprintf(p->reason, sizeof(p->reason), "CPython 3.%d: no frame layout known (3.9 to 3.13 are)",
				 minor);
			break;
		}
		runtime = elf_address(&eb, sym[0], lo);
		code_type = sym[1] ? elf_address(&eb, sym[1], lo) : 0;
		p->code_type = code_type;
		snprintf(path, sizeof(path), "/proc/%u/mem", p->tgid);
		if (p->mem < 0)
			p->mem = open(path, O_RDONLY | O_CLOEXEC);
		p->gil = runtime + p->own.gil_off;
		if (minor >= 13 && !debug_layout(p, runtime))
			break;            /* not initialized yet: looked at again next tick */
		snprintf(p->file, sizeof(p->file), "%s", name);
		{
			const struct py_layout *l = p->lay;
			struct py_proc pp = {
				.gil_lo = p->gil, .gil_hi = p->gil + l->gil_size, .last_holder = p->gil + l->last_holder_off,
				.tid_off = l->tid_off, .frame_off = l->frame_off, .cframe_off = l->cframe_off,
				.code_off = l->code_off, .prev_off = l->prev_off, .owner_off = l->owner_off,
				.flags = l->flags,
			};

			if (p->mem < 0)
				snprintf(p->reason, sizeof(p->reason), "%s: %s", path, strerror(errno));
			else if (bpf_map_update_elem(procs_fd, &p->tgid, &pp, BPF_ANY))
				snprintf(p->reason, sizeof(p->reason), "py_procs map: %s", strerror(errno));
		}
		break;
	}
	fclose(f);
}

/* which image a process runs: its auxiliary vector's AT_RANDOM (the address
 * of 16 random bytes on the stack exec made), new at each exec even of the
 * same file; 0 where not readable. A command lockscope starts is tracked
 * while it waits to exec, still a copy of lockscope's own interpreter: its
 * _PyRuntime read then is not the program's (a CI run named the GIL's
 * waits "futex @ [unknown] (unmapped)") */
static __u64 exec_id(__u32 tgid)
{
	__u64 auxv[2 * 64];
	char path[32];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/auxv", tgid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, auxv, sizeof(auxv));
	close(fd);
	for (ssize_t i = 0; i + 1 < n / (ssize_t)sizeof(auxv[0]); i += 2)
		if (auxv[i] == 25)        /* AT_RANDOM */
			return auxv[i + 1];
	return 0;
}

/* a process read before its exec: forgotten, looked at again */
static void forget(int i)
{
	if (procs[i].mem >= 0)
		close(procs[i].mem);
	bpf_map_delete_elem(procs_fd, &procs[i].tgid);
	procs[i] = procs[--nprocs];
}

/* each tracked process whose executable is a python3.N (a symlink such as
 * python3 or a venv's resolves to it) not looked at yet: its interpreter. A
 * program that embeds libpython under another name is not looked at (one
 * readlink per process and tick; a fork storm's children cost no more) */
void pyframes_scan(int tracked_fd)
{
	__u32 tgid, *prev = NULL;

	if (procs_fd < 0)
		return;
	while (bpf_map_get_next_key(tracked_fd, prev, &tgid) == 0) {
		char link[32], exe[PATH_MAX];
		bool seen = false;
		ssize_t n;

		prev = &tgid;
		snprintf(link, sizeof(link), "/proc/%u/exe", tgid);
		n = readlink(link, exe, sizeof(exe) - 1);
		if (n <= 0)
			continue;
		exe[n] = '\0';
		if (minor_of(exe) < 0)
			continue;
		for (int i = 0; i < nprocs && !seen; i++)
			if (procs[i].tgid == tgid) {
				seen = procs[i].exec_id == exec_id(tgid);
				if (!seen)
					forget(i);
				break;
			}
		if (seen || nprocs >= MAX_PY_PROCS)
			continue;
		memset(&procs[nprocs], 0, sizeof(procs[0]));
		procs[nprocs].tgid = tgid;
		procs[nprocs].mem = -1;
		procs[nprocs].exec_id = exec_id(tgid);
		find_interpreter(&procs[nprocs]);
		if (procs[nprocs].file[0])     /* else not mapped or initialized yet: next tick */
			nprocs++;
		else if (procs[nprocs].mem >= 0)
			close(procs[nprocs].mem);
	}
}

static struct pyp *proc_of(__u32 tgid)
{
	for (int i = 0; i < nprocs; i++)
		if (procs[i].tgid == tgid && procs[i].lay)
			return &procs[i];
	return NULL;
}

static bool read_mem(const struct pyp *p, __u64 addr, void *buf, size_t n)
{
	return p->mem >= 0 && addr && pread(p->mem, buf, n, (off_t)addr) == (ssize_t)n;
}

/* a str object's text (compact ASCII or Latin-1), or false */
static bool read_str(const struct pyp *p, __u64 obj, char *out, size_t size)
{
	unsigned char raw[NAME_LEN];
	__u64 len;
	__u32 state;
	size_t n, o = 0;

	if (!read_mem(p, obj + 16, &len, sizeof(len)) || !read_mem(p, obj + 32, &state, sizeof(state)) ||
	    !((state >> 5) & 1))                               /* not compact */
		return false;
	n = len < sizeof(raw) ? len : sizeof(raw);
	if ((state >> 6) & 1) {                                /* ASCII */
		if (!read_mem(p, obj + p->lay->ascii_size, raw, n))
			return false;
	} else if (((state >> 2) & 7) == 1) {                  /* Latin-1 */
		if (!read_mem(p, obj + p->lay->compact_size, raw, n))
			return false;
	} else {
		return false;
	}
	for (size_t i = 0; i < n && o + 3 < size; i++) {
		if (raw[i] < 0x80) {
			out[o++] = raw[i];
		} else {
			out[o++] = 0xc0 | raw[i] >> 6;
			out[o++] = 0x80 | (raw[i] & 0x3f);
		}
	}
	out[o] = '\0';
	return true;
}

/* the index in names of a code object's "qualname (file.py:first line)", or -1 (gone, not a code object) */
static int code_label(struct pyp *p, __u64 code)
{
	char qual[NAME_LEN * 2] = "?", file[NAME_LEN * 2] = "?";
	__u64 qp = 0, fp = 0, type = 0;
	long at = code ? index_find(&names_by_code, code, p->tgid) : -1;
	__s32 line = 0;
	const char *base;

	if (at >= 0)
		return (int)at;
	if (!read_mem(p, code + 8, &type, sizeof(type)) || (p->code_type && type != p->code_type))
		return -1;                                     /* gone, or not a code object */
	if (!read_mem(p, code + p->lay->qualname_off, &qp, sizeof(qp)) ||
	    !read_mem(p, code + p->lay->filename_off, &fp, sizeof(fp)) ||
	    !read_mem(p, code + p->lay->firstlineno_off, &line, sizeof(line)))
		return -1;
	read_str(p, qp, qual, sizeof(qual));
	read_str(p, fp, file, sizeof(file));
	base = strrchr(file, '/');
	if (!GROW(names, cnames, nnames, 256))
		return -1;
	if (!index_put(&names_by_code, code, p->tgid, nnames))
		return -1;
	names[nnames].tgid = p->tgid;
	names[nnames].code = code;
	snprintf(names[nnames].label, LABEL_LEN, "%s (%s:%d)", qual, base ? base + 1 : file, line);
	return (int)nnames++;
}

/* read the names of the code objects of the stacks kept since the last call,
 * while their processes still run */
void pyframes_resolve(void)
{
	__u32 id, *prev = NULL;

	if (stacks_fd < 0 || !nprocs)
		return;
	while (bpf_map_get_next_key(stacks_fd, prev, &id) == 0) {
		long at = index_find(&rows_by_id, (__u64)id + 1, 0);
		struct stack_row *r = at >= 0 ? &rows[at] : NULL;
		struct pyp *p;

		prev = &id;
		if (r && r->resolved)
			continue;
		if (!r) {
			if (!GROW(rows, crows, nrows, 64))
				return;
			r = &rows[nrows];
			memset(r, 0, sizeof(*r));
			if (bpf_map_lookup_elem(stacks_fd, &id, &r->s) || !index_put(&rows_by_id, (__u64)id + 1, 0, nrows))
				continue;
			r->id = id;
			nrows++;
		}
		if (!(p = proc_of(r->s.tgid)))
			continue;
		for (__u32 i = 0; i < r->s.depth && i < PY_DEPTH; i++)
			r->labels[i] = code_label(p, r->s.code[i]);
		r->resolved = 1;
	}
}

void pyframes_clear(void)
{
	if (stacks_fd >= 0) {
		__u32 id;

		while (bpf_map_get_next_key(stacks_fd, NULL, &id) == 0)
			bpf_map_delete_elem(stacks_fd, &id);
	}
	if (waits_fd >= 0) {
		struct py_wait_key k;

		while (bpf_map_get_next_key(waits_fd, NULL, &k) == 0)
			bpf_map_delete_elem(waits_fd, &k);
	}
	nrows = 0;
	index_free(&rows_by_id);
}

/* a Python stack's frames, innermost first ("?": not read) */
static void py_frames_json(struct jw *w, const struct stack_row *r)
{
	jw_arr(w);
	for (__u32 k = 0; k < r->s.depth && k < PY_DEPTH; k++)
		jw_utf8(w, r->resolved && r->labels[k] >= 0 ? names[r->labels[k]].label : "?");
	jw_arr_end(w);
}

/* "3.N": the version of a process's layout */
static const char *py_version(const struct pyp *p)
{
	static char v[16];

	snprintf(v, sizeof(v), "3.%d", p->lay->minor);
	return v;
}

void pyframes_json(struct jw *w)
{
	jw_key(w, "python_processes");
	jw_arr(w);
	for (int i = 0; i < nprocs; i++)
		EMIT_ROW_PYTHON_PROCESSES(w, &procs[i]);
	jw_arr_end(w);
	jw_key(w, "py_stacks");
	jw_arr(w);
	for (size_t i = 0; i < nrows; i++)
		EMIT_ROW_PY_STACKS(w, &rows[i]);
	jw_arr_end(w);
	/* the GIL's waits by the waiter's Python stack */
	jw_key(w, "py_waits");
	jw_arr(w);
	if (waits_fd >= 0) {
		struct py_wait_row r;
		struct py_wait_key *prev = NULL;

		while (bpf_map_get_next_key(waits_fd, prev, &r.k) == 0) {
			prev = &r.k;
			if (bpf_map_lookup_elem(waits_fd, &r.k, &r.s))
				continue;
			EMIT_ROW_PY_WAITS(w, &r);
		}
	}
	jw_arr_end(w);
}

void pyframes_destroy(void)
{
	for (int i = 0; i < nprocs; i++)
		if (procs[i].mem >= 0)
			close(procs[i].mem);
	nprocs = 0;
	free(names);
	free(rows);
	index_free(&rows_by_id);
	index_free(&names_by_code);
	names = NULL;
	rows = NULL;
	nnames = cnames = nrows = crows = 0;
	procs_fd = stacks_fd = waits_fd = -1;
}
