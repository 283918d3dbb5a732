/* User-space lock microbenchmarks (threads of one process). */
#ifndef LS_PTHBENCH_H
#define LS_PTHBENCH_H

#include "catalog.h"

/* Lock one global pthread mutex, a little work on shared data, unlock. */
void pth_pmutex_run(struct ls_ctx *c);

/* The same with a private mutex and private data per thread (scales). */
void pth_pmutexl_setup(struct ls_ctx *c);
void pth_pmutexl_run(struct ls_ctx *c);

#endif
