/* SPDX-License-Identifier: MIT */
/* lockscope's cost budget (--max-overhead PCT, issue 43): see budget.c. */
#ifndef LOCKSCOPE_BUDGET_H
#define LOCKSCOPE_BUDGET_H

#include <stdbool.h>
#include <linux/types.h>

struct jw;

/* what a step of the ladder lowers */
enum budget_knob {
	KNOB_STACK_RATE,      /* kernel stacks walked per second per CPU (--stack-rate) */
	KNOB_TIMED_RATE,      /* spin and mutex waits timed per second per CPU (--timed-rate) */
	KNOB_OBJECTS_MS,      /* the objects' snapshot period, ms (--interval-ms) */
	KNOB__MAX,
};

/* sets a knob in the running probe (loader.c) */
typedef void (*budget_apply_fn)(enum budget_knob knob, long value);

/* max_share: the budget as a share of the machine's CPUs (0: none, the
 * costs are still recorded per period); start: the knobs' values at each
 * window's start (the options') */
void budget_init(double max_share, const long start[KNOB__MAX], int ncpus, budget_apply_fn apply);
/* a window starts: every knob back at its start value */
void budget_start(__u64 now_ns);
/* one period's measured cost (cost.c, once a second): its programs' run
 * time and their uprobes' traps scaled from the stretch the kernel counted
 * them in (`runs`: the programs' runs, scaled likewise), and the loader's
 * CPU time; over the budget, the next step (not after the `last`, which
 * ends with the window); the last step judged */
void budget_period(__u64 now_ns, __u64 period_ns, __u64 bpf_ns, __u64 runs, __u64 traps_ns, __u64 loader_ns,
		   bool last);
/* "budget": the budget, the periods and the steps shed */
void budget_json(struct jw *w);

#endif
