/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_TASKS_H
#define LOCKSCOPE_TASKS_H

#include <stdbool.h>
#include <stdint.h>

struct jw;

/* load and attach tasks.bpf.c, sharing contention.bpf.c's tgid filter,
 * per-thread times (filled by its sched_switch program) and counters and,
 * when futex_open_fd >= 0, its open futex waits, and its threads' state
 * (tstate: the lock releasers' last off-CPU spans, holders.bpf.h), the USDT
 * waits open per thread (usdtwait.bpf.h) and the file-lock waits
 * (flkopen.bpf.h); 0 or -errno (then
 * tasks_json reports the probe as unavailable with the reason) */
int tasks_load(bool system_wide, int tracked_fd, int task_times_fd, int task_counters_fd, int futex_open_fd,
	       int tstate_fd, int usdt_waiting_fd, int usdt_held_fd, int flk_open_fd, int ncpus);
/* a USDT probe is attached: releases of USDT-named locks are looked for
 * from now on */
void tasks_usdt_on(void);
/* clear the maps and count from t_start */
void tasks_start(uint64_t t_start);
/* while the window runs (every tick): move the wake-up edges out of their
 * map when it is a quarter full, so that it never fills */
/* the wake-up map drained where a quarter full (the poll loop looks every
 * DRAIN_MS: a fork storm's tens of thousands of edges a second fill it
 * within one tick) */
void tasks_drain_wakeups(void);
void tasks_drain(void);
/* stop counting; threads on or off CPU at stop count up to t_stop */
void tasks_stop(uint64_t t_stop);
/* "tasks_probe", "tasks", "wakeups" keys of the data event */
void tasks_json(struct jw *w);
/* task_* counters, inside the "counters" object */
void tasks_counters_json(struct jw *w);
/* the entry of the "maps" object */
void tasks_map_use_json(struct jw *w);
void tasks_destroy(void);

#endif
