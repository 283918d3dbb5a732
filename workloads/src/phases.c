/* The run's phases: set-up, release and warm-up, the timed window (with
 * progress snapshots), the hold until "stop", stopping, the result.
 *
 * The warm-up has two parts. The first (half the warm-up, at least 0.3 s,
 * never more than the warm-up) ends with a "reference" event: the rate of
 * the workload before any recording, which lockscope compares with the
 * window's to see how much its probes slowed the point (lockscope/measure/runner.py
 * starts them when it reads the event). The rest of the warm-up lets the
 * probes settle before the window. The driver does not wait for the
 * orchestrator in between: a controller that ignores the event works as
 * before. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver.h"
#include "util.h"

/* The memory the workers share with the driver: header, op counters,
 * worker states, latency histograms (one cache-line-aligned block each). */
static void setup_shm(void)
{
	size_t head = (sizeof(struct ls_shm) + LS_CACHELINE - 1) &
		      ~(size_t)(LS_CACHELINE - 1);
	size_t cnt = (size_t)D.nworkers * sizeof(struct ls_counter);
	size_t wst = (size_t)D.nworkers * sizeof(struct ls_wstate);
	size_t stride = (sizeof(struct ls_lat) +
			 (size_t)D.nops * sizeof(struct ls_hist) +
			 LS_CACHELINE - 1) & ~(size_t)(LS_CACHELINE - 1);
	size_t lat = (size_t)D.nworkers * stride;
	char *p = mmap(NULL, head + cnt + wst + lat, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror(LS_PROG ": error: mmap");
		exit(1);
	}
	D.shm = (struct ls_shm *)p;
	D.shm->driver_pid = getpid();
	D.shm->files_budget = UINT64_MAX;
	D.shm->counters = (struct ls_counter *)(p + head);
	D.shm->ws = (struct ls_wstate *)(p + head + cnt);
	D.shm->lat = p + head + cnt + wst;
	D.shm->lat_stride = stride;
	D.shm->nops = D.nops;
	D.shm->timing = !D.no_latency;
	if (D.shm->timing)
		ls_tsc_calibrate(); /* before the workers fork: they inherit it */
}

/* Snapshots: the window's ends (sn0, sn1) and two that alternate as the
 * progress intervals' ends. */
static struct lat_snap sn0, sn1, snp[2];
/* The maxima of the window, folded in from every snapshot taken in it. */
static uint64_t win_max[LS_MAX_OPTYPES];

/* Snapshot of every worker's ops and histograms; folds the maxima taken
 * into the window's. */
static uint64_t snapshot(struct lat_snap *s)
{
	lat_take(D.shm, D.nworkers, s);
	for (int k = 0; k < D.nops; k++)
		if (s->a[k].max_ns > win_max[k])
			win_max[k] = s->a[k].max_ns;
	return s->t_ns;
}

/* Worker i runs on cpu_list[i % len]. */
static void assign_cpus(void)
{
	D.wcpu = ls_xcalloc((size_t)D.nworkers, sizeof(*D.wcpu));
	for (int i = 0; i < D.nworkers; i++)
		D.wcpu[i] = D.cpu_list[i % D.ncpu_list];
	D.oversub = D.nworkers > D.ncpu_list;
}

/* 1. set-up: shared objects, then workers (private set-up, barrier); the
 * "ready" event. 0, or 1 after an error event. */
static int set_up(const struct ls_run *runinfo, double *setup_s)
{
	struct ls_worker_args args = {
		.param = D.param,
		.wl = D.wl,
		.shm = D.shm,
		.dir = runinfo->dir,
		.nworkers = D.nworkers,
		.warmup_s = D.warmup_s,
		.duration_s = D.duration_s,
		.wcpu = D.wcpu,
	};
	uint64_t t_setup = ls_now_ns();

	if (D.wl->shared_setup) {
		struct ls_err e = { .err = 0 };
		if (D.wl->shared_setup(runinfo, &e) != 0) {
			report_error(-1, e.op, e.path, e.err, strerror(e.err));
			return 1;
		}
	}
	start_workers(&args);
	wait_event(NO_DEADLINE, W_READY, NULL, 0);
	*setup_s = ls_ns_to_s(ls_now_ns() - t_setup);
	emit_ready(runinfo, *setup_s);
	return 0;
}

/* The first part of the warm-up, the reference: half of it, at least
 * REFERENCE_MIN_S, at most all of it. */
#define REFERENCE_MIN_S 0.3
static double reference_s(void)
{
	double half = D.warmup_s / 2;
	if (half >= REFERENCE_MIN_S)
		return half;
	return D.warmup_s < REFERENCE_MIN_S ? D.warmup_s : REFERENCE_MIN_S;
}

/* 2. release the workers, measure the reference (the "reference" event),
 * warm up the rest. Returns the time of the release. */
static uint64_t release_and_warm_up(void)
{
	uint64_t t_go = ls_now_ns();

	atomic_store(&D.shm->go, 1);
	ls_futex_wake(&D.shm->go, INT_MAX);
	/* the interval snapshots are free until the window */
	snapshot(&snp[0]);
	wait_event(t_go + (uint64_t)(reference_s() * 1e9), 0, NULL, 0);
	snapshot(&snp[1]);
	emit_reference(&snp[0], &snp[1]);
	wait_event(t_go + (uint64_t)(D.warmup_s * 1e9), 0, NULL, 0);
	return t_go;
}

/* 3./4. the measurement window (from sn0 to sn1), with a progress event
 * every interval. */
static void measure(void)
{
	uint64_t t0 = snapshot(&sn0);
	memset(win_max, 0, sizeof(win_max)); /* the window's maxima only */
	emit_time_event("measure_start", t0);
	uint64_t t_end = t0 + (uint64_t)(D.duration_s * 1e9);
	const struct lat_snap *prev = &sn0;
	if (D.interval_s > 0) {
		uint64_t step = (uint64_t)(D.interval_s * 1e9);
		int flip = 0;
		for (uint64_t next = t0 + step; next < t_end; next += step) {
			wait_event(next, 0, NULL, 0);
			struct lat_snap *cur = &snp[flip ^= 1];
			snapshot(cur);
			emit_progress(prev, cur);
			prev = cur;
		}
	}
	wait_event(t_end, 0, NULL, 0);
	uint64_t t1 = snapshot(&sn1);
	/* the last (possibly shorter) interval ends with the window */
	if (D.interval_s > 0 && t1 - prev->t_ns > 1000000)
		emit_progress(prev, &sn1);
	emit_time_event("measure_end", t1);
}

/* 6. stop the workers (kill those that do not stop in time). */
static void stop_workers(void)
{
	D.stopping = true;
	atomic_store(&D.shm->stop, 1);
	ls_futex_wake(&D.shm->stop, INT_MAX);
	atomic_store(&D.shm->go, 1); /* in case one is still at the barrier */
	ls_futex_wake(&D.shm->go, INT_MAX);
	if (wait_event(ls_now_ns() + STOP_GRACE_NS, W_EXITED, NULL, 0) !=
	    EV_EXITED) {
		fprintf(stderr, LS_PROG ": warning: %d worker process(es) did not "
				"stop within 2 s; killing them\n", D.nalive);
		kill_all_and_reap();
	}
}

int run(void)
{
	double setup_s;

	lat_snap_init(&sn0, D.nworkers);
	lat_snap_init(&sn1, D.nworkers);
	lat_snap_init(&snp[0], D.nworkers);
	lat_snap_init(&snp[1], D.nworkers);
	assign_cpus();
	D.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (D.devnull < 0) {
		perror(LS_PROG ": error: /dev/null");
		return 1;
	}
	setup_signals();
	setup_shm();

	struct ls_run runinfo = {
		.dir = D.have_dir ? D.dir : NULL,
		.nworkers = D.nworkers,
		.warmup_s = D.warmup_s,
		.duration_s = D.duration_s,
		.shm = D.shm,
		.param = D.param,
	};
	if (set_up(&runinfo, &setup_s) != 0)
		return 1;
	if (D.control)
		wait_for_line("go");
	uint64_t t_go = release_and_warm_up();
	measure();
	/* 5. control mode: keep running until "stop" */
	if (D.control) {
		wait_for_line("stop");
		D.stop_received = true;
	}
	stop_workers();
	if (report_recorded_errors() > 0)
		return 1;
	emit_result(&sn0, &sn1, t_go, setup_s, win_max);
	return 0;
}
