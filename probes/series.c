// SPDX-License-Identifier: MIT
/* The time series of a run: while counting, every --series-ms the cumulative
 * wait per lock address (the heaviest SERIES_MAX_LOCKS; a file lock's by its
 * file's inode address, filelocks.c) and the off-CPU time
 * outside lock waits per task state are kept in memory, and emitted with the
 * "data" event ("series"), so that bursts within a run are not averaged
 * away. Nothing is written during the window. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>
#include "probe.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "grow.h"
#include "series.h"
#include "filelocks.h"

#define SERIES_MAX_SNAPS 4096
#define SERIES_MAX_LOCKS 128
#define SERIES_MAX_STATES 16

struct series_val {
	__u64 key;            /* lock address, or task state */
	__u64 total_ns;
};

struct series_snap {
	__u64 t_ns;           /* since start */
	__u32 nlocks, nstates;
	struct series_val *locks;
	struct series_val states[SERIES_MAX_STATES];
};

struct lock_vals {
	struct series_val *arr;
	size_t n, cap;
	bool failed;
};

static struct series_snap *series;
static size_t nseries;
static bool series_truncated;

static int cmp_key(const void *a, const void *b)
{
	const struct series_val *x = a, *y = b;

	return x->key < y->key ? -1 : x->key > y->key;
}

static int cmp_total_desc(const void *a, const void *b)
{
	const struct series_val *x = a, *y = b;

	return x->total_ns > y->total_ns ? -1 : x->total_ns < y->total_ns;
}

void series_reset(void)
{
	for (size_t i = 0; i < nseries; i++)
		free(series[i].locks);
	nseries = 0;
	series_truncated = false;
}

static void add_val(__u64 key, __u64 total_ns, void *ctx)
{
	struct lock_vals *v = ctx;

	if (v->failed)
		return;
	if (!GROW(v->arr, v->cap, v->n, 256)) {
		v->failed = true;
		return;
	}
	v->arr[v->n].key = key;
	v->arr[v->n++].total_ns = total_ns;
}

static void add_lock(const void *key, const struct wait_stat *s, void *ctx)
{
	add_val(((const struct lock_key *)key)->lock, s->total_ns, ctx);
}

/* one value per address (entries differ by flags and stack), heaviest
 * first; the number kept in the snapshot */
static __u32 per_address(struct series_val *arr, size_t n)
{
	size_t m = 0;

	if (n)
		qsort(arr, n, sizeof(*arr), cmp_key);
	for (size_t i = 0; i < n; i++) {
		if (m && arr[m - 1].key == arr[i].key)
			arr[m - 1].total_ns += arr[i].total_ns;
		else
			arr[m++] = arr[i];
	}
	if (m)
		qsort(arr, m, sizeof(*arr), cmp_total_desc);
	return m < SERIES_MAX_LOCKS ? m : SERIES_MAX_LOCKS;
}

static void add_state(const void *key, const struct wait_stat *s, void *ctx)
{
	const struct offcpu_key *k = key;
	struct series_snap *snap = ctx;
	__u32 j;

	if (k->in_lock_wait)
		return;
	for (j = 0; j < snap->nstates && snap->states[j].key != k->state; j++)
		;
	if (j == SERIES_MAX_STATES)
		return;
	if (j == snap->nstates) {
		snap->states[j].key = k->state;
		snap->nstates++;
	}
	snap->states[j].total_ns += s->total_ns;
}

void series_snapshot(int lock_stats_fd, int offcpu_stats_fd, int ncpus, uint64_t t_ns)
{
	struct lock_vals v = {};
	struct series_snap *snap;

	if (!series && !(series = calloc(SERIES_MAX_SNAPS, sizeof(*series))))
		return;
	if (nseries == SERIES_MAX_SNAPS) {
		series_truncated = true;
		return;
	}
	snap = &series[nseries];
	memset(snap, 0, sizeof(*snap));
	snap->t_ns = t_ns;
	/* the kernel's locks by address, file-lock waits by their file's inode */
	if (for_each_wait(lock_stats_fd, ncpus, add_lock, &v))
		v.failed = true;
	else
		filelocks_each_wait(add_val, &v);
	if (v.failed) {
		free(v.arr);
		return;
	}
	snap->nlocks = per_address(v.arr, v.n);
	snap->locks = v.arr;
	if (for_each_wait(offcpu_stats_fd, ncpus, add_state, snap) == 0)
		nseries++;
	else
		free(snap->locks);
}

/* [[key, ns], ...]: a snapshot's cumulative waits (its "locks" by address, its "offcpu" by state) */
static void emit_pairs(struct jw *w, const struct series_val *vals, __u32 n, bool hex_key)
{
	jw_arr(w);
	for (__u32 j = 0; j < n; j++) {
		jw_arr(w);
		if (hex_key)
			jw_hex(w, vals[j].key);
		else
			jw_u64(w, vals[j].key);
		jw_u64(w, vals[j].total_ns);
		jw_arr_end(w);
	}
	jw_arr_end(w);
}

void series_json(struct jw *w, long series_ms)
{
	jw_key(w, "series");
	jw_obj(w);
	jw_ku64(w, "interval_ns", (uint64_t)series_ms * 1000000ULL);
	jw_kbool(w, "truncated", series_truncated);
	jw_ku64(w, "max_locks", SERIES_MAX_LOCKS);
	jw_key(w, "snapshots");
	jw_arr(w);
	for (size_t i = 0; i < nseries; i++)
		EMIT_ROW_SERIES_SNAPSHOTS(w, &series[i]);
	jw_arr_end(w);
	jw_obj_end(w);
}
