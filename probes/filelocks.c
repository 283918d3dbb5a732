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
#include "filelocks.skel.h"

static struct filelocks_bpf *skel;
static int load_err;
static int nc;
static const char *const counter_names[] = { FLK_COUNTERS(COUNTER_NAME) };

struct flk_entry {
	struct flk_key k;
	struct flk_stat s;
};
static struct flk_entry *rows;
static size_t nrows, cap;
static __u64 counters[FLK__MAX];

int filelocks_load(bool system_wide, int tracked_fd, int ncpus)
{
	int err;

	nc = ncpus;
	skel = filelocks_bpf__open();
	if (!skel) {
		load_err = -errno;
		return load_err;
	}
	skel->rodata->system_wide = system_wide;
	skel->rodata->self_tgid = (__u32)getpid();
	err = bpf_map__reuse_fd(skel->maps.tracked, tracked_fd);
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

void filelocks_stop(uint64_t t_stop)
{
	struct flk_key k, *pk = NULL;
	__u32 tid, *pt = NULL;
	int fd;

	if (!skel)
		return;
	skel->bss->enabled = false;
	nrows = 0;
	fd = bpf_map__fd(skel->maps.flk_stats);
	while (bpf_map_get_next_key(fd, pk, &k) == 0) {
		struct flk_stat s;
		struct flk_entry *e;

		pk = &k;
		if (bpf_map_lookup_elem(fd, &k, &s) || !(e = row_of(&k, false)))
			continue;
		e->s = s;
	}
	/* waits open at stop: their time so far, one wait each */
	fd = bpf_map__fd(skel->maps.flk_open);
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
	counters_read(skel->maps.flk_counters, FLK__MAX, nc, counters);
}

void filelocks_each_wait(void (*fn)(__u64 key, __u64 total_ns, void *ctx), void *ctx)
{
	struct flk_key k, *pk = NULL;
	int fd;

	if (!skel)
		return;
	fd = bpf_map__fd(skel->maps.flk_stats);
	while (bpf_map_get_next_key(fd, pk, &k) == 0) {
		struct flk_stat s;

		pk = &k;
		if (!bpf_map_lookup_elem(fd, &k, &s))
			fn(k.inode, s.total_ns, ctx);
	}
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
}

void filelocks_destroy(void)
{
	filelocks_bpf__destroy(skel);
	skel = NULL;
	free(rows);
	rows = NULL;
	nrows = cap = 0;
}
