// SPDX-License-Identifier: MIT
/* File-lock waits (filelocks.bpf.c): loaded with the optional probes,
 * counted from start to stop, the waits still open at stop added up to it. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "cost.h"
#include "grow.h"
#include "filelocks.h"
#include "futex.h"
#include "filelocks.skel.h"
#include "contention.skel.h"

static struct filelocks_bpf *skel;
static int load_err;
static struct contention_bpf *core;   /* its sqlite_sleeps, flk_copies, flk_sqlite */
static int nc;
static const char *const counter_names[] = { FLK_COUNTERS(COUNTER_NAME) };

struct flk_entry {
	struct flk_key k;
	struct flk_stat s;
};
static struct flk_entry *rows;
static size_t nrows, cap;
static __u64 counters[FLK__MAX];

/* the sleepers' stack copies read at stop, and the processes whose memory
 * maps were read for them (futex.c keeps the maps) */
struct flk_copy_row {
	const struct flk_copy_sig *k;
	const struct flk_copy *c;
};
static struct flk_copy_sig copy_sigs[FLK_COPIES];
static struct flk_copy copies[FLK_COPIES];
static int ncopies;
static __u32 maps_read[FLK_COPIES];
static int nmaps_read;

/* releases of files' locks while others waited, read at stop */
static struct flk_release_row releases[FLK_RELEASES];
static int nreleases;

int filelocks_load(bool system_wide, struct contention_bpf *cskel, int ncpus)
{
	int err;

	nc = ncpus;
	core = cskel;
	skel = filelocks_bpf__open();
	if (!skel) {
		load_err = -errno;
		return load_err;
	}
	skel->rodata->system_wide = system_wide;
	skel->rodata->self_tgid = (__u32)getpid();
	err = bpf_map__reuse_fd(skel->maps.tracked, bpf_map__fd(cskel->maps.tracked));
	if (!err)     /* the threads' SQLite files, for contention.bpf.c's sleeps */
		err = bpf_map__reuse_fd(skel->maps.flk_sqlite, bpf_map__fd(cskel->maps.flk_sqlite));
	if (!err)     /* one room for the sleepers' and the releasers' stack copies */
		err = bpf_map__reuse_fd(skel->maps.flk_copies, bpf_map__fd(cskel->maps.flk_copies));
	if (!err)     /* the waits in progress, which tasks.bpf.c's wake-ups charge to their releasers */
		err = bpf_map__reuse_fd(skel->maps.flk_open, bpf_map__fd(cskel->maps.flk_open));
	if (!err)
		err = filelocks_bpf__load(skel);
	if (!err)
		err = filelocks_bpf__attach(skel);
	if (err) {
		load_err = err;
		filelocks_bpf__destroy(skel);
		skel = NULL;
		return err;
	}
	cost_register(skel->obj);
	return 0;
}

void filelocks_start(void)
{
	if (!skel)
		return;
	skel->bss->enabled = false;
	clear_map(skel->maps.flk_open);
	clear_map(skel->maps.flk_stats);
	clear_map(skel->maps.flk_paths);
	clear_map(core->maps.flk_sqlite);
	clear_map(core->maps.flk_copies);
	clear_map(core->maps.sqlite_sleeps);
	clear_map(core->maps.sqlite_open);
	clear_map(skel->maps.flk_waiters);
	clear_map(skel->maps.flk_releases);
	nreleases = 0;
	ncopies = nmaps_read = 0;
	counters_zero(skel->maps.flk_counters, FLK__MAX, nc);
	nrows = 0;
	memset(counters, 0, sizeof(counters));
	skel->bss->enabled = true;
}

/* the row of key k, added if new (search: the stats map's keys are
 * distinct, only the few waits open at stop look theirs up); NULL: out of
 * memory */
static struct flk_entry *row_of(const struct flk_key *k, bool search)
{
	for (size_t i = 0; search && i < nrows; i++)
		if (!memcmp(&rows[i].k, k, sizeof(*k)))
			return &rows[i];
	if (!GROW(rows, cap, nrows, 64))
		return NULL;
	memset(&rows[nrows], 0, sizeof(rows[nrows]));
	rows[nrows].k = *k;
	return &rows[nrows++];
}

static bool has_tgid(const __u32 *tgids, int n, __u32 tgid)
{
	for (int i = 0; i < n; i++)
		if (tgids[i] == tgid)
			return true;
	return false;
}

/* the memory maps of the processes with stack copies (the copies are
 * unwound with them at record time): each new one while they run; at stop,
 * `again`, every one once more (libraries loaded since) */
static void read_copy_maps(bool again)
{
	struct flk_copy_sig k, *pk = NULL;
	int fd = bpf_map__fd(core->maps.flk_copies), nseen = 0;
	__u32 seen[FLK_COPIES];

	while (bpf_map_get_next_key(fd, pk, &k) == 0 && nseen < FLK_COPIES) {
		pk = &k;
		if (has_tgid(seen, nseen, k.tgid))
			continue;
		seen[nseen++] = k.tgid;
		if (!has_tgid(maps_read, nmaps_read, k.tgid))
			maps_read[nmaps_read++] = k.tgid;
		else if (!again)
			continue;
		futex_read_maps(k.tgid);
	}
}

/* the rows of a map of waits by flk_key (keys distinct across the maps) */
static void read_stats(int fd)
{
	struct flk_key k, *pk = NULL;

	while (bpf_map_get_next_key(fd, pk, &k) == 0) {
		struct flk_stat s;
		struct flk_entry *e;

		pk = &k;
		if (bpf_map_lookup_elem(fd, &k, &s) || !(e = row_of(&k, false)))
			continue;
		e->s = s;
	}
}

/* the waits of a map of open waits by thread (flk_open) still open at
 * t_stop: their time so far, one wait each */
static void add_open(int fd, uint64_t t_stop)
{
	__u32 tid, *pt = NULL;

	while (bpf_map_get_next_key(fd, pt, &tid) == 0) {
		struct flk_open o;
		struct flk_entry *e;
		__u64 ns;

		pt = &tid;
		if (bpf_map_lookup_elem(fd, &tid, &o) || o.start >= t_stop || !(e = row_of(&o.key, true)))
			continue;
		ns = t_stop - o.start;
		e->s.count++;
		e->s.total_ns += ns;
		if (ns > e->s.max_ns)
			e->s.max_ns = ns;
		if (!e->s.holder_comm[0])
			memcpy(e->s.holder_comm, o.holder_comm, sizeof(o.holder_comm));
	}
}

/* the releases with waiters (flk_releases) */
static void read_releases(int fd)
{
	struct flk_release_key k, *pk = NULL;

	nreleases = 0;
	while (nreleases < FLK_RELEASES && bpf_map_get_next_key(fd, pk, &k) == 0) {
		releases[nreleases].k = k;
		pk = &releases[nreleases].k;
		if (!bpf_map_lookup_elem(fd, &k, &releases[nreleases].count))
			nreleases++;
	}
}

/* the sleepers' and releasers' stack copies (flk_copies) */
static void read_copies(int fd)
{
	struct flk_copy_sig k, *pk = NULL;

	ncopies = 0;
	while (ncopies < FLK_COPIES && bpf_map_get_next_key(fd, pk, &k) == 0) {
		copy_sigs[ncopies] = k;
		pk = &copy_sigs[ncopies];
		if (!bpf_map_lookup_elem(fd, &k, &copies[ncopies]))
			ncopies++;
	}
}

void filelocks_stop(uint64_t t_stop)
{
	if (!skel)
		return;
	skel->bss->enabled = false;
	nrows = 0;
	read_stats(bpf_map__fd(skel->maps.flk_stats));
	/* and the sleeps of threads that take SQLite's locks (contention.bpf.c's) */
	read_stats(bpf_map__fd(core->maps.sqlite_sleeps));
	/* waits open at stop: their time so far, one wait each */
	add_open(bpf_map__fd(skel->maps.flk_open), t_stop);
	add_open(bpf_map__fd(core->maps.sqlite_open), t_stop);
	counters_read(skel->maps.flk_counters, FLK__MAX, nc, counters);
	read_releases(bpf_map__fd(skel->maps.flk_releases));
	/* the sleepers' and releasers' stack copies, and their processes' maps */
	read_copies(bpf_map__fd(core->maps.flk_copies));
	read_copy_maps(true);
}

void filelocks_snapshot_maps(void)
{
	if (skel)
		read_copy_maps(false);
}

static void each_wait_of(int fd, void (*fn)(__u64 key, __u64 total_ns, void *ctx), void *ctx)
{
	struct flk_key k, *pk = NULL;

	while (bpf_map_get_next_key(fd, pk, &k) == 0) {
		struct flk_stat s;

		pk = &k;
		if (!bpf_map_lookup_elem(fd, &k, &s))
			fn(k.inode, s.total_ns, ctx);
	}
}

/* SQLite's sleeps of threads of one process are in too: which of them are
 * its busy waits is decided at record time, so a thread that also sleeps
 * for its own reasons weighs more in the series than in the record */
void filelocks_each_wait(void (*fn)(__u64 key, __u64 total_ns, void *ctx), void *ctx)
{
	if (!skel)
		return;
	each_wait_of(bpf_map__fd(skel->maps.flk_stats), fn, ctx);
	each_wait_of(bpf_map__fd(core->maps.sqlite_sleeps), fn, ctx);
}

/* the inode's path below its file system's root as the BPF side read it
 * ("dir/file", ".../" first where it went on above the names kept), "" where
 * it read none */
static const char *fs_path(__u64 inode, char *out, size_t size)
{
	struct flk_path p;
	size_t n = 0;

	out[0] = '\0';
	if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.flk_paths), &inode, &p) || !p.depth ||
	    p.depth > FLK_PATH_DEPTH)
		return out;
	if (p.more)
		n += snprintf(out + n, size - n, ".../");
	for (int i = (int)p.depth - 1; i >= 0 && n < size; i--) {
		p.names[i][FLK_NAME_LEN - 1] = '\0';
		n += snprintf(out + n, size - n, "%s%s", p.names[i], i ? "/" : "");
	}
	return out;
}

void filelocks_json(struct jw *w)
{
	jw_key(w, "file_lock_probe");
	jw_obj(w);
	jw_kbool(w, "attached", skel != NULL);
	if (!skel) {
		char msg[160];

		jw_kstr(w, "reason", not_loaded(msg, sizeof(msg), "file-lock probe (filelock tracepoints)", load_err));
	} else {
		jw_key(w, "counters");
		jw_obj(w);
		for (__u32 i = 0; i < FLK__MAX; i++)
			jw_ku64(w, counter_names[i], counters[i]);
		jw_obj_end(w);
	}
	jw_obj_end(w);
	if (!skel)
		return;
	jw_key(w, "file_lock_waits");
	jw_arr(w);
	for (size_t i = 0; i < nrows; i++) {
		char path[FLK_PATH_DEPTH * (FLK_NAME_LEN + 1) + 8];
		struct flk_row r = { &rows[i].k, &rows[i].s, fs_path(rows[i].k.inode, path, sizeof(path)) };

		EMIT_ROW_FILE_LOCK_WAITS(w, &r);
	}
	jw_arr_end(w);
	jw_key(w, "file_lock_releases");
	jw_arr(w);
	for (int i = 0; i < nreleases; i++)
		EMIT_ROW_FILE_LOCK_RELEASES(w, &releases[i]);
	jw_arr_end(w);
	jw_key(w, "file_lock_stack_copies");
	jw_arr(w);
	for (int i = 0; i < ncopies; i++) {
		struct flk_copy_row r = { &copy_sigs[i], &copies[i] };

		EMIT_ROW_FILE_LOCK_STACK_COPIES(w, &r);
	}
	jw_arr_end(w);
}

void filelocks_destroy(void)
{
	filelocks_bpf__destroy(skel);
	skel = NULL;
	free(rows);
	rows = NULL;
	nrows = cap = 0;
}
