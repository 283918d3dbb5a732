/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_OPTIONAL_H
#define LOCKSCOPE_OPTIONAL_H

#include <stdbool.h>

struct contention_bpf;

/* load the optional probes after the core ones: futex waits (with futex),
 * per-thread times and wake-ups, slab caches; one that fails is reported
 * in the data event (or, for slab caches, in "slab"), not fatal */
void optional_load(struct contention_bpf *cskel, bool system_wide, bool futex, int ncpus);
void optional_destroy(void);

#endif
