/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_FUTEX_H
#define LOCKSCOPE_FUTEX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>

/* the futex syscalls the BPF programs recognize a wait by (futex_wait.bpf.h):
 * futex.bpf.c, tasks.bpf.c and contention.bpf.c (its off-CPU stacks) */
#ifndef __NR_futex_waitv
#define __NR_futex_waitv 449
#endif

struct jw;

/* load and attach futex.bpf.c, sharing the tgid filter map; 0 or -errno
 * (then futex_json reports the probe as unavailable with the reason) */
int futex_load(bool system_wide, int tracked_fd, int ncpus);
void futex_start(void);
/* stop counting; waits still open count up to t_stop */
void futex_stop(uint64_t t_stop);
/* read /proc/PID/maps of the processes seen waiting (periodically and at
 * stop, while they are alive) */
void futex_snapshot_maps(void);
/* "futex_probe", "futex", "user_stacks", "user_stack_copies", "user_maps"
 * keys of the data event */
void futex_json(struct jw *w);
/* futex_* counters, inside the "counters" object */
void futex_counters_json(struct jw *w);
/* entries of the "programs" array (recursion misses) and the "maps" object */
void futex_programs_json(struct jw *w);
void futex_map_use_json(struct jw *w);
bool futex_attached(void);
/* the fd of futex.bpf.c's open waits by thread id (tasks.bpf.c reads them);
 * -1 when the probe is not loaded */
int futex_open_fd(void);
void futex_destroy(void);

#endif
