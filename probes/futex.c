// SPDX-License-Identifier: MIT
/* Loader side of the futex waits (contention.bpf.c's sched_switch program,
 * futexwaits.bpf.h, with --futex): clear at start, collect the
 * aggregates (plus the waits open at stop), the user stacks they reference,
 * and the memory maps of the processes, read while they are alive, so that
 * futex addresses and stack addresses can be resolved to files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "grow.h"
#include "futex.h"
#include "contention.skel.h"

#define MAX_PROCS 256

static const char *fcounter_names[FCNT__MAX] = { FUTEX_COUNTERS(COUNTER_NAME) };

/* contention.bpf.c's skeleton, whose sched_switch program has the futex
 * part (futexwaits.bpf.h) when loaded with --futex; NULL without */
static struct contention_bpf *fskel;
static int nc;

struct fentry {
	struct ufutex_key key;
	struct wait_stat s;
};
static struct fentry *entries;
static size_t nentries;
static uint64_t open_at_stop;

/* memory maps of the processes seen, kept across exits */
struct proc_maps {
	uint32_t tgid;
	char *text;     /* /proc/PID/maps */
};
static struct proc_maps procs[MAX_PROCS];
static int nprocs;

void futex_init(struct contention_bpf *cskel, int ncpus)
{
	nc = ncpus;
	fskel = cskel;
}

void futex_start(void)
{
	if (!fskel)
		return;
	clear_map(fskel->maps.futex_open);
	clear_map(fskel->maps.futex_stats);
	clear_map(fskel->maps.user_stacks);
	clear_map(fskel->maps.user_stack_copies);
	clear_map(fskel->maps.futex_seen);
	counters_zero(fskel->maps.futex_counters, FCNT__MAX, nc);
	free(entries);
	entries = NULL;
	nentries = 0;
	open_at_stop = 0;
	for (int i = 0; i < nprocs; i++)
		free(procs[i].text);
	nprocs = 0;
}

static struct fentry *find_or_add(const struct ufutex_key *k, size_t *cap)
{
	for (size_t i = 0; i < nentries; i++)
		if (memcmp(&entries[i].key, k, sizeof(*k)) == 0)
			return &entries[i];
	if (!GROW(entries, *cap, nentries, 256))
		return NULL;
	memset(&entries[nentries], 0, sizeof(entries[0]));
	entries[nentries].key = *k;
	return &entries[nentries++];
}

static void read_maps(uint32_t tgid)
{
	char path[64], line[4096];
	size_t len = 0, cap = 0;
	char *text = NULL;
	FILE *f;
	int slot = -1;

	for (int i = 0; i < nprocs; i++)
		if (procs[i].tgid == tgid)
			slot = i;
	if (slot < 0 && nprocs >= MAX_PROCS)
		return;
	snprintf(path, sizeof(path), "/proc/%u/maps", tgid);
	f = fopen(path, "re");
	if (!f)
		return;              /* gone: keep what an earlier snapshot read */
	while (fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);

		if (!GROW_TO(text, cap, len + n + 1, 8192))
			break;
		memcpy(text + len, line, n + 1);
		len += n;
	}
	fclose(f);
	if (!text)
		return;
	if (slot < 0) {
		slot = nprocs++;
		procs[slot].tgid = tgid;
	} else {
		free(procs[slot].text);
	}
	procs[slot].text = text;
}

static void note_tgid(uint32_t tgid, uint32_t *seen, int *nseen)
{
	for (int i = 0; i < *nseen; i++)
		if (seen[i] == tgid)
			return;
	if (*nseen < MAX_PROCS)
		seen[(*nseen)++] = tgid;
}

void futex_read_maps(uint32_t tgid)
{
	if (fskel)
		read_maps(tgid);
}

void futex_snapshot_maps(void)
{
	uint32_t seen[MAX_PROCS];
	int nseen = 0;
	struct ufutex_key k, *prev = NULL;
	__u32 tid, *tprev = NULL;
	struct ufutex_open o;
	int fd;

	if (!fskel)
		return;
	fd = bpf_map__fd(fskel->maps.futex_stats);
	while (bpf_map_get_next_key(fd, prev, &k) == 0) {
		prev = &k;
		note_tgid(k.tgid, seen, &nseen);
	}
	fd = bpf_map__fd(fskel->maps.futex_open);
	while (bpf_map_get_next_key(fd, tprev, &tid) == 0) {
		tprev = &tid;
		if (bpf_map_lookup_elem(fd, &tid, &o) == 0)
			note_tgid(o.tgid, seen, &nseen);
	}
	for (int i = 0; i < nseen; i++)
		read_maps(seen[i]);
}

static void add_stat(const void *key, const struct wait_stat *s, void *cap)
{
	struct fentry *e = find_or_add(key, cap);

	if (e)
		wait_stat_add(&e->s, s);
}

/* waits open at stop (a thread blocked through the window): counted up to
 * the stop time; bpf_ktime_get_ns is CLOCK_MONOTONIC */
static void add_open_waits(uint64_t t_stop, size_t *cap)
{
	int fd = bpf_map__fd(fskel->maps.futex_open);
	__u32 tid, *tprev = NULL;
	struct ufutex_open o;
	uint64_t now = now_ns();

	if (t_stop > now)
		t_stop = now;
	while (bpf_map_get_next_key(fd, tprev, &tid) == 0) {
		struct ufutex_key ok = {};
		struct wait_stat one;
		struct fentry *e;

		tprev = &tid;
		if (bpf_map_lookup_elem(fd, &tid, &o) || !o.start || o.start >= t_stop)
			continue;     /* start 0: the thread's last wait closed */
		ok.tgid = o.tgid;
		ok.op = o.op;
		ok.uaddr = o.uaddr;
		ok.stack_id = o.stack_id;
		ok.tid = tid;
		ok.sample = o.sample;
		ok.in_wait = o.in_wait;
		e = find_or_add(&ok, cap);
		if (!e)
			break;
		one.count = 1;
		one.total_ns = one.max_ns = t_stop - o.start;
		wait_stat_add(&e->s, &one);
		open_at_stop++;
	}
}

void futex_stop(uint64_t t_stop)
{
	size_t cap = 0;

	if (!fskel)
		return;
	futex_snapshot_maps();
	for_each_wait(bpf_map__fd(fskel->maps.futex_stats), nc, add_stat, &cap);
	add_open_waits(t_stop, &cap);
}

static void emit_maps_text(struct jw *w, const char *text)
{
	const char *p = text;

	jw_arr(w);
	while (p && *p) {
		unsigned long long lo, hi, off;
		char perms[8], dev[16], name[4096];
		unsigned long inode;
		const char *nl = strchr(p, '\n');
		char line[4352];
		size_t n = nl ? (size_t)(nl - p) : strlen(p);

		if (n >= sizeof(line))
			n = sizeof(line) - 1;
		memcpy(line, p, n);
		line[n] = '\0';
		p = nl ? nl + 1 : NULL;
		name[0] = '\0';
		if (sscanf(line, "%llx-%llx %7s %llx %15s %lu %4095[^\n]", &lo, &hi, perms, &off, dev,
			   &inode, name) < 6)
			continue;
		jw_arr(w);
		jw_hex(w, lo);
		jw_hex(w, hi);
		jw_string(w, perms);
		jw_hex(w, off);
		{
			char *s = name;

			while (*s == ' ')
				s++;
			jw_string(w, s);
		}
		jw_arr_end(w);
	}
	jw_arr_end(w);
}

/* a row of "user_stack_copies": the futex key of the walked wait it was
 * copied at, and the copy */
struct futex_copy_row {
	const struct ufutex_key *k;
	const struct ustack_copy *c;
};

static void copy_row(struct jw *w, const void *key, const struct ustack_copy *c)
{
	struct futex_copy_row r = { .k = key, .c = c };

	EMIT_ROW_USER_STACK_COPIES(w, &r);
}

void futex_json(struct jw *w)
{
	struct id_set ids = {};
	char id[16];

	jw_key(w, "futex_probe");
	jw_obj(w);
	jw_kbool(w, "attached", fskel != NULL);
	if (!fskel)
		jw_kstr(w, "reason", "futex waits were not asked for (lockscope-probe --futex)");
	jw_ku64(w, "open_at_stop", open_at_stop);
	jw_obj_end(w);
	if (!fskel)
		return;

	jw_key(w, "futex");
	jw_arr(w);
	for (size_t i = 0; i < nentries; i++)
		EMIT_ROW_FUTEX(w, &entries[i]);
	jw_arr_end(w);

	for (size_t i = 0; i < nentries; i++)
		id_set_add(&ids, entries[i].key.stack_id);
	emit_stacks(w, "user_stacks", bpf_map__fd(fskel->maps.user_stacks), &ids, MAX_STACK_DEPTH, true);
	free(ids.ids);
	emit_ustack_copies(w, "user_stack_copies", bpf_map__fd(fskel->maps.user_stack_copies),
			   sizeof(struct ufutex_key), copy_row);

	jw_key(w, "user_maps");
	jw_obj(w);
	for (int i = 0; i < nprocs; i++) {
		snprintf(id, sizeof(id), "%u", procs[i].tgid);
		jw_key(w, id);
		emit_maps_text(w, procs[i].text);
	}
	jw_obj_end(w);
}

void futex_counters_json(struct jw *w)
{
	__u64 sums[FCNT__MAX];

	if (!fskel)
		return;
	counters_read(fskel->maps.futex_counters, FCNT__MAX, nc, sums);
	for (__u32 i = 0; i < FCNT__MAX; i++)
		jw_ku64(w, fcounter_names[i], sums[i] + (i == FCNT_WAITS ? open_at_stop : 0));
}

void futex_destroy(void)
{
	fskel = NULL;              /* contention.bpf.c's: destroyed with it */
	free(entries);
	entries = NULL;
	for (int i = 0; i < nprocs; i++)
		free(procs[i].text);
	nprocs = 0;
}

bool futex_attached(void)
{
	return fskel != NULL;
}

int futex_open_fd(void)
{
	return fskel ? bpf_map__fd(fskel->maps.futex_open) : -1;
}

void futex_map_use_json(struct jw *w)
{
	if (fskel)
		emit_map_use(w, "futex_stats", fskel->maps.futex_stats, nentries);
}
