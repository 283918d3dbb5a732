// SPDX-License-Identifier: MIT
/* Loader side of the per-thread times (contention.bpf.c's sched_switch
 * program, tasktimes.bpf.h) and of tasks.bpf.c (wake-ups, the task
 * iterator): load and attach, clear at start; at stop run
 * its task iterator (threads with no event in the window, names as they are
 * now), add the spans still open to the stop time, and emit the per-thread
 * times and the wake-ups. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "cost.h"
#include "futex.h"          /* __NR_futex_waitv */
#include "jsonw.h"
#include "bpfutil.h"
#include "grow.h"
#include "tasks.h"
#include "holders.h"
#include "pyframes.h"
#include "tasks.skel.h"

static const char *tcounter_names[TCNT__MAX] = { TASK_COUNTERS(COUNTER_NAME) };

static struct tasks_bpf *tskel;
static int load_err = -ENOENT;       /* not loaded until tasks_load */
static int nc;

static struct task_row *trows;       /* struct task_row, wakeup_row: build/proberows.h */
static size_t ntrows;

/* the wake-ups of the window, merged by key: the map is drained into them
 * while the window runs (tasks_drain), so that a program that forks and
 * exits all the time (a new edge per child) does not fill it */
static struct wakeup_row *wrows;
static size_t nwrows, wcap;
static uint32_t *wslots;             /* open addressing: 0 empty, else row index + 1 */
static size_t nwslots;               /* a power of two, at least twice nwrows */
static uint64_t wdrained;            /* entries taken out of the map in this window */
#define WAKEUPS_EMITTED 8192         /* rows in the data event, most counted first */

int tasks_load(bool system_wide, int tracked_fd, int task_times_fd, int task_counters_fd, int futex_open_fd,
	       int tstate_fd, int usdt_waiting_fd, int usdt_held_fd, int flk_open_fd, int ncpus)
{
	int err;

	nc = ncpus;
	tskel = tasks_bpf__open();
	if (!tskel)
		return load_err = -errno;
	tskel->rodata->system_wide = system_wide;
	tskel->rodata->have_futex = futex_open_fd >= 0;
	tskel->rodata->nr_futex = __NR_futex;
	tskel->rodata->nr_futex_waitv = __NR_futex_waitv;
	err = bpf_map__reuse_fd(tskel->maps.tracked, tracked_fd);
	if (!err)
		err = bpf_map__reuse_fd(tskel->maps.task_times, task_times_fd);
	if (!err)
		err = bpf_map__reuse_fd(tskel->maps.task_counters, task_counters_fd);
	if (!err)
		err = bpf_map__reuse_fd(tskel->maps.tstate, tstate_fd);
	if (!err)
		err = bpf_map__reuse_fd(tskel->maps.usdt_waiting, usdt_waiting_fd);
	if (!err)
		err = bpf_map__reuse_fd(tskel->maps.usdt_held, usdt_held_fd);
	if (!err)
		err = bpf_map__reuse_fd(tskel->maps.flk_open, flk_open_fd);
	if (!err && futex_open_fd >= 0)
		err = bpf_map__reuse_fd(tskel->maps.futex_open, futex_open_fd);
	else if (!err)
		err = bpf_map__set_max_entries(tskel->maps.futex_open, 1);   /* unused */
	if (!err)
		err = tasks_bpf__load(tskel);
	if (!err)
		err = tasks_bpf__attach(tskel);
	if (!err)
		pyframes_set_maps(bpf_map__fd(tskel->maps.py_procs), bpf_map__fd(tskel->maps.py_stacks),
				  bpf_map__fd(tskel->maps.py_waits));
	if (err) {
		tasks_bpf__destroy(tskel);
		tskel = NULL;
	} else {
		cost_register(tskel->obj);
	}
	return load_err = err;
}

void tasks_usdt_on(void)
{
	if (tskel)
		tskel->bss->usdt_on = true;
}

static struct holder_maps holder_maps(void)
{
	return (struct holder_maps){
		.holds = tskel->maps.holds, .activity = tskel->maps.hold_activity, .seen = tskel->maps.hold_seen,
		.stacks = tskel->maps.hold_stacks, .user_stacks = tskel->maps.hold_user_stacks,
		.copies = tskel->maps.hold_copies, .usdt_held = tskel->maps.usdt_held,
	};
}

static void free_rows(void)
{
	holders_free();
	free(trows);
	free(wrows);
	free(wslots);
	trows = NULL;
	wrows = NULL;
	wslots = NULL;
	ntrows = nwrows = wcap = nwslots = 0;
	wdrained = 0;
}

void tasks_start(uint64_t t_start)
{
	if (!tskel)
		return;
	tskel->bss->enabled = false;
	clear_map(tskel->maps.task_times);
	clear_map(tskel->maps.wakeups);
	{
		struct holder_maps m = holder_maps();

		holders_clear(&m);
	}
	pyframes_clear();
	counters_zero(tskel->maps.task_counters, TCNT__MAX, nc);
	free_rows();
	tskel->bss->wakeup_inserts = 0;
	tskel->bss->t_start = t_start;
	tskel->bss->enabled = true;
}

/* the task iterator's run: it writes nothing, it fills task_times */
static int run_iterator(void)
{
	char buf[64];
	int fd = bpf_iter_create(bpf_link__fd(tskel->links.lksc_tasks_iter));
	ssize_t n;

	if (fd < 0)
		return -errno;
	while ((n = read(fd, buf, sizeof(buf))) != 0)
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			break;
	close(fd);
	return 0;
}

/* every thread's times, the spans open at stop added up to t_stop
 * (bpf_ktime_get_ns is CLOCK_MONOTONIC) */
static void read_tasks(uint64_t t_stop)
{
	int fd = bpf_map__fd(tskel->maps.task_times);
	__u32 tid, *prev = NULL;
	size_t cap = 0;

	while (bpf_map_get_next_key(fd, prev, &tid) == 0) {
		struct task_times *t;

		prev = &tid;
		if (!GROW(trows, cap, ntrows, 256))
			return;
		t = &trows[ntrows].t;
		if (bpf_map_lookup_elem(fd, &tid, t))
			continue;
		trows[ntrows++].tid = tid;
		if (t->on_start && t_stop > t->on_start)
			t->on_cpu_ns += t_stop - t->on_start;
		if (t->off_start && t_stop > t->off_start) {
			if (t->off_preempted)
				t->preempted_ns += t_stop - t->off_start;
			else
				t->sleep_ns += t_stop - t->off_start;
		}
		t->comm[sizeof(t->comm) - 1] = '\0';
		t->process[sizeof(t->process) - 1] = '\0';
	}
}

static size_t wakeup_hash(const struct wakeup_key *k)
{
	uint64_t h = ((uint64_t)k->waker_tid << 32 | k->wakee_tid) * 0x9e3779b97f4a7c15ULL ^ k->uaddr * 0xff51afd7ed558ccdULL;

	return (size_t)(h ^ h >> 29);
}

static bool wakeup_slots_grow(void)
{
	size_t n = nwslots ? nwslots * 2 : 4096;
	uint32_t *slots = calloc(n, sizeof(*slots));

	if (!slots)
		return false;
	for (size_t r = 0; r < nwrows; r++) {
		size_t i = wakeup_hash(&wrows[r].k) & (n - 1);

		while (slots[i])
			i = (i + 1) & (n - 1);
		slots[i] = (uint32_t)r + 1;
	}
	free(wslots);
	wslots = slots;
	nwslots = n;
	return true;
}

/* add a map entry to the rows: a new row, or counts added to its key's */
static void add_wakeup(const struct wakeup_key *k, const struct wakeup_stat *s)
{
	size_t i;

	if (2 * (nwrows + 1) > nwslots && !wakeup_slots_grow())
		return;
	for (i = wakeup_hash(k) & (nwslots - 1); wslots[i]; i = (i + 1) & (nwslots - 1)) {
		struct wakeup_row *r = &wrows[wslots[i] - 1];

		if (memcmp(&r->k, k, sizeof(*k)) == 0) {
			r->s.count += s->count;
			r->s.wait_ns += s->wait_ns;
			return;
		}
	}
	if (!GROW(wrows, wcap, nwrows, 1024))
		return;
	wrows[nwrows].k = *k;
	wrows[nwrows].s = *s;
	wrows[nwrows].s.waker_comm[sizeof(wrows[nwrows].s.waker_comm) - 1] = '\0';
	wslots[i] = (uint32_t)++nwrows;
}

/* move the map's entries into the rows, taken out with lookup-and-delete
 * (a wake-up counted meanwhile makes a new entry rather than being lost):
 * in batches of DRAIN_BATCH, one system call each, so that the loader stays
 * quick to answer (a fork storm drains thousands of edges a second); one
 * key at a time where the kernel has no batch operations, up to `max` */
#define DRAIN_BATCH 1024
static void drain_wakeups(size_t max)
{
	static struct wakeup_key keys[DRAIN_BATCH];
	static struct wakeup_stat vals[DRAIN_BATCH];
	int fd = bpf_map__fd(tskel->maps.wakeups);
	__u32 in = 0, out = 0;
	bool first = true;

	for (;;) {
		__u32 n = DRAIN_BATCH;
		int err = bpf_map_lookup_and_delete_batch(fd, first ? NULL : &in, &out, keys, vals, &n, NULL);
		int e = errno;

		for (__u32 i = 0; i < n && (!err || e == ENOENT); i++) {
			add_wakeup(&keys[i], &vals[i]);
			wdrained++;
		}
		if (err) {
			if (e != ENOENT && first)
				break;                      /* no batch operations: one key at a time */
			return;
		}
		in = out;
		first = false;
	}
	for (size_t got = 0; got < max; got++) {
		struct wakeup_key k;
		struct wakeup_stat st;

		if (bpf_map_get_next_key(fd, NULL, &k) || bpf_map_lookup_and_delete_elem(fd, &k, &st))
			return;
		add_wakeup(&k, &st);
		wdrained++;
	}
}

void tasks_drain_wakeups(void)
{
	/* entries in the map now: those put in, less those taken out */
	size_t max;

	if (!tskel || !tskel->bss->enabled)
		return;
	max = bpf_map__max_entries(tskel->maps.wakeups);
	if (tskel->bss->wakeup_inserts - wdrained >= max / 4)
		drain_wakeups(max);
}

void tasks_drain(void)
{
	if (!tskel || !tskel->bss->enabled)
		return;
	pyframes_resolve();          /* Python code names, while their processes run */
	tasks_drain_wakeups();
}

static int by_count_desc(const void *a, const void *b)
{
	const struct wakeup_row *x = a, *y = b;

	return x->s.count < y->s.count ? 1 : x->s.count > y->s.count ? -1 : 0;
}

void tasks_stop(uint64_t t_stop)
{
	uint64_t now = now_ns();
	int err;

	if (!tskel)
		return;
	tskel->bss->enabled = false;
	free(trows);                 /* the wake-ups drained while the window ran stay */
	trows = NULL;
	ntrows = 0;
	err = run_iterator();
	if (err)
		emit_error("tasks", err, "the task iterator failed: %s", strerror(-err));
	read_tasks(t_stop < now ? t_stop : now);
	drain_wakeups(bpf_map__max_entries(tskel->maps.wakeups));
	qsort(wrows, nwrows, sizeof(*wrows), by_count_desc);
	{
		struct holder_maps m = holder_maps();

		holders_read(&m);
	}
	pyframes_resolve();
}

void tasks_json(struct jw *w)
{
	jw_key(w, "tasks_probe");
	jw_obj(w);
	jw_kbool(w, "attached", tskel != NULL);
	if (!tskel) {
		char msg[160];

		jw_kstr(w, "reason", not_loaded(msg, sizeof(msg), "per-thread probe (tp_btf sched_switch, sched_waking)",
						 load_err));
	}
	jw_obj_end(w);
	if (!tskel)
		return;

	jw_key(w, "tasks");
	jw_arr(w);
	for (size_t i = 0; i < ntrows; i++)
		EMIT_ROW_TASKS(w, &trows[i]);
	jw_arr_end(w);

	jw_key(w, "wakeups");
	jw_arr(w);
	for (size_t i = 0; i < nwrows && i < WAKEUPS_EMITTED; i++)
		EMIT_ROW_WAKEUPS(w, &wrows[i]);
	jw_arr_end(w);
	{
		struct holder_maps m = holder_maps();

		holders_json(w, &m);
	}
	pyframes_json(w);
}

void tasks_counters_json(struct jw *w)
{
	__u64 sums[TCNT__MAX];

	if (!tskel)
		return;
	counters_read(tskel->maps.task_counters, TCNT__MAX, nc, sums);
	for (__u32 i = 0; i < TCNT__MAX; i++) {
		if (i == TCNT_SWITCHES)
			for (size_t j = 0; j < ntrows; j++)
				sums[i] += trows[j].t.switches;
		if (i == TCNT_WAKEUPS)
			for (size_t j = 0; j < nwrows; j++)
				sums[i] += wrows[j].s.count;
		jw_ku64(w, tcounter_names[i], sums[i]);
	}
}

void tasks_map_use_json(struct jw *w)
{
	if (!tskel)
		return;
	emit_map_use(w, "task_times", tskel->maps.task_times, ntrows);
	emit_map_use(w, "wakeups", tskel->maps.wakeups, nwrows);
	{
		struct holder_maps m = holder_maps();

		holders_map_use_json(w, &m);
	}
}

void tasks_destroy(void)
{
	pyframes_destroy();
	if (tskel)
		cost_unregister(tskel->obj);
	tasks_bpf__destroy(tskel);
	tskel = NULL;
	free_rows();
}
