// SPDX-License-Identifier: MIT
/* Loader side of gomutex.bpf.c: find the Go executables of the tracked
 * processes (their exec may come after `track`, so every tick looks again),
 * read their ELF symbol table (.symtab: `go build` keeps it unless built with
 * -ldflags=-s; a stripped Go binary is listed as skipped, with the reason),
 * attach the entry uprobes once per executable, and collect the waits. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "cost.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "grow.h"
#include "gomutex.h"
#include "gomutex.skel.h"

#define MAX_GO_PROCS 256
#define MAX_GO_EXES 32

/* the runtime functions probed, and the program each gets (NULL: runtime.gopark
 * only tells a Go executable, it is not probed: it runs inside runtime locks) */
enum { SYM_GOPARK, SYM_READY, SYM_MUTEX, SYM_MUTEX_OLD, SYM_RWR, SYM_RWW, SYM_SEMACQ1, SYM_NLWAIT, NSYMS };
static const char *const sym_names[NSYMS] = {
	"runtime.gopark", "runtime.readyWithTime",
	"internal/sync.runtime_SemacquireMutex",    /* Go >= 1.24 */
	"sync.runtime_SemacquireMutex",             /* before */
	"sync.runtime_SemacquireRWMutexR", "sync.runtime_SemacquireRWMutex",
	"runtime.semacquire1", "sync.runtime_notifyListWait",
};

struct go_exe {
	dev_t dev;
	ino_t ino;
	char path[PATH_MAX];
	bool pie;
	uint64_t addr[NSYMS], off[NSYMS];   /* vaddr, file offset */
	struct bpf_link *links[NSYMS];
	char reason[128];                                  /* why not attached, or "" */
};

struct go_pid {
	uint32_t tgid;
	dev_t dev;
	ino_t ino;
	int exe;          /* index in exes, -1: not a Go executable */
	uint64_t bias;
	unsigned int gen; /* the last scan that found it tracked */
};

static struct gomutex_bpf *gskel;
static int load_err = -ENOENT;
static int nc;
static struct go_exe exes[MAX_GO_EXES];
static int nexes;
static struct go_pid pids[MAX_GO_PROCS];
static int npids;
static unsigned int scan_gen;

struct gentry {
	struct go_key key;
	struct wait_stat s;
};
struct gentries {
	struct gentry *v;
	size_t n, cap;
};
/* the waits, and the same waits by releaser */
static struct gentries waits, releases;

int gomutex_load(int ncpus)
{
	int err;

	nc = ncpus;
	gskel = gomutex_bpf__open();
	if (!gskel)
		return load_err = -errno;
	err = gomutex_bpf__load(gskel);
	if (err) {
		if (gskel)
		cost_unregister(gskel->obj);
	gomutex_bpf__destroy(gskel);
		gskel = NULL;
	} else {
		cost_register(gskel->obj);
	}
	return load_err = err;
}

/* the symbols of sym_names in the ELF file's .symtab, and whether it is Go
 * (a .go.buildinfo section or runtime.gopark); false if it is not Go */
static bool read_go_symbols(struct go_exe *x)
{
	int fd = open(x->path, O_RDONLY | O_CLOEXEC);
	bool go = false, symtab = false;
	Elf_Scn *scn = NULL;
	GElf_Ehdr eh;
	size_t shstrndx;
	Elf *e;

	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (!e || !gelf_getehdr(e, &eh) || elf_getshdrstrndx(e, &shstrndx)) {
		if (e)
			elf_end(e);
		close(fd);
		return false;
	}
	x->pie = eh.e_type == ET_DYN;
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		const char *name;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh))
			continue;
		name = elf_strptr(e, shstrndx, sh.sh_name);
		if (name && (!strcmp(name, ".go.buildinfo") || !strcmp(name, ".gopclntab")))
			go = true;
		if (sh.sh_type != SHT_SYMTAB || !(d = elf_getdata(scn, NULL)))
			continue;
		symtab = true;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym s;
			const char *sn;

			if (!gelf_getsym(d, (int)i, &s) || !(sn = elf_strptr(e, sh.sh_link, s.st_name)))
				continue;
			for (int k = 0; k < NSYMS; k++)
				if (!x->addr[k] && !strcmp(sn, sym_names[k]))
					x->addr[k] = s.st_value;
		}
	}
	/* file offsets of the functions: through their loadable segment */
	for (size_t i = 0, n = 0; !elf_getphdrnum(e, &n) && i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(e, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		for (int k = 0; k < NSYMS; k++)
			if (x->addr[k] >= ph.p_vaddr && x->addr[k] < ph.p_vaddr + ph.p_filesz)
				x->off[k] = x->addr[k] - ph.p_vaddr + ph.p_offset;
	}
	elf_end(e);
	close(fd);
	if (go && !symtab)
		snprintf(x->reason, sizeof(x->reason), "a Go executable without a symbol table (stripped): "
			 ".gopclntab alone is not read");
	else if (go && (!x->off[SYM_SEMACQ1] || !x->off[SYM_READY]))
		snprintf(x->reason, sizeof(x->reason), "a Go runtime without runtime.semacquire1 or readyWithTime "
			 "(a Go version not supported)");
	return go || x->addr[SYM_GOPARK];
}

static void attach_exe(struct go_exe *x)
{
	struct bpf_program *progs[NSYMS] = {
		[SYM_READY] = gskel->progs.lksc_go_ready,
		[SYM_SEMACQ1] = gskel->progs.lksc_go_semacquire1,
		[SYM_NLWAIT] = gskel->progs.lksc_go_notifylist_wait,
		[SYM_MUTEX] = gskel->progs.lksc_go_semacquire_mutex,
		[SYM_MUTEX_OLD] = gskel->progs.lksc_go_semacquire_mutex,
		[SYM_RWR] = gskel->progs.lksc_go_semacquire_rwmutex_r,
		[SYM_RWW] = gskel->progs.lksc_go_semacquire_rwmutex_w,
	};

	if (x->reason[0])
		return;
	for (int k = 0; k < NSYMS; k++) {
		if (!progs[k] || !x->off[k])
			continue;     /* a function the program does not use is not linked in */
		/* every process of the executable: the program filters by go_procs */
		x->links[k] = bpf_program__attach_uprobe(progs[k], false, -1, x->path, x->off[k]);
		if (!x->links[k]) {
			snprintf(x->reason, sizeof(x->reason), "uprobe on %s: %s", sym_names[k], strerror(errno));
			return;
		}
	}
}

/* the address the executable is loaded at, minus its link address: 0 for a
 * fixed-address (ET_EXEC) Go binary, else the start of its offset-0 mapping */
static uint64_t load_bias(uint32_t tgid, const struct go_exe *x)
{
	char path[64], line[PATH_MAX + 128];
	unsigned long long lo = 0, off;
	uint64_t bias = 0;
	FILE *f;

	if (!x->pie)
		return 0;
	snprintf(path, sizeof(path), "/proc/%u/maps", tgid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *name = strchr(line, '/');

		if (name && sscanf(line, "%llx-%*x %*s %llx", &lo, &off) == 2 && off == 0 &&
		    !strncmp(name, x->path, strlen(x->path))) {
			bias = lo;
			break;
		}
	}
	fclose(f);
	return bias;
}

static int exe_of(const char *path, const struct stat *st)
{
	for (int i = 0; i < nexes; i++)
		if (exes[i].dev == st->st_dev && exes[i].ino == st->st_ino)
			return i;
	if (nexes >= MAX_GO_EXES)
		return -1;
	memset(&exes[nexes], 0, sizeof(exes[0]));
	exes[nexes].dev = st->st_dev;
	exes[nexes].ino = st->st_ino;
	snprintf(exes[nexes].path, sizeof(exes[nexes].path), "%s", path);
	if (!read_go_symbols(&exes[nexes]))
		return -1;    /* not Go: not kept (looked at again for another process) */
	attach_exe(&exes[nexes]);
	return nexes++;
}

static void scan_one(uint32_t tgid)
{
	char link[64], path[PATH_MAX];
	struct go_pid *p = NULL;
	struct stat st;
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%u/exe", tgid);
	if (stat(link, &st))
		return;
	for (int i = 0; i < npids; i++)
		if (pids[i].tgid == tgid)
			p = &pids[i];
	if (p && p->dev == st.st_dev && p->ino == st.st_ino) {
		p->gen = scan_gen;
		return;                   /* seen, and it has not exec'd since */
	}
	if (!p) {
		if (npids >= MAX_GO_PROCS)
			return;
		p = &pids[npids++];
	}
	p->gen = scan_gen;
	p->tgid = tgid;
	p->dev = st.st_dev;
	p->ino = st.st_ino;
	n = readlink(link, path, sizeof(path) - 1);
	path[n > 0 ? n : 0] = '\0';
	p->exe = n > 0 ? exe_of(path, &st) : -1;
	if (p->exe >= 0 && !exes[p->exe].reason[0]) {
		struct go_exe *x = &exes[p->exe];
		struct go_proc gp = { .bias = p->bias = load_bias(tgid, x) };

		bpf_map_update_elem(bpf_map__fd(gskel->maps.go_procs), &tgid, &gp, BPF_ANY);
	} else {
		bpf_map_delete_elem(bpf_map__fd(gskel->maps.go_procs), &tgid);
	}
}

void gomutex_scan(int tracked_fd)
{
	__u32 tgid, *prev = NULL;

	if (!gskel)
		return;
	scan_gen++;
	while (bpf_map_get_next_key(tracked_fd, prev, &tgid) == 0) {
		prev = &tgid;
		scan_one(tgid);
	}
	/* a process gone (or no longer tracked) that was not a Go program is
	 * forgotten; a Go program's entry stays, its waits are symbolized with
	 * it. Kept, every process a server forked for each connection grew the
	 * list that each scan (4 a second) walks for each tracked process: the
	 * loader's CPU on Exim rose from 12 to 52 ms a second over 4 s. */
	int kept = 0;

	for (int i = 0; i < npids; i++)
		if (pids[i].exe >= 0 || pids[i].gen == scan_gen)
			pids[kept++] = pids[i];
	npids = kept;
}

void gomutex_start(void)
{
	if (!gskel)
		return;
	gskel->bss->enabled = false;
	clear_map(gskel->maps.go_notes);
	clear_map(gskel->maps.go_stats);
	clear_map(gskel->maps.go_releases);
	clear_map(gskel->maps.go_stacks);
	waits.n = releases.n = 0;
	gskel->bss->enabled = true;
}

static void add_stat(const void *key, const struct wait_stat *s, void *ctx)
{
	struct gentries *set = ctx;

	if (!GROW(set->v, set->cap, set->n, 256))
		return;
	memcpy(&set->v[set->n].key, key, sizeof(struct go_key));
	set->v[set->n++].s = *s;
}

void gomutex_stop(void)
{
	if (!gskel)
		return;
	gskel->bss->enabled = false;
	waits.n = releases.n = 0;
	for_each_wait(bpf_map__fd(gskel->maps.go_stats), nc, add_stat, &waits);
	for_each_wait(bpf_map__fd(gskel->maps.go_releases), nc, add_stat, &releases);
}

/* "name": [{tgid, sema, via, stack, ret, count, total_ns, max_ns}, ...];
 * their stacks join ids */
static void emit_entries(struct jw *w, const char *name, const struct gentries *set, struct id_set *ids)
{
	static const char *const kinds[] = { "sync.Mutex", "sync.RWMutex.RLock", "sync.RWMutex.Lock" };

	jw_key(w, name);
	jw_arr(w);
	for (size_t i = 0; i < set->n; i++) {
		EMIT_ROW_GO_WAITS(w, &set->v[i]);       /* go_releases' rows are the same */
		id_set_add(ids, set->v[i].key.stack_id);
	}
	jw_arr_end(w);
}

void gomutex_json(struct jw *w)
{
	struct id_set ids = {};

	jw_key(w, "go_probe");
	jw_obj(w);
	jw_kbool(w, "attached", gskel != NULL);
	if (!gskel) {
		char msg[160];

		jw_kstr(w, "reason", not_loaded(msg, sizeof(msg), "Go mutex probe (uprobes)", load_err));
	}
	jw_key(w, "executables");
	jw_arr(w);
	for (int i = 0; i < nexes; i++)
		EMIT_ROW_GO_PROBE_EXECUTABLES(w, &exes[i]);
	jw_arr_end(w);
	jw_key(w, "processes");
	jw_arr(w);
	for (int i = 0; i < npids; i++)
		if (pids[i].exe >= 0)
			EMIT_ROW_GO_PROBE_PROCESSES(w, &pids[i]);
	jw_arr_end(w);
	jw_obj_end(w);
	if (!gskel)
		return;
	emit_entries(w, "go_mutex", &waits, &ids);
	emit_entries(w, "go_releases", &releases, &ids);
	emit_stacks(w, "go_stacks", bpf_map__fd(gskel->maps.go_stacks), &ids, MAX_STACK_DEPTH, true);
	free(ids.ids);
}

void gomutex_destroy(void)
{
	for (int i = 0; i < nexes; i++)
		for (int k = 0; k < NSYMS; k++)
			bpf_link__destroy(exes[i].links[k]);
	nexes = npids = 0;
	gomutex_bpf__destroy(gskel);
	gskel = NULL;
	free(waits.v);
	free(releases.v);
	waits = releases = (struct gentries){ 0 };
}
