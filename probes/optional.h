/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_OPTIONAL_H
#define LOCKSCOPE_OPTIONAL_H

#include <stdbool.h>

struct contention_bpf;

/* load the optional probes after the core ones: futex waits (with futex),
 * per-thread times and wake-ups, slab caches; one that fails is reported
 * in the data event (or, for slab caches, in "slab"), not fatal.
 * optional_begin starts USDT's load in a thread, optional_end loads the
 * rest and waits for that thread: what the caller does between the two
 * (the object iterators' load) overlaps them. */
void optional_begin(struct contention_bpf *cskel, bool system_wide, bool futex, int ncpus);
void optional_end(bool futex);
void optional_destroy(void);

#endif
