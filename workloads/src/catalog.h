/* Table of workloads and their metadata. */
#ifndef LS_CATALOG_H
#define LS_CATALOG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "shm.h"
#include "util.h"

enum ls_model { LS_MODEL_PROCESS, LS_MODEL_THREAD };

/* Error raised by the driver's shared set-up. */
struct ls_err {
	char op[32];
	char path[PATH_MAX];
	int err;
};

/* What the driver knows about a run (shared set-up, watch paths). */
struct ls_run {
	const char *dir; /* absolute, or NULL when the workload needs none */
	int nworkers;
	double warmup_s, duration_s;
	struct ls_shm *shm;
	const long long *param; /* --param values, in catalog order */
};

/* A workload parameter (--param name=value): an integer in [min, max]. */
struct ls_param {
	const char *name;
	long long def, min, max;
	const char *help;
};

struct workload {
	const char *name;
	const char *operation;
	const char *sharing;
	const char *component;
	enum ls_model model;
	bool needs_dir;
	bool reports_precreated; /* per_worker result carries "precreated" */
	/* Driver, before forking: create shared objects. 0 or -1 + *err. */
	int (*shared_setup)(const struct ls_run *run, struct ls_err *err);
	/* Worker, after pinning, before the barrier. Errors via ls_fail(). */
	void (*worker_setup)(struct ls_ctx *c);
	/* Worker hot loop: returns once the stop flag is seen. */
	void (*worker_run)(struct ls_ctx *c);
	/* Absolute paths of the key objects, for the "ready" event. */
	void (*watch_paths)(const struct ls_run *run, struct ls_strlist *out);
	/* Operation types timed separately (NULL-terminated; index = the type
	 * passed to ls_op). NULL: one type, "op", counted by ls_count. */
	const char *const *op_names;
	/* Parameters (terminated by a NULL name), or NULL: none. */
	const struct ls_param *params;
	/* Most workers allowed (0: the driver's default); many_tasks: the
	 * workers mostly sleep (I/O waits), so many per CPU is the point. */
	int max_workers;
	bool many_tasks;
	/* If set, per_worker results carry "<aux_key>": ls_wstate.aux. */
	const char *aux_key;
};

extern const struct workload ls_catalog[];
extern const size_t ls_catalog_len;

/* Case-insensitive lookup; NULL if unknown. */
const struct workload *ls_catalog_find(const char *name);

#endif
