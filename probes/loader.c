// SPDX-License-Identifier: MIT
/*
 * lockscope-probe: loads the lock-contention and off-CPU probes, takes
 * commands on stdin and answers with one JSON object per line on stdout.
 *
 *   track PID      add a process (and, by fork-following, its children)
 *   untrack PID    remove a process (children already forked stay tracked)
 *   watch PATH     hold an O_PATH descriptor so the path's locks can be named
 *   start          clear the aggregates and start counting
 *   stop           stop counting; emit the "data" event
 *   quit           detach everything and exit (also on EOF, SIGINT, SIGTERM)
 *
 * Errors are events too ({"event":"error",...}); stderr carries only libbpf's
 * own warnings. The probes are released when the process exits, however it
 * exits: nothing is pinned.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/perf_event.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "objects.h"
#include "futex.h"
#include "kmem.h"
#include "bpfutil.h"
#include "contention.skel.h"
#include "objects.skel.h"

#define MAX_WATCH 4096

static const char *counter_names[CNT__MAX] = { CONTENTION_COUNTERS(COUNTER_NAME) };

static struct contention_bpf *cskel;
static struct objects_bpf *oskel;
static struct bpf_link *files_iter, *tasks_iter;
static struct bpf_link **sample_links;
static uint64_t sample_period_ns;
static int watch_fds[MAX_WATCH];
static int nwatch;
static int ncpus;
static bool enabled;
static uint64_t t_start, t_stop;
static struct jw out;

static void emit_error(const char *stage, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	jw_event_begin(&out, stdout, "error");
	jw_kstr(&out, "stage", stage);
	jw_ki64(&out, "errno", err < 0 ? -err : err);
	jw_kstr(&out, "message", msg);
	jw_event_end(&out);
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

/* ---- maps ---------------------------------------------------------------- */

static void reset_cpu_states(void)
{
	struct cpu_state *zero = calloc(ncpus, sizeof(*zero));
	__u32 key = 0;

	if (zero)
		bpf_map_update_elem(bpf_map__fd(cskel->maps.cpus), &key, zero, BPF_ANY);
	free(zero);
}

/* every CPU's state; the caller frees it */
static struct cpu_state *read_cpu_states(void)
{
	struct cpu_state *st = calloc(ncpus, sizeof(*st));
	__u32 key = 0;

	if (st && bpf_map_lookup_elem(bpf_map__fd(cskel->maps.cpus), &key, st)) {
		free(st);
		return NULL;
	}
	return st;
}

/* stack ids referenced by the emitted entries, per stack map */
static struct id_set wait_stack_ids, sample_stack_ids;

static void want_stack(__s32 id)
{
	id_set_add(&wait_stack_ids, id);
}

struct lock_entry {
	struct lock_key key;
	struct wait_stat s;
};

/* a new slot at the end of the array, or NULL */
static struct lock_entry *append_entry(struct lock_entry **arr, size_t *n, size_t *cap)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 1024;
		struct lock_entry *p = realloc(*arr, c * sizeof(*p));

		if (!p)
			return NULL;
		*arr = p;
		*cap = c;
	}
	return &(*arr)[(*n)++];
}

/* add a wait to the entry of its key, making one if needed */
static int merge_entry(struct lock_entry **arr, size_t *n, size_t *cap, const struct lock_key *k,
		       const struct wait_stat *s)
{
	struct lock_entry *e;

	for (size_t i = 0; i < *n; i++) {
		e = &(*arr)[i];
		if (memcmp(&e->key, k, sizeof(*k)) == 0) {
			wait_stat_add(&e->s, s);
			return 0;
		}
	}
	e = append_entry(arr, n, cap);
	if (!e)
		return -ENOMEM;
	e->key = *k;
	e->s = *s;
	return 0;
}

/* the aggregation map, plus the finished waits each CPU had not yet moved
 * into it (contention.bpf.c defers that work out of contention_end) */
static unsigned int emit_lock_stats(const struct cpu_state *cpu_st, __u64 *merged)
{
	int fd = bpf_map__fd(cskel->maps.lock_stats);
	struct wait_stat *vals = calloc(ncpus, sizeof(*vals)), s;
	struct lock_key key, *prev = NULL;
	struct lock_entry *arr = NULL;
	size_t n = 0, cap = 0;

	while (vals && bpf_map_get_next_key(fd, prev, &key) == 0) {
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, vals))
			continue;
		wait_stat_sum(vals, ncpus, &s);
		/* map entries are distinct: append without searching */
		struct lock_entry *e = append_entry(&arr, &n, &cap);

		if (!e)
			break;
		e->key = key;
		e->s = s;
	}
	*merged = 0;
	for (int c = 0; cpu_st && c < ncpus; c++) {
		__u32 np = cpu_st[c].npending < MAX_PENDING ? cpu_st[c].npending : MAX_PENDING;

		for (__u32 i = 0; i < np; i++) {
			const struct pending_wait *p = &cpu_st[c].pending[i];
			struct lock_key k = { .lock = p->lock, .flags = p->flags, .stack_id = p->stack };
			struct wait_stat one = { .count = 1, .total_ns = p->delta, .max_ns = p->delta };

			if (merge_entry(&arr, &n, &cap, &k, &one) == 0)
				(*merged)++;
		}
	}
	jw_key(&out, "contention");
	jw_arr(&out);
	for (size_t i = 0; i < n; i++) {
		jw_obj(&out);
		jw_khex(&out, "lock", arr[i].key.lock);
		jw_ku64(&out, "flags", arr[i].key.flags);
		jw_ki64(&out, "stack", arr[i].key.stack_id);
		jw_ku64(&out, "count", arr[i].s.count);
		jw_ku64(&out, "total_ns", arr[i].s.total_ns);
		jw_ku64(&out, "max_ns", arr[i].s.max_ns);
		jw_obj_end(&out);
		want_stack(arr[i].key.stack_id);
	}
	jw_arr_end(&out);
	free(arr);
	free(vals);
	return (unsigned int)n;
}

static unsigned int emit_offcpu_stats(void)
{
	int fd = bpf_map__fd(cskel->maps.offcpu_stats);
	struct wait_stat *vals = calloc(ncpus, sizeof(*vals)), s;
	struct offcpu_key key, *prev = NULL;
	unsigned int n = 0;

	jw_key(&out, "offcpu");
	jw_arr(&out);
	while (vals && bpf_map_get_next_key(fd, prev, &key) == 0) {
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, vals))
			continue;
		wait_stat_sum(vals, ncpus, &s);
		jw_obj(&out);
		jw_ki64(&out, "stack", key.stack_id);
		jw_ku64(&out, "state", key.state);
		jw_kbool(&out, "in_lock_wait", key.in_lock_wait);
		jw_ku64(&out, "count", s.count);
		jw_ku64(&out, "total_ns", s.total_ns);
		jw_ku64(&out, "max_ns", s.max_ns);
		jw_obj_end(&out);
		want_stack(key.stack_id);
		n++;
	}
	jw_arr_end(&out);
	free(vals);
	return n;
}

static unsigned int emit_cpu_samples(void)
{
	int fd = bpf_map__fd(cskel->maps.cpu_samples);
	__u64 *vals = calloc(ncpus, sizeof(__u64));
	struct sample_key key, *prev = NULL;
	unsigned int n = 0;

	jw_ku64(&out, "sample_period_ns", sample_period_ns);
	jw_key(&out, "cpu_samples");
	jw_arr(&out);
	while (vals && bpf_map_get_next_key(fd, prev, &key) == 0) {
		__u64 sum = 0;

		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, vals))
			continue;
		sum = u64_sum(vals, ncpus);
		jw_obj(&out);
		jw_ki64(&out, "stack", key.stack_id);
		jw_kbool(&out, "in_lock_wait", key.in_lock_wait);
		jw_ku64(&out, "count", sum);
		jw_obj_end(&out);
		id_set_add(&sample_stack_ids, key.stack_id);
		n++;
	}
	jw_arr_end(&out);
	free(vals);
	return n;
}

static void emit_stack_map(const char *name, struct bpf_map *map, struct id_set *set)
{
	emit_stacks(&out, name, bpf_map__fd(map), set, MAX_STACK_DEPTH, true);
	set->n = 0;
}

static void emit_counters(const struct cpu_state *cpu_st, __u64 merged)
{
	jw_key(&out, "counters");
	jw_obj(&out);
	for (__u32 i = 0; cpu_st && i < CNT__MAX; i++) {
		__u64 sum = i == CNT_CONTENTIONS ? merged : 0;

		for (int c = 0; c < ncpus; c++)
			sum += cpu_st[c].counters[i];
		jw_ku64(&out, counter_names[i], sum);
	}
	futex_counters_json(&out);
	jw_obj_end(&out);
}

static void emit_all_programs(void)
{
	/* recursion_misses: runs the kernel skipped because one of our programs
	 * was already running on that CPU (e.g. a lock contended inside a probe) */
	jw_key(&out, "programs");
	jw_arr(&out);
	emit_programs(&out, cskel->obj);
	futex_programs_json(&out);
	jw_arr_end(&out);
}

/* offsets of lock fields inside lock types (from the kernel's BTF), so that
 * the wait_lock of a named rwsem or mutex can be named too */
static const char *const layout_fields[][2] = {
	{ "rw_semaphore", "wait_lock" },
	{ "mutex", "wait_lock" },
};
static long layout_offsets[sizeof(layout_fields) / sizeof(layout_fields[0])];

static long member_offset(const struct btf *btf, const char *type, const char *member)
{
	int id = btf__find_by_name_kind(btf, type, BTF_KIND_STRUCT);
	const struct btf_type *t;
	const struct btf_member *m;

	if (id < 0)
		return -1;
	t = btf__type_by_id(btf, id);
	m = btf_members(t);
	for (int i = 0; i < btf_vlen(t); i++, m++)
		if (strcmp(btf__name_by_offset(btf, m->name_off), member) == 0)
			return (long)(btf_member_bit_offset(t, i) / 8);
	return -1;
}

static void emit_layout(void)
{
	char key[64];

	jw_key(&out, "layout");
	jw_obj(&out);
	for (size_t i = 0; i < sizeof(layout_fields) / sizeof(layout_fields[0]); i++) {
		if (layout_offsets[i] < 0)
			continue;
		snprintf(key, sizeof(key), "%s.%s", layout_fields[i][0], layout_fields[i][1]);
		jw_ki64(&out, key, layout_offsets[i]);
	}
	jw_obj_end(&out);
}

/* ---- time series --------------------------------------------------------- */

/* While counting, every --series-ms the cumulative wait per lock address (the
 * heaviest SERIES_MAX_LOCKS) and the off-CPU time outside lock waits per task
 * state are kept in memory, and emitted with the "data" event ("series"), so
 * that bursts within a run are not averaged away. Nothing is written during
 * the window. */
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

static struct series_snap *series;
static size_t nseries;
static bool series_truncated;
static long series_ms = 250;

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

static void series_reset(void)
{
	for (size_t i = 0; i < nseries; i++)
		free(series[i].locks);
	nseries = 0;
	series_truncated = false;
}

static void series_snapshot(void)
{
	int fd = bpf_map__fd(cskel->maps.lock_stats);
	struct wait_stat *vals = calloc(ncpus, sizeof(*vals)), s;
	struct lock_key key, *prev = NULL;
	struct offcpu_key okey, *oprev = NULL;
	struct series_val *arr = NULL;
	struct series_snap *snap;
	size_t n = 0, cap = 0, m = 0;

	if (!vals)
		return;
	if (!series && !(series = calloc(SERIES_MAX_SNAPS, sizeof(*series))))
		goto out;
	if (nseries == SERIES_MAX_SNAPS) {
		series_truncated = true;
		goto out;
	}
	snap = &series[nseries];
	memset(snap, 0, sizeof(*snap));
	snap->t_ns = now_ns() - t_start;
	while (bpf_map_get_next_key(fd, prev, &key) == 0) {
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, vals))
			continue;
		wait_stat_sum(vals, ncpus, &s);
		if (n == cap) {
			struct series_val *p = realloc(arr, (cap = cap ? cap * 2 : 256) * sizeof(*p));

			if (!p)
				goto out;
			arr = p;
		}
		arr[n].key = key.lock;
		arr[n++].total_ns = s.total_ns;
	}
	/* one value per address (entries differ by flags and stack) */
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
	snap->nlocks = m < SERIES_MAX_LOCKS ? m : SERIES_MAX_LOCKS;
	snap->locks = arr;
	arr = NULL;

	fd = bpf_map__fd(cskel->maps.offcpu_stats);
	while (bpf_map_get_next_key(fd, oprev, &okey) == 0) {
		__u32 j;

		oprev = &okey;
		if (okey.in_lock_wait || bpf_map_lookup_elem(fd, &okey, vals))
			continue;
		wait_stat_sum(vals, ncpus, &s);
		for (j = 0; j < snap->nstates && snap->states[j].key != okey.state; j++)
			;
		if (j == SERIES_MAX_STATES)
			continue;
		if (j == snap->nstates) {
			snap->states[j].key = okey.state;
			snap->nstates++;
		}
		snap->states[j].total_ns += s.total_ns;
	}
	nseries++;
out:
	free(arr);
	free(vals);
}

static void emit_series(void)
{
	jw_key(&out, "series");
	jw_obj(&out);
	jw_ku64(&out, "interval_ns", (uint64_t)series_ms * 1000000ULL);
	jw_kbool(&out, "truncated", series_truncated);
	jw_ku64(&out, "max_locks", SERIES_MAX_LOCKS);
	jw_key(&out, "snapshots");
	jw_arr(&out);
	for (size_t i = 0; i < nseries; i++) {
		const struct series_snap *sn = &series[i];

		jw_obj(&out);
		jw_ku64(&out, "t_ns", sn->t_ns);
		jw_key(&out, "locks");
		jw_arr(&out);
		for (__u32 j = 0; j < sn->nlocks; j++) {
			jw_arr(&out);
			jw_hex(&out, sn->locks[j].key);
			jw_u64(&out, sn->locks[j].total_ns);
			jw_arr_end(&out);
		}
		jw_arr_end(&out);
		jw_key(&out, "offcpu");
		jw_arr(&out);
		for (__u32 j = 0; j < sn->nstates; j++) {
			jw_arr(&out);
			jw_u64(&out, sn->states[j].key);
			jw_u64(&out, sn->states[j].total_ns);
			jw_arr_end(&out);
		}
		jw_arr_end(&out);
		jw_obj_end(&out);
	}
	jw_arr_end(&out);
	jw_obj_end(&out);
}

/* ---- commands ------------------------------------------------------------ */

static void snapshot_objects(void)
{
	int err = objects_snapshot(files_iter, tasks_iter);

	if (err)
		emit_error("objects", err, "object iterator failed: %s", strerror(-err));
	kmem_resolve_map(bpf_map__fd(cskel->maps.lock_stats));
}

static void cmd_track(const char *arg)
{
	char *end;
	long pid = strtol(arg, &end, 10);
	__u32 tgid;
	__u8 one = 1;
	char proc[64];
	struct stat st;

	if (*arg == '\0' || *end != '\0' || pid <= 0 || pid > 0x3fffffff) {
		emit_error("track", EINVAL, "track: not a process id: '%s'", arg);
		return;
	}
	snprintf(proc, sizeof(proc), "/proc/%ld", pid);
	if (stat(proc, &st)) {
		emit_error("track", errno, "track: no process %ld", pid);
		return;
	}
	tgid = (__u32)pid;
	if (bpf_map_update_elem(bpf_map__fd(cskel->maps.tracked), &tgid, &one, BPF_ANY)) {
		emit_error("track", errno, "track: filter map update failed: %s", strerror(errno));
		return;
	}
	jw_event_begin(&out, stdout, "tracked");
	jw_ku64(&out, "pid", tgid);
	jw_event_end(&out);
}

static void cmd_untrack(const char *arg)
{
	char *end;
	long pid = strtol(arg, &end, 10);
	__u32 tgid = (__u32)pid;

	if (*arg == '\0' || *end != '\0' || pid <= 0 || pid > 0x3fffffff) {
		emit_error("untrack", EINVAL, "untrack: not a process id: '%s'", arg);
		return;
	}
	/* children forked before this keep being tracked */
	bpf_map_delete_elem(bpf_map__fd(cskel->maps.tracked), &tgid);
	jw_event_begin(&out, stdout, "untracked");
	jw_ku64(&out, "pid", tgid);
	jw_event_end(&out);
}

static void cmd_watch(const char *path)
{
	int fd;

	if (nwatch >= MAX_WATCH) {
		emit_error("watch", ENOSPC, "watch: more than %d paths", MAX_WATCH);
		return;
	}
	fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		emit_error("watch", errno, "watch: %s: %s", path, strerror(errno));
		return;
	}
	watch_fds[nwatch++] = fd;
	jw_event_begin(&out, stdout, "watched");
	jw_kstr(&out, "path", path);
	jw_event_end(&out);
}

static void cmd_start(void)
{
	cskel->bss->enabled = false;
	cskel->bss->generation++;        /* per-task slots of earlier windows are void */
	clear_map(cskel->maps.stacked_locks);
	clear_map(cskel->maps.lock_stats);
	clear_map(cskel->maps.offcpu_stats);
	clear_map(cskel->maps.cpu_samples);
	clear_map(cskel->maps.stacks);
	clear_map(cskel->maps.sample_stacks);
	reset_cpu_states();
	series_reset();
	objects_reset();
	kmem_reset();
	snapshot_objects();
	futex_start();
	t_start = now_ns();
	cskel->bss->enabled = true;
	enabled = true;
	jw_event_begin(&out, stdout, "started");
	jw_ku64(&out, "t_ns", t_start);
	jw_event_end(&out);
}

static void cmd_stop(void)
{
	unsigned int nlock, noff, nsamp;
	struct cpu_state *cpu_st;
	__u64 merged;

	if (!enabled) {
		emit_error("stop", EINVAL, "stop: not started");
		return;
	}
	cskel->bss->enabled = false;
	t_stop = now_ns();
	enabled = false;
	futex_stop(t_stop);
	snapshot_objects();

	jw_event_begin(&out, stdout, "data");
	jw_ku64(&out, "t_start_ns", t_start);
	jw_ku64(&out, "t_stop_ns", t_stop);
	jw_ku64(&out, "window_ns", t_stop - t_start);
	jw_ku64(&out, "ncpus", ncpus);
	cpu_st = read_cpu_states();
	nlock = emit_lock_stats(cpu_st, &merged);
	noff = emit_offcpu_stats();
	nsamp = emit_cpu_samples();
	emit_stack_map("stacks", cskel->maps.stacks, &wait_stack_ids);
	emit_stack_map("sample_stacks", cskel->maps.sample_stacks, &sample_stack_ids);
	objects_json(&out);
	futex_json(&out);
	kmem_json(&out);
	emit_layout();
	emit_series();
	emit_counters(cpu_st, merged);
	free(cpu_st);
	emit_all_programs();
	jw_key(&out, "maps");
	jw_obj(&out);
	emit_map_use(&out, "lock_stats", cskel->maps.lock_stats, nlock);
	emit_map_use(&out, "offcpu_stats", cskel->maps.offcpu_stats, noff);
	emit_map_use(&out, "cpu_samples", cskel->maps.cpu_samples, nsamp);
	futex_map_use_json(&out);
	jw_obj_end(&out);
	jw_event_end(&out);
}

/* returns false to quit */
static bool handle_line(char *line)
{
	size_t len = strlen(line);

	while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
		line[--len] = '\0';
	if (strncmp(line, "track ", 6) == 0)
		cmd_track(line + 6);
	else if (strncmp(line, "untrack ", 8) == 0)
		cmd_untrack(line + 8);
	else if (strncmp(line, "watch ", 6) == 0)
		cmd_watch(line + 6);
	else if (strcmp(line, "start") == 0)
		cmd_start();
	else if (strcmp(line, "stop") == 0)
		cmd_stop();
	else if (strcmp(line, "quit") == 0)
		return false;
	else if (len)
		emit_error("command", EINVAL, "unknown command: '%s'", line);
	return true;
}

/* ---- set-up and main loop ------------------------------------------------ */

/* cpu-clock sampling on every CPU, at a fixed period */
static int attach_sampling(long hz)
{
	if (!hz)
		return 0;
	sample_period_ns = 1000000000ULL / (uint64_t)hz;
	sample_links = calloc(ncpus, sizeof(*sample_links));
	if (!sample_links)
		return -ENOMEM;
	for (int cpu = 0; cpu < ncpus; cpu++) {
		struct perf_event_attr attr = {
			.type = PERF_TYPE_SOFTWARE,
			.config = PERF_COUNT_SW_CPU_CLOCK,
			.size = sizeof(attr),
			.sample_period = sample_period_ns,
		};
		int fd = (int)syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);

		if (fd < 0) {
			if (errno == ENODEV)
				continue;       /* possible but offline CPU */
			return -errno;
		}
		sample_links[cpu] = bpf_program__attach_perf_event(cskel->progs.lksc_cpu_sample, fd);
		if (!sample_links[cpu]) {
			int err = -errno;

			close(fd);
			return err;
		}
	}
	return 0;
}

/* the tracepoints we attach to, checked by name for a clear message */
static int preflight(void)
{
	static const char *const need[][2] = {
		{ "btf_trace_contention_begin", "lock:contention_begin" },
		{ "btf_trace_contention_end", "lock:contention_end" },
		{ "btf_trace_sched_switch", "sched:sched_switch" },
	};
	struct btf *btf = btf__load_vmlinux_btf();
	int err = 0;

	if (!btf) {
		err = -errno;
		emit_error("preflight", err, "cannot read the kernel's BTF (/sys/kernel/btf/vmlinux): %s",
			   strerror(-err));
		return err;
	}
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		if (btf__find_by_name_kind(btf, need[i][0], BTF_KIND_TYPEDEF) < 0) {
			emit_error("preflight", ENOENT, "this kernel has no %s tracepoint", need[i][1]);
			err = -ENOENT;
			break;
		}
	}
	for (size_t i = 0; i < sizeof(layout_fields) / sizeof(layout_fields[0]); i++)
		layout_offsets[i] = member_offset(btf, layout_fields[i][0], layout_fields[i][1]);
	btf__free(btf);
	return err;
}

static int load(bool system_wide, long stack_rate, long sample_hz)
{
	int err;

	cskel = contention_bpf__open();
	if (!cskel)
		return -errno;
	cskel->rodata->system_wide = system_wide;
	/* per second per CPU -> per 10 ms window; 0 walks every stack */
	cskel->rodata->stack_budget = stack_rate ? (stack_rate + 99) / 100 : 0;
	err = contention_bpf__load(cskel);
	if (err)
		return err;
	err = contention_bpf__attach(cskel);
	if (err)
		return err;
	err = attach_sampling(sample_hz);
	if (err)
		return err;

	oskel = objects_bpf__open();
	if (!oskel)
		return -errno;
	oskel->rodata->self_tgid = (__u32)getpid();
	oskel->rodata->system_wide = system_wide;
	err = bpf_map__reuse_fd(oskel->maps.tracked, bpf_map__fd(cskel->maps.tracked));
	if (err)
		return err;
	err = objects_bpf__load(oskel);
	if (err)
		return err;
	files_iter = bpf_program__attach_iter(oskel->progs.lksc_iter_files, NULL);
	if (!files_iter)
		return -errno;
	tasks_iter = bpf_program__attach_iter(oskel->progs.lksc_iter_tasks, NULL);
	if (!tasks_iter)
		return -errno;
	kmem_load();          /* optional: without it, slab locks are not resolved */
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lockscope-probe [--system-wide] [--interval-ms N] [--stack-rate N] [--sample-hz N]\n"
		"                       [--series-ms N] [--futex]\n"
		"  --series-ms N   keep the cumulative wait per lock every N ms while counting,\n"
		"                  emitted with the data (default 250; 0: none)\n"
		"  --stack-rate N  kernel stacks walked per second per CPU once each lock has\n"
		"                  a few (default 2000; 0: a stack for every wait)\n"
		"  --sample-hz N   on-CPU samples per second per CPU (default 199; 0: none)\n"
		"  --futex         also trace futex waits (user-space locks) by address and user stack\n"
		"Commands on stdin: track PID | untrack PID | watch PATH | start | stop | quit.\n"
		"Events on stdout, one JSON object per line.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "system-wide", no_argument, NULL, 's' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ "stack-rate", required_argument, NULL, 'r' },
		{ "sample-hz", required_argument, NULL, 'f' },
		{ "series-ms", required_argument, NULL, 'S' },
		{ "futex", no_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	bool system_wide = false, futex = false;
	long interval_ms = 1000, stack_rate = 2000, sample_hz = 199;
	char buf[8192];
	size_t have = 0;
	sigset_t mask;
	int sfd, err, opt, rc = 0;
	const char *reason = "quit";
	uint64_t last_objects = 0;

	while ((opt = getopt_long(argc, argv, "si:r:f:S:uh", opts, NULL)) != -1) {
		switch (opt) {
		case 's': system_wide = true; break;
		case 'i': interval_ms = strtol(optarg, NULL, 10); break;
		case 'r': stack_rate = strtol(optarg, NULL, 10); break;
		case 'f': sample_hz = strtol(optarg, NULL, 10); break;
		case 'S': series_ms = strtol(optarg, NULL, 10); break;
		case 'u': futex = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (interval_ms <= 0 || stack_rate < 0 || sample_hz < 0 || sample_hz > 100000 || series_ms < 0) {
		fprintf(stderr, "lockscope-probe: --interval-ms must be > 0, --stack-rate >= 0, "
			"--sample-hz between 0 and 100000\n");
		return 2;
	}

	/* nothing outlives the orchestrator */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	signal(SIGPIPE, SIG_IGN);

	libbpf_set_print(libbpf_print);
	ncpus = libbpf_num_possible_cpus();
	if (ncpus <= 0 || objects_init()) {
		emit_error("init", ENOMEM, "cannot size per-CPU buffers");
		return 1;
	}
	if (preflight()) {
		rc = 1;
		goto out;
	}
	err = load(system_wide, stack_rate, sample_hz);
	if (err) {
		emit_error("load", err, "loading the BPF probes failed: %s", strerror(-err));
		rc = 1;
		goto out;
	}
	/* user-space lock waits: optional, and not fatal (the data event says
	 * why they are unavailable) */
	if (futex)
		futex_load(system_wide, bpf_map__fd(cskel->maps.tracked), ncpus);

	jw_event_begin(&out, stdout, "ready");
	jw_ku64(&out, "pid", (uint64_t)getpid());
	jw_kbool(&out, "system_wide", system_wide);
	jw_ku64(&out, "ncpus", ncpus);
	jw_ku64(&out, "stack_depth", MAX_STACK_DEPTH);
	jw_ku64(&out, "stack_rate", (uint64_t)stack_rate);
	jw_ku64(&out, "sample_period_ns", sample_period_ns);
	jw_kbool(&out, "futex", futex_attached());
	jw_event_end(&out);

	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = STDIN_FILENO, .events = POLLIN },
			{ .fd = sfd, .events = POLLIN },
		};
		long tick = series_ms && series_ms < interval_ms ? series_ms : interval_ms;
		int n = poll(pfd, 2, enabled ? (int)tick : -1);

		if (n < 0 && errno != EINTR) {
			reason = "poll failed";
			rc = 1;
			break;
		}
		if (n == 0) {
			uint64_t now = now_ns();

			if (series_ms)
				series_snapshot();
			/* objects come and go during a run: collect them periodically */
			if (now - (last_objects > t_start ? last_objects : t_start) >=
			    (uint64_t)interval_ms * 1000000ULL) {
				snapshot_objects();
				futex_snapshot_maps();
				last_objects = now;
			}
			continue;
		}
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) > 0)
				reason = strsignal((int)si.ssi_signo);
			break;
		}
		if (pfd[0].revents & (POLLIN | POLLHUP)) {
			ssize_t r = read(STDIN_FILENO, buf + have, sizeof(buf) - 1 - have);
			char *line, *nl;
			bool go_on = true;

			if (r <= 0) {
				reason = "end of input";
				break;
			}
			have += (size_t)r;
			buf[have] = '\0';
			line = buf;
			while (go_on && (nl = strchr(line, '\n'))) {
				*nl = '\0';
				go_on = handle_line(line);
				line = nl + 1;
			}
			if (!go_on)
				break;
			have -= (size_t)(line - buf);
			memmove(buf, line, have);
			if (have == sizeof(buf) - 1) {
				emit_error("command", E2BIG, "command line too long");
				have = 0;
			}
		}
	}

out:
	for (int cpu = 0; sample_links && cpu < ncpus; cpu++)
		bpf_link__destroy(sample_links[cpu]);
	bpf_link__destroy(files_iter);
	bpf_link__destroy(tasks_iter);
	objects_bpf__destroy(oskel);
	futex_destroy();
	kmem_destroy();
	contention_bpf__destroy(cskel);
	for (int i = 0; i < nwatch; i++)
		close(watch_fds[i]);
	if (!rc) {
		jw_event_begin(&out, stdout, "exit");
		jw_kstr(&out, "reason", reason);
		jw_event_end(&out);
	}
	return rc;
}
