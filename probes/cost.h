/* SPDX-License-Identifier: MIT */
/* lockscope's own cost over a window (issue 43): the run time and runs of
 * each of the probe's event programs (the kernel's BPF stats, on while a
 * window runs), and the loader's own CPU time. The programs of the
 * registered BPF objects are listed in the data event ("programs"); the
 * loader's CPU and whether the kernel counted run times in "cost". */
#ifndef LOCKSCOPE_COST_H
#define LOCKSCOPE_COST_H

#include <bpf/libbpf.h>
#include "jsonw.h"

/* an object whose programs run on events (not the iterators, which run in
 * the loader's own reads: its CPU time) */
void cost_register(struct bpf_object *obj);
void cost_unregister(struct bpf_object *obj);
/* the window's start and stop, and the poll loop's ticks between them: the
 * kernel's BPF stats on for a part of each second (an fd held while on:
 * nothing left on if the loader dies), each program's counts read */
void cost_start(void);
void cost_tick(void);
void cost_stop(void);
/* the price of one uprobe trap (a no-op uprobe on a function of the loader,
 * called with and without it: trapcost.bpf.c), measured once, before any
 * window; 0 where it cannot be (the data event says why) */
void cost_calibrate_traps(void);
/* its no-op uprobe's program, loaded beforehand (with the other loads;
 * the measuring waits until they are done) */
void cost_trap_load(void);
/* waits until the calibration's uprobe is released (at teardown) */
void cost_release(void);
/* "programs": [...], "cost": {...} */
void cost_json(struct jw *w);

#endif
