/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* What contention.bpf.c and tasks.bpf.c both have, for the fragments they
 * share (tasktimes.bpf.h, futex_wait.bpf.h, ...): the libbpf headers,
 * probe.h, the maps of maps.bpf.h, and the globals the loader sets in each
 * object. */
#ifndef LOCKSCOPE_SHARED_BPF_H
#define LOCKSCOPE_SHARED_BPF_H

#include "maps.bpf.h"

const volatile bool system_wide = false;
/* syscall numbers of this architecture, set by the loader (from its headers) */
const volatile long nr_futex = -1;
const volatile long nr_futex_waitv = -1;

/* set by the loader: counting on/off */
bool enabled = false;
__u64 t_start = 0;            /* the window's start (bpf_ktime_get_ns), for tasktimes.bpf.h */

#endif
