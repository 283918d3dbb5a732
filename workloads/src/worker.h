/* Worker side: pinning, private set-up, start barrier, hot loop. */
#ifndef LS_WORKER_H
#define LS_WORKER_H

#include "catalog.h"

struct ls_worker_args {
	const struct workload *wl;
	struct ls_shm *shm;
	const char *dir;
	int nworkers;
	double warmup_s, duration_s;
	const int *wcpu; /* CPU of each worker */
	const long long *param; /* --param values */
};

/* Process model: body of forked worker idx. Never returns. */
_Noreturn void ls_worker_process_main(const struct ls_worker_args *a, int idx);

/* Thread model: body of the forked worker process; runs one pinned thread
 * per worker. Never returns. */
_Noreturn void ls_worker_threads_main(const struct ls_worker_args *a);

#endif
