/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * usdt.bpf.c's counters (UCNT_*, the loader's "counters" event), and
 * ucount() to bump one: in a header of their own so that usdt.bpf.c and
 * jvmframes.bpf.h, which both count, can each include it, in any order.
 */
#ifndef LOCKSCOPE_USDTCOUNTERS_BPF_H
#define LOCKSCOPE_USDTCOUNTERS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "maps.bpf.h"
#include "usdt_types.h"

COUNTERS_MAP(usdt_counters, UCNT__MAX, ucount);

#endif
