// SPDX-License-Identifier: MIT
/* lockscope's cost budget (--max-overhead PCT, issue 43). Once a second,
 * at the end of each stretch the kernel counted the programs' run times
 * (cost.c), the probe's cost in the period since the last one is its
 * programs' run time and its uprobes' traps (both scaled from the stretch
 * to the period) and the loader's own CPU time, as a share of the
 * machine's CPUs. Every period is recorded. Where a budget is set and a
 * period's share is over it, the next step of the ladder is shed: one
 * sampling rate lowered, one step a period, none given back within the
 * window (a step's saving shows in the next period; going back and forth
 * would make the figures' precision change with every second), except a
 * step that did not pay: judged on the period after it against the period
 * before it, one that saved less than a tenth of what it aims at (a step
 * on the programs' side: their time per run, as the workload's rate moves;
 * the objects' period: the loader's CPU share) is given back at once.
 *
 * Each step lowers a rate whose figures already stand for what was not
 * sampled: a lock's stacks for all its waits, a timed wait for the untimed
 * ones, the objects of the last snapshot for the window. So a step costs
 * precision, not names; the record lists the steps, and the analysis
 * says what each left out. The steps do not reach the uprobes' traps (a
 * trap comes with every call the probe is attached to) nor the tracepoint
 * programs' entry: a budget they take up alone cannot be kept, and the
 * record says so (shed_exhausted). */
#include <stdio.h>
#include <string.h>
#include <linux/types.h>
#include "probe.h"
#include "jsonw.h"
#include "budget.h"

#define MAX_PERIODS 3600     /* an hour of periods; beyond, the budget is kept, the periods not recorded */

/* the ladder, cheapest precision first: each step a knob and its new value
 * (taken only where it is below the knob's value then) */
static const struct step {
	enum budget_knob knob;
	long value;
} ladder[] = {
	{ KNOB_STACK_RATE, 100 },       /* 500 -> 100 stacks per second per CPU */
	{ KNOB_TIMED_RATE, 2000 },      /* 10,000 -> 2,000 timed waits per second per CPU */
	{ KNOB_OBJECTS_MS, 5000 },      /* the objects every 5 s instead of every second */
	{ KNOB_STACK_RATE, 20 },
	{ KNOB_TIMED_RATE, 500 },
};
#define NSTEPS (sizeof(ladder) / sizeof(ladder[0]))

static const char *const knob_names[KNOB__MAX] = {
	[KNOB_STACK_RATE] = "stack_rate",
	[KNOB_TIMED_RATE] = "timed_rate",
	[KNOB_OBJECTS_MS] = "objects_ms",
};

struct period {
	__u64 t_ns;          /* its end, from the window's start */
	__u64 period_ns, bpf_ns, runs, traps_ns, loader_ns;
	unsigned int level;  /* steps taken before it ended */
};

struct shed {
	__u64 t_ns;          /* from the window's start */
	enum budget_knob knob;
	long from, to;
	bool given_back;     /* it saved too little: the rate went back */
};

#define PAYOFF 0.10          /* the least saving a step keeps its place for */

static double max_share;
static long start_values[KNOB__MAX], values[KNOB__MAX];
static int ncpus = 1;
static budget_apply_fn apply;
static __u64 t0;
static unsigned int next_step, nsteps;
static struct shed steps[NSTEPS];     /* each step of the ladder taken once at most */
static struct period periods[MAX_PERIODS];
static unsigned int nperiods;
static bool exhausted;
static struct period before;     /* the period that ended with the last step */
static bool judging;             /* the last step awaits the next period's judgement */

void budget_init(double share, const long start[KNOB__MAX], int n, budget_apply_fn fn)
{
	max_share = share;
	memcpy(start_values, start, sizeof(start_values));
	ncpus = n > 0 ? n : 1;
	apply = fn;
}

void budget_start(__u64 now_ns)
{
	for (int k = 0; k < KNOB__MAX; k++) {
		if (values[k] != start_values[k] && apply)
			apply(k, start_values[k]);
		values[k] = start_values[k];
	}
	t0 = now_ns;
	next_step = nsteps = nperiods = 0;
	exhausted = judging = false;
}

/* a rate of 0 samples nothing out (every stack walked, every wait timed) */
static bool lowers(enum budget_knob knob, long to)
{
	long from = values[knob];

	if (knob == KNOB_OBJECTS_MS)
		return to > from;
	return from == 0 || to < from;
}

static void set(enum budget_knob knob, long value)
{
	values[knob] = value;
	if (apply)
		apply(knob, value);
}

/* false where no step is left */
static bool shed_next(__u64 now_ns)
{
	while (next_step < NSTEPS && !lowers(ladder[next_step].knob, ladder[next_step].value))
		next_step++;
	if (next_step == NSTEPS) {
		exhausted = true;
		return false;
	}
	const struct step *s = &ladder[next_step++];

	steps[nsteps++] = (struct shed){ .t_ns = now_ns - t0, .knob = s->knob, .from = values[s->knob],
					 .to = s->value };
	set(s->knob, s->value);
	return true;
}

/* what a step aims at: the programs' time per run, or the loader's CPU share */
static double aim(enum budget_knob knob, const struct period *p)
{
	if (knob == KNOB_OBJECTS_MS)
		return p->period_ns ? (double)p->loader_ns / p->period_ns : 0;
	return p->runs ? (double)p->bpf_ns / p->runs : 0;
}

void budget_period(__u64 now_ns, __u64 period_ns, __u64 bpf_ns, __u64 runs, __u64 traps_ns, __u64 loader_ns,
		   bool last)
{
	struct period p = { .t_ns = now_ns - t0, .period_ns = period_ns, .bpf_ns = bpf_ns, .runs = runs,
			    .traps_ns = traps_ns, .loader_ns = loader_ns, .level = nsteps };
	double share;

	if (!period_ns)
		return;
	if (nperiods < MAX_PERIODS)
		periods[nperiods++] = p;
	if (judging && !last) {     /* the last period is cut by the stop: it judges nothing */
		struct shed *st = &steps[nsteps - 1];
		double was = aim(st->knob, &before), is = aim(st->knob, &p);

		judging = false;
		if (was > 0 && is > was * (1 - PAYOFF)) {
			st->given_back = true;
			set(st->knob, st->from);
		}
	}
	share = (double)(bpf_ns + traps_ns + loader_ns) / ((double)period_ns * ncpus);
	if (max_share > 0 && share > max_share && !last && shed_next(now_ns)) {
		before = p;
		judging = true;
	}
}

void budget_json(struct jw *w)
{
	if (max_share > 0)
		jw_kdouble(w, "max_share", max_share);
	jw_key(w, "periods");
	jw_arr(w);
	for (unsigned int i = 0; i < nperiods; i++)
		EMIT_ROW_COST_PERIODS(w, &periods[i]);
	jw_arr_end(w);
	if (max_share > 0) {
		jw_key(w, "shed");
		jw_arr(w);
		for (unsigned int i = 0; i < nsteps; i++)
			EMIT_ROW_COST_SHED(w, &steps[i]);
		jw_arr_end(w);
		jw_kbool(w, "shed_exhausted", exhausted);
	}
}
