/* SPDX-License-Identifier: MIT */
/* Types shared by the BPF programs and the loader, one header per probe
 * (as libbpf-tools' klockstat.h): the loader includes them all here; a BPF
 * object or fragment includes the ones it uses. Each is free of kernel or
 * libc headers: both sides include it after their own. */
#ifndef LOCKSCOPE_PROBE_H
#define LOCKSCOPE_PROBE_H

#include "common_types.h"
#include "contention_types.h"
#include "futex_types.h"
#include "kmem_types.h"
#include "ktext_types.h"
#include "objects_types.h"
#include "tasks_types.h"
#include "usdt_types.h"
#include "filelocks_types.h"

#endif
