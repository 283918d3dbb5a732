// SPDX-License-Identifier: MIT
/* Reading contention.bpf.c's maps at stop: lock waits (the aggregation map
 * merged with the finished waits the CPUs had not yet moved into it, and
 * the part of them spun inside futex syscalls, by futex word),
 * off-CPU time, CPU samples, the stacks they reference and the counters;
 * and the data event that carries them with the other probes' data (futex
 * waits, per-thread times and wake-ups, slab caches...). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "cost.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "grow.h"
#include "loader.h"
#include "objects.skel.h"
#include "layout.h"
#include "series.h"
#include "objects.h"
#include "futex.h"
#include "gomutex.h"
#include "tasks.h"
#include "kmem.h"
#include "ktext.h"
#include "usdt.h"
#include "filelocks.h"
#include "collect.h"
#include "contention.skel.h"

static const char *counter_names[CNT__MAX] = { CONTENTION_COUNTERS(COUNTER_NAME) };

/* stack ids referenced by the emitted entries, per stack map */
static struct id_set wait_stack_ids, sample_stack_ids, sample_user_stack_ids;
/* stacks of waits on static kernel locks: the kernel text around their calls is read (ktext.c) */
static struct id_set static_stack_ids;

struct lock_entry {
	struct lock_key key;
	struct wait_stat s;
};

struct lock_entries {
	struct lock_entry *arr;
	size_t n, cap;
};

void collect_clear(struct probe *p)
{
	struct cpu_state *zero = calloc(p->ncpus, sizeof(*zero));
	__u32 key = 0;

	clear_map(p->cskel->maps.stacked_locks);
	clear_map(p->cskel->maps.lock_stats);
	clear_map(p->cskel->maps.futex_lock_stats);
	clear_map(p->cskel->maps.offcpu_stats);
	clear_map(p->cskel->maps.cpu_samples);
	clear_map(p->cskel->maps.stacks);
	clear_map(p->cskel->maps.sample_stacks);
	clear_map(p->cskel->maps.sample_user_stacks);
	clear_map(p->cskel->maps.sample_copies);
	p->cskel->bss->sample_copies_taken = 0;
	clear_map(p->cskel->maps.waiters);
	clear_map(p->cskel->maps.owners);
	if (zero)
		bpf_map_update_elem(bpf_map__fd(p->cskel->maps.cpus), &key, zero, BPF_ANY);
	free(zero);
}

void collect_objects(struct probe *p)
{
	int err;

	p->oskel->bss->sbs_walked = false;    /* the mounted file systems, walked again */
	err = objects_snapshot(p->files_iter, p->tasks_iter, p->sbs_iter);
	if (err)
		emit_error("objects", err, "object iterator failed: %s", strerror(-err));
	kmem_resolve_map(bpf_map__fd(p->cskel->maps.lock_stats));
}

/* every CPU's state; the caller frees it */
static struct cpu_state *read_cpu_states(const struct probe *p)
{
	struct cpu_state *st = calloc(p->ncpus, sizeof(*st));
	__u32 key = 0;

	if (st && bpf_map_lookup_elem(bpf_map__fd(p->cskel->maps.cpus), &key, st)) {
		free(st);
		return NULL;
	}
	return st;
}

/* a new slot at the end of the array, or NULL */
static struct lock_entry *append_entry(struct lock_entries *e)
{
	if (!GROW(e->arr, e->cap, e->n, 1024))
		return NULL;
	return &e->arr[e->n++];
}

/* add a wait to the entry of its key, making one if needed */
static int merge_entry(struct lock_entries *e, const struct lock_key *k, const struct wait_stat *s)
{
	struct lock_entry *x;

	for (size_t i = 0; i < e->n; i++) {
		x = &e->arr[i];
		if (memcmp(&x->key, k, sizeof(*k)) == 0) {
			wait_stat_add(&x->s, s);
			return 0;
		}
	}
	x = append_entry(e);
	if (!x)
		return -ENOMEM;
	x->key = *k;
	x->s = *s;
	return 0;
}

/* map entries are distinct: append without searching */
static void add_map_entry(const void *key, const struct wait_stat *s, void *ctx)
{
	struct lock_entry *x = append_entry(ctx);

	if (x) {
		x->key = *(const struct lock_key *)key;
		x->s = *s;
	}
}

/* the finished waits each CPU had not yet moved into the map
 * (contention.bpf.c defers that work out of contention_end); how many */
static __u64 merge_pending(const struct probe *p, const struct cpu_state *cpu_st,
			   struct lock_entries *e)
{
	__u64 merged = 0;

	for (int c = 0; cpu_st && c < p->ncpus; c++) {
		__u32 np = cpu_st[c].npending < MAX_PENDING ? cpu_st[c].npending : MAX_PENDING;

		for (__u32 i = 0; i < np; i++) {
			const struct pending_wait *pw = &cpu_st[c].pending[i];
			struct lock_key k = { .lock = pw->lock, .flags = pw->flags, .stack_id = pw->stack };
			struct wait_stat one = { .count = pw->count, .total_ns = pw->delta, .max_ns = pw->max,
						 .untimed = pw->untimed };

			if (merge_entry(e, &k, &one) == 0)
				merged += pw->count;
		}
	}
	return merged;
}

/* "contention": the lock waits; how many entries */
static unsigned int emit_lock_stats(struct jw *w, const struct probe *p,
				    const struct cpu_state *cpu_st, __u64 *merged)
{
	struct lock_entries e = {};

	for_each_wait(bpf_map__fd(p->cskel->maps.lock_stats), p->ncpus, add_map_entry, &e);
	*merged = merge_pending(p, cpu_st, &e);
	jw_key(w, "contention");
	jw_arr(w);
	for (size_t i = 0; i < e.n; i++) {
		EMIT_ROW_CONTENTION(w, &e.arr[i]);
		id_set_add(&wait_stack_ids, e.arr[i].key.stack_id);
		if (e.arr[i].key.lock >= KTEXT_STATIC_MIN)
			id_set_add(&static_stack_ids, e.arr[i].key.stack_id);
	}
	jw_arr_end(w);
	free(e.arr);
	return (unsigned int)e.n;
}

struct emit_ctx {
	struct jw *w;
	unsigned int n;
};

/* spin waits inside futex syscalls by word (futexspin.bpf.h): the same
 * waits as in "contention", the map merged with the pending ones that
 * carry a word */
struct futex_lock_entry {
	struct futex_lock_key key;
	struct wait_stat s;
};

struct futex_lock_entries {
	struct futex_lock_entry *arr;
	size_t n, cap;
};

static struct futex_lock_entry *find_futex_lock_entry(struct futex_lock_entries *e,
						       const struct futex_lock_key *k)
{
	struct futex_lock_entry *x;

	for (size_t i = 0; i < e->n; i++)
		if (memcmp(&e->arr[i].key, k, sizeof(*k)) == 0)
			return &e->arr[i];
	if (!GROW(e->arr, e->cap, e->n, 256))
		return NULL;
	x = &e->arr[e->n++];
	memset(x, 0, sizeof(*x));
	x->key = *k;
	return x;
}

static void add_futex_lock_entry(const void *key, const struct wait_stat *s, void *ctx)
{
	struct futex_lock_entry *x = find_futex_lock_entry(ctx, key);

	if (x)
		wait_stat_add(&x->s, s);
}

static void merge_futex_pending(const struct probe *p, const struct cpu_state *cpu_st,
				struct futex_lock_entries *e)
{
	for (int c = 0; cpu_st && c < p->ncpus; c++) {
		__u32 np = cpu_st[c].npending < MAX_PENDING ? cpu_st[c].npending : MAX_PENDING;

		for (__u32 i = 0; i < np; i++) {
			const struct pending_wait *pw = &cpu_st[c].pending[i];
			struct futex_lock_key k = { .lock = pw->lock, .uaddr = pw->uaddr, .flags = pw->flags,
						    .stack_id = pw->stack, .tgid = pw->tgid };
			struct wait_stat one = { .count = pw->count, .total_ns = pw->delta, .max_ns = pw->max,
						 .untimed = pw->untimed };
			struct futex_lock_entry *x;

			if (!pw->uaddr || !(x = find_futex_lock_entry(e, &k)))
				continue;
			wait_stat_add(&x->s, &one);
		}
	}
}

/* "futex_kernel": the kernel lock waits spun inside a futex syscall, by
 * word; how many entries */
static unsigned int emit_futex_lock_stats(struct jw *w, const struct probe *p, const struct cpu_state *cpu_st)
{
	struct futex_lock_entries e = {};

	for_each_wait(bpf_map__fd(p->cskel->maps.futex_lock_stats), p->ncpus, add_futex_lock_entry, &e);
	merge_futex_pending(p, cpu_st, &e);
	jw_key(w, "futex_kernel");
	jw_arr(w);
	for (size_t i = 0; i < e.n; i++)
		EMIT_ROW_FUTEX_KERNEL(w, &e.arr[i]);
	jw_arr_end(w);
	free(e.arr);
	return (unsigned int)e.n;
}

/* the "offcpu" row: a key and its per-CPU values summed */
struct offcpu_row {
	struct offcpu_key k;
	struct wait_stat s;
};

static void emit_offcpu_entry(const void *key, const struct wait_stat *s, void *ctx)
{
	struct offcpu_row row = { .k = *(const struct offcpu_key *)key, .s = *s };
	struct emit_ctx *c = ctx;

	EMIT_ROW_OFFCPU(c->w, &row);
	id_set_add(&wait_stack_ids, row.k.stack_id);
	c->n++;
}

/* "offcpu": off-CPU time; how many entries */
static unsigned int emit_offcpu_stats(struct jw *w, const struct probe *p)
{
	struct emit_ctx c = { .w = w };

	jw_key(w, "offcpu");
	jw_arr(w);
	for_each_wait(bpf_map__fd(p->cskel->maps.offcpu_stats), p->ncpus, emit_offcpu_entry, &c);
	jw_arr_end(w);
	return c.n;
}

/* a row of "sample_copies": the copy's number and the copy */
struct sample_copy_row {
	const __u32 *copy;
	const struct ustack_copy *c;
};

static void sample_copy_row(struct jw *w, const void *key, const struct ustack_copy *c)
{
	struct sample_copy_row r = { .copy = key, .c = c };

	EMIT_ROW_SAMPLE_COPIES(w, &r);
}

/* the memory maps of the processes whose CPU samples carry user stacks, read
 * while they live: while counting (every interval) those not read yet, a
 * few at a time, so that a fork storm's thousands of short-lived processes
 * never hold up the loader; at stop (all = true) every one again, for the
 * mappings made since (at most MAX_SAMPLE_MAPS processes) */
#define MAX_SAMPLE_MAPS 64
#define SAMPLE_MAPS_PER_TICK 8
static __u32 maps_read[MAX_SAMPLE_MAPS];
static int nmaps_read;

void collect_sample_maps(struct probe *p, bool all)
{
	int fd = bpf_map__fd(p->cskel->maps.cpu_samples);
	struct sample_key key, *prev = NULL;
	__u32 seen[MAX_SAMPLE_MAPS];
	int nseen = 0, nnew = 0;

	while (bpf_map_get_next_key(fd, prev, &key) == 0 && nseen < MAX_SAMPLE_MAPS) {
		int i, j;

		prev = &key;
		if (key.user_stack < 0)
			continue;
		for (i = 0; i < nseen && seen[i] != key.tgid; i++)
			;
		if (i < nseen)
			continue;
		seen[nseen++] = key.tgid;
		for (j = 0; j < nmaps_read && maps_read[j] != key.tgid; j++)
			;
		if (j == nmaps_read) {
			if (nmaps_read == MAX_SAMPLE_MAPS || (!all && nnew == SAMPLE_MAPS_PER_TICK))
				continue;
			maps_read[nmaps_read++] = key.tgid;
			nnew++;
		} else if (!all) {
			continue;
		}
		futex_read_maps(key.tgid);
	}
}

/* a row of "cpu_samples": a sample_key and its count over the CPUs */
struct sample_row {
	struct sample_key k;
	__u64 count;
};

/* "sample_period_ns" and "cpu_samples"; how many entries */
static unsigned int emit_cpu_samples(struct jw *w, const struct probe *p)
{
	int fd = bpf_map__fd(p->cskel->maps.cpu_samples);
	__u64 *vals = calloc(p->ncpus, sizeof(__u64));
	struct sample_row r;
	struct sample_key *prev = NULL;
	unsigned int n = 0;

	jw_ku64(w, "sample_period_ns", p->sample_period_ns);
	jw_key(w, "cpu_samples");
	jw_arr(w);
	while (vals && bpf_map_get_next_key(fd, prev, &r.k) == 0) {
		prev = &r.k;
		if (bpf_map_lookup_elem(fd, &r.k, vals))
			continue;
		r.count = u64_sum(vals, p->ncpus);
		EMIT_ROW_CPU_SAMPLES(w, &r);
		if (r.k.user_stack >= 0)
			id_set_add(&sample_user_stack_ids, r.k.user_stack);
		id_set_add(&sample_stack_ids, r.k.stack_id);
		n++;
	}
	jw_arr_end(w);
	free(vals);
	return n;
}

/* the "waiters" row: a key and its count */
struct waiter_row {
	struct waiter_key k;
	__u64 count;
};

/* "waiters": (lock, thread, sampled waits) of the sampled waits; how many */
static unsigned int emit_waiters(struct jw *w, const struct probe *p)
{
	int fd = bpf_map__fd(p->cskel->maps.waiters);
	struct waiter_row row;
	struct waiter_key *prev = NULL;
	unsigned int n = 0;

	jw_ku64(w, "waiter_every", WAITER_EVERY);
	jw_key(w, "waiters");
	jw_arr(w);
	while (bpf_map_get_next_key(fd, prev, &row.k) == 0) {
		prev = &row.k;
		if (bpf_map_lookup_elem(fd, &row.k, &row.count))
			continue;
		EMIT_ROW_WAITERS(w, &row);
		n++;
	}
	jw_arr_end(w);
	return n;
}

/* the "owners" row: an owner_key and its owner_stat */
struct owner_row {
	struct owner_key k;
	struct owner_stat s;
};

/* "owners": the owners of mutexes and rwsems seen by sampled waiters
 * (owners.bpf.h); how many entries */
static unsigned int emit_owners(struct jw *w, const struct probe *p)
{
	int fd = bpf_map__fd(p->cskel->maps.owners);
	struct owner_key *prev = NULL;
	struct owner_row row;
	unsigned int n = 0;

	jw_key(w, "owners");
	jw_arr(w);
	while (bpf_map_get_next_key(fd, prev, &row.k) == 0) {
		prev = &row.k;
		if (bpf_map_lookup_elem(fd, &row.k, &row.s))
			continue;
		row.s.owner_comm[sizeof(row.s.owner_comm) - 1] = '\0';
		EMIT_ROW_OWNERS(w, &row);
		if (row.k.how == OWNER_OFF_CPU)
			id_set_add(&wait_stack_ids, row.k.stack_id);
		n++;
	}
	jw_arr_end(w);
	return n;
}

/* the stacks of the ids collected since the last call */
static void emit_stack_map(struct jw *w, const char *name, struct bpf_map *map, struct id_set *set)
{
	emit_stacks(w, name, bpf_map__fd(map), set, MAX_STACK_DEPTH, true);
	set->n = 0;
}

static void emit_counters(struct jw *w, const struct probe *p, const struct cpu_state *cpu_st,
			  __u64 merged)
{
	jw_key(w, "counters");
	jw_obj(w);
	for (__u32 i = 0; cpu_st && i < CNT__MAX; i++) {
		__u64 sum = i == CNT_CONTENTIONS ? merged : 0;

		for (int c = 0; c < p->ncpus; c++)
			sum += cpu_st[c].counters[i];
		jw_ku64(w, counter_names[i], sum);
	}
	futex_counters_json(w);
	tasks_counters_json(w);
	usdt_counters_json(w);
	jw_obj_end(w);
}

void collect_json(struct probe *p, struct jw *w)
{
	unsigned int nlock, nfutex, noff, nsamp, nwait, nown;
	struct cpu_state *cpu_st = read_cpu_states(p);
	__u64 merged;

	collect_sample_maps(p, true);

	nlock = emit_lock_stats(w, p, cpu_st, &merged);
	nfutex = emit_futex_lock_stats(w, p, cpu_st);
	noff = emit_offcpu_stats(w, p);
	nsamp = emit_cpu_samples(w, p);
	nwait = emit_waiters(w, p);
	nown = emit_owners(w, p);
	ktext_json(w, bpf_map__fd(p->cskel->maps.stacks), &static_stack_ids);
	static_stack_ids.n = 0;
	emit_stack_map(w, "stacks", p->cskel->maps.stacks, &wait_stack_ids);
	emit_stack_map(w, "sample_stacks", p->cskel->maps.sample_stacks, &sample_stack_ids);
	emit_stack_map(w, "sample_user_stacks", p->cskel->maps.sample_user_stacks, &sample_user_stack_ids);
	emit_ustack_copies(w, "sample_copies", bpf_map__fd(p->cskel->maps.sample_copies), sizeof(__u32),
			   sample_copy_row);
	objects_json(w);
	futex_json(w);
	gomutex_json(w);
	tasks_json(w);
	kmem_json(w);
	usdt_json(w);
	filelocks_json(w);
	layout_json(w);
	series_json(w, p->series_ms);
	emit_counters(w, p, cpu_st, merged);
	free(cpu_st);
	cost_json(w);
	jw_key(w, "maps");
	jw_obj(w);
	emit_map_use(w, "lock_stats", p->cskel->maps.lock_stats, nlock);
	emit_map_use(w, "futex_lock_stats", p->cskel->maps.futex_lock_stats, nfutex);
	emit_map_use(w, "offcpu_stats", p->cskel->maps.offcpu_stats, noff);
	emit_map_use(w, "cpu_samples", p->cskel->maps.cpu_samples, nsamp);
	emit_map_use(w, "waiters", p->cskel->maps.waiters, nwait);
	emit_map_use(w, "owners", p->cskel->maps.owners, nown);
	futex_map_use_json(w);
	tasks_map_use_json(w);
	usdt_map_use_json(w);
	jw_obj_end(w);
}
