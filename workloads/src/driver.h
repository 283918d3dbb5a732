/* The driver's state (options and run-time) and the functions its files
 * share: cli.c (options), children.c (worker processes), control.c (event
 * loop and stdin protocol), events.c (JSON Lines output), phases.c (the
 * run's phases), driver.c (main). */
#ifndef LS_DRIVER_H
#define LS_DRIVER_H

#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "catalog.h"
#include "lat.h"
#include "shm.h"
#include "worker.h"

#define MAX_WORKERS 4096
#define MAX_SECONDS 1e6
#define STOP_GRACE_NS 2000000000ull
#define NO_DEADLINE UINT64_MAX
/* Longest path any workload builds below --dir, plus room for counters. */
#define DIR_RESERVE 128

struct drv {
	/* configuration */
	const struct workload *wl;
	int nworkers;
	double duration_s, warmup_s;
	double interval_s;          /* progress events in the window; 0: none */
	bool control;
	bool have_dir;
	char dir[PATH_MAX];
	int cpu_list[CPU_SETSIZE];
	int ncpu_list;
	int *wcpu;
	bool oversub;
	bool no_latency;            /* --no-latency: count ops, do not time them */
	long long param[LS_MAX_PARAMS];
	int nops;
	const char *op_names[LS_MAX_OPTYPES];

	/* runtime */
	struct ls_shm *shm;
	pid_t *child;
	bool *alive;
	int nchild, nalive;
	int sfd, devnull;
	bool stopping;
	bool stop_received;

	char in[4096];
	size_t inlen;
	bool in_eof;
};

extern struct drv D;

/* cli.c: usage, bad input (exit 2), run options into D */
void usage(FILE *f);
__attribute__((format(printf, 1, 2), noreturn))
void bad_input(const char *fmt, ...);
void parse_run_args(int argc, char **argv);

/* children.c: start, reap and kill the worker processes */
void setup_signals(void);
void start_workers(const struct ls_worker_args *args);
void kill_all_and_reap(void);
void drain_signals(void);

/* control.c: sleep until a deadline or an event; the stdin protocol */
enum { W_LINE = 1, W_READY = 2, W_EXITED = 4 };
enum { EV_TIMEOUT, EV_LINE, EV_READY, EV_EXITED };
int wait_event(uint64_t deadline, unsigned want, char *line, size_t linesz);
void wait_for_line(const char *want);

/* events.c: the JSON lines on stdout */
void print_list(void);
void emit_ready(const struct ls_run *run, double setup_s);
void emit_time_event(const char *ev, uint64_t t);
void emit_progress(const struct lat_snap *prev, const struct lat_snap *cur);
void emit_reference(const struct lat_snap *a, const struct lat_snap *b);
void emit_result(const struct lat_snap *s0, const struct lat_snap *s1,
		 uint64_t t_go, double setup_s, const uint64_t *win_max);
int report_recorded_errors(void);
void report_error(int worker, const char *op, const char *path, int err,
		  const char *msg);

/* phases.c: set-up, warm-up, timed window, stop, result */
int run(void);

#endif
