/* The JSON Lines the driver prints on stdout (one write per line): the
 * workload list, ready, measure_start/end, progress, result and error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "jsonw.h"
#include "util.h"

/* The JSON line being built: in memory, so that it goes out in one write. */
static struct jw W;
static FILE *line_f;
static char *line_buf;
static size_t line_len;

/* Start a line: {"event":event,.. or, event NULL, a bare {.. */
static struct jw *ev_begin(const char *event)
{
	line_f = open_memstream(&line_buf, &line_len);
	if (!line_f) {
		fprintf(stderr, LS_PROG ": error: out of memory\n");
		exit(1);
	}
	if (event) {
		jw_event_begin(&W, line_f, event);
	} else {
		W.f = line_f;
		W.depth = 0;
		W.need_comma[0] = false;
		jw_obj(&W);
	}
	return &W;
}

/* Close the line and write it to stdout. 0 or -1/errno. */
static int ev_end(void)
{
	jw_event_end(&W);
	fclose(line_f);
	int rc = ls_write_all(STDOUT_FILENO, line_buf, line_len);
	int e = errno;
	free(line_buf);
	errno = e;
	return rc;
}

static void emit(void)
{
	if (ev_end() != 0) {
		int e = errno;
		fprintf(stderr, LS_PROG ": error: cannot write to stdout: %s\n",
			strerror(e));
		ls_fatal_exit(1);
	}
}

/* Print an "error" event (and a stderr line) for every worker that
 * recorded one. Returns how many. Output errors are ignored here: we are
 * on the way out anyway. */
int report_recorded_errors(void)
{
	int n = 0;
	for (int i = 0; i < D.nworkers; i++) {
		struct ls_wstate *ws = &D.shm->ws[i];
		if (!atomic_load_explicit(&ws->err_set, memory_order_acquire))
			continue;
		n++;
		const char *msg = ws->err_msg[0] ? ws->err_msg
						 : strerror(ws->err_errno);
		struct jw *w = ev_begin("error");
		jw_ki64(w, "worker", i);
		jw_kutf8(w, "op", ws->err_op);
		jw_kutf8(w, "path", ws->err_path[0] ? ws->err_path : NULL);
		if (ws->err_path2[0])
			jw_kutf8(w, "path2", ws->err_path2);
		jw_ki64(w, "errno", ws->err_errno);
		jw_kutf8(w, "message", msg);
		ev_end();
		fprintf(stderr, LS_PROG ": error: worker %d (cpu %d): %s%s%s%s%s: %s\n",
			i, D.wcpu[i], ws->err_op, ws->err_path[0] ? " " : "",
			ws->err_path, ws->err_path2[0] ? " -> " : "", ws->err_path2,
			msg);
	}
	return n;
}

/* Error event that is not a worker's own record (worker = null when no
 * single worker can be named). */
void report_error(int worker, const char *op, const char *path,
			 int err, const char *msg)
{
	struct jw *w = ev_begin("error");
	jw_key(w, "worker");
	if (worker >= 0)
		jw_i64(w, worker);
	else
		jw_null(w);
	jw_kutf8(w, "op", op);
	jw_kutf8(w, "path", path && path[0] ? path : NULL);
	jw_ki64(w, "errno", err);
	jw_kutf8(w, "message", msg);
	ev_end();
	if (worker >= 0)
		fprintf(stderr, LS_PROG ": error: worker %d: %s%s%s: %s\n", worker,
			op, path && path[0] ? " " : "", path ? path : "", msg);
	else
		fprintf(stderr, LS_PROG ": error: %s%s%s: %s\n", op,
			path && path[0] ? " " : "", path ? path : "", msg);
}

void print_list(void)
{
	struct jw *w = ev_begin(NULL);

	jw_key(w, "workloads");
	jw_arr(w);
	for (size_t i = 0; i < ls_catalog_len; i++) {
		const struct workload *wl = &ls_catalog[i];
		jw_obj(w);
		jw_kstr(w, "name", wl->name);
		jw_kstr(w, "operation", wl->operation);
		jw_kstr(w, "sharing", wl->sharing);
		jw_kstr(w, "component", wl->component);
		jw_kstr(w, "model",
			wl->model == LS_MODEL_THREAD ? "thread" : "process");
		jw_kbool(w, "needs_dir", wl->needs_dir);
		jw_key(w, "op_names");
		jw_arr(w);
		if (!wl->op_names)
			jw_string(w, "op");
		for (const char *const *o = wl->op_names; o && *o; o++)
			jw_string(w, *o);
		jw_arr_end(w);
		jw_key(w, "params");
		jw_arr(w);
		for (const struct ls_param *q = wl->params; q && q->name; q++) {
			jw_obj(w);
			jw_kstr(w, "name", q->name);
			jw_ki64(w, "default", q->def);
			jw_ki64(w, "min", q->min);
			jw_ki64(w, "max", q->max);
			jw_kstr(w, "help", q->help);
			jw_obj_end(w);
		}
		jw_arr_end(w);
		jw_ki64(w, "max_workers",
			wl->max_workers ? wl->max_workers : MAX_WORKERS);
		jw_kbool(w, "many_tasks", wl->many_tasks);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	if (ev_end() != 0) {
		fprintf(stderr, LS_PROG ": error: cannot write to stdout: %s\n",
			strerror(errno));
		exit(1);
	}
}

static uint64_t ops_between(const struct lat_snap *a, const struct lat_snap *b)
{
	uint64_t n = 0;
	for (int i = 0; i < D.nworkers; i++)
		n += b->ops[i] - a->ops[i];
	return n;
}

/* "op_counts":{..} and (timing on) "latency":{..} between two snapshots.
 * For the window (win_max set): max_ns is win_max, with the buckets; for an
 * interval (win_max NULL): max_ns is b's, without. */
static void emit_op_stats(struct jw *w, const struct lat_snap *a,
			  const struct lat_snap *b, const uint64_t *win_max)
{
	struct lat_agg d[LS_MAX_OPTYPES];
	for (int k = 0; k < D.nops; k++) {
		lat_diff(a, b, k, &d[k]);
		if (win_max)
			d[k].max_ns = win_max[k];
	}
	jw_key(w, "op_counts");
	jw_obj(w);
	for (int k = 0; k < D.nops; k++)
		jw_ku64(w, D.op_names[k],
			D.nops == 1 && D.no_latency ? ops_between(a, b)
						    : d[k].count);
	jw_obj_end(w);
	jw_key(w, "latency");
	if (D.no_latency) {
		jw_null(w);
		return;
	}
	jw_obj(w);
	for (int k = 0; k < D.nops; k++) {
		jw_key(w, D.op_names[k]);
		lat_emit(w, &d[k], win_max != NULL);
	}
	jw_obj_end(w);
}

void emit_time_event(const char *ev, uint64_t t)
{
	struct jw *w = ev_begin(ev);
	jw_ku64(w, "t_ns", t);
	emit();
}

/* {"event":"progress","t_ns":T,"ops":[cumulative ops of each worker],
 *  "interval_s":..,"interval_ops":..,"ops_per_sec":..,"op_counts":{..},
 *  "latency":{op:{count,mean_ns,p50_ns,p99_ns,max_ns}}|null}
 * for the interval from snapshot prev to snapshot cur. */
void emit_progress(const struct lat_snap *prev,
			  const struct lat_snap *cur)
{
	double dt = ls_ns_to_s(cur->t_ns - prev->t_ns);
	uint64_t n = ops_between(prev, cur);

	struct jw *w = ev_begin("progress");
	jw_ku64(w, "t_ns", cur->t_ns);
	jw_key(w, "ops");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++)
		jw_u64(w, cur->ops[i]);
	jw_arr_end(w);
	jw_kdouble(w, "interval_s", dt);
	jw_ku64(w, "interval_ops", n);
	jw_kdouble(w, "ops_per_sec", dt > 0 ? (double)n / dt : 0.0);
	emit_op_stats(w, prev, cur, NULL);
	emit();
}

/* {"event":"reference","t_ns":T,"seconds":..,"ops":..,"ops_per_sec":..}:
 * the rate in the first part of the warm-up (phases.c), from snapshot a to
 * snapshot b. */
void emit_reference(const struct lat_snap *a, const struct lat_snap *b)
{
	double dt = ls_ns_to_s(b->t_ns - a->t_ns);
	uint64_t n = ops_between(a, b);

	struct jw *w = ev_begin("reference");
	jw_ku64(w, "t_ns", b->t_ns);
	jw_kdouble(w, "seconds", dt);
	jw_ku64(w, "ops", n);
	jw_kdouble(w, "ops_per_sec", dt > 0 ? (double)n / dt : 0.0);
	emit();
}

static void emit_cpus(struct jw *w)
{
	jw_key(w, "cpus");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++)
		jw_i64(w, D.wcpu[i]);
	jw_arr_end(w);
}

void emit_ready(const struct ls_run *run, double setup_s)
{
	struct ls_strlist paths = { 0 };

	if (D.wl->watch_paths)
		D.wl->watch_paths(run, &paths);
	struct jw *w = ev_begin("ready");
	jw_kstr(w, "workload", D.wl->name);
	jw_ki64(w, "workers", D.nworkers);
	jw_ki64(w, "pid", getpid());
	jw_key(w, "worker_pids");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++)
		jw_i64(w, D.shm->ws[i].pid);
	jw_arr_end(w);
	jw_key(w, "worker_tids");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++)
		jw_i64(w, D.shm->ws[i].tid);
	jw_arr_end(w);
	emit_cpus(w);
	jw_kbool(w, "oversubscribed", D.oversub);
	jw_kdouble(w, "setup_s", setup_s);
	jw_key(w, "watch_paths");
	jw_arr(w);
	for (size_t i = 0; i < paths.n; i++)
		jw_utf8(w, paths.v[i]);
	jw_arr_end(w);
	emit();
	ls_strlist_free(&paths);
}

/* "per_worker":[{..},..] of the result; warns (stderr) of a worker that ran
 * out of pre-created work inside the window. */
static void emit_per_worker(struct jw *w, const struct lat_snap *s0,
			    const struct lat_snap *s1, double dur)
{
	jw_key(w, "per_worker");
	jw_arr(w);
	for (int i = 0; i < D.nworkers; i++) {
		struct ls_wstate *ws = &D.shm->ws[i];
		bool ran_out = atomic_load(&ws->ran_out) != 0;
		uint64_t ops = s1->ops[i] - s0->ops[i];
		jw_obj(w);
		jw_ki64(w, "worker", i);
		jw_ki64(w, "cpu", D.wcpu[i]);
		jw_ki64(w, "pid", ws->pid);
		jw_ki64(w, "tid", ws->tid);
		jw_ku64(w, "ops", ops);
		jw_kdouble(w, "ops_per_sec", dur > 0 ? (double)ops / dur : 0.0);
		jw_kbool(w, "ran_out", ran_out);
		jw_kbool(w, "ran_out_in_window",
			 ran_out && ws->ran_out_ns <= s1->t_ns);
		jw_kdouble(w, "setup_s", ls_ns_to_s(ws->setup_ns));
		if (D.wl->reports_precreated)
			jw_ku64(w, "precreated", ws->precreated);
		if (D.wl->aux_key)
			jw_ku64(w, D.wl->aux_key, ws->aux);
		jw_obj_end(w);
		if (ran_out && ws->ran_out_ns <= s1->t_ns)
			fprintf(stderr, LS_PROG ": warning: worker %d ran out of "
				"pre-created work during the measurement\n", i);
	}
	jw_arr_end(w);
}

/* The result: the window from s0 to s1 (released at t_go). */
void emit_result(const struct lat_snap *s0, const struct lat_snap *s1,
		 uint64_t t_go, double setup_s, const uint64_t *win_max)
{
	double dur = ls_ns_to_s(s1->t_ns - s0->t_ns);
	uint64_t total = ops_between(s0, s1);

	struct jw *w = ev_begin("result");
	jw_kstr(w, "workload", D.wl->name);
	jw_ki64(w, "workers", D.nworkers);
	jw_kdouble(w, "duration_s", dur);
	jw_kdouble(w, "warmup_s", ls_ns_to_s(s0->t_ns - t_go));
	jw_kdouble(w, "setup_s", setup_s);
	jw_ku64(w, "ops", total);
	jw_kdouble(w, "ops_per_sec", dur > 0 ? (double)total / dur : 0.0);
	jw_kbool(w, "oversubscribed", D.oversub);
	emit_cpus(w);
	jw_key(w, "params");
	jw_obj(w);
	for (int k = 0; D.wl->params && D.wl->params[k].name; k++)
		jw_ki64(w, D.wl->params[k].name, D.param[k]);
	jw_obj_end(w);
	jw_kutf8(w, "latency_clock",
		 D.no_latency ? NULL : ls_tsc_mult ? "TSC" : "CLOCK_MONOTONIC");
	emit_op_stats(w, s0, s1, win_max);
	jw_ku64(w, "measure_start_ns", s0->t_ns);
	jw_ku64(w, "measure_end_ns", s1->t_ns);
	emit_per_worker(w, s0, s1, dur);
	emit();
}
