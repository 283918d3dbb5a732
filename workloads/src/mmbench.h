/* Memory-map microbenchmark (threads of one process). */
#ifndef LS_MMBENCH_H
#define LS_MMBENCH_H

#include "catalog.h"

/* mmap 4 KiB anonymous private RW memory + munmap it (page untouched). */
void mm_mmap_run(struct ls_ctx *c);

#endif
