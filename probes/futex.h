/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_FUTEX_H
#define LOCKSCOPE_FUTEX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>

/* the futex syscalls the BPF programs recognize a wait by (futex_wait.bpf.h):
 * contention.bpf.c (futex waits, off-CPU stacks) and tasks.bpf.c */
#ifndef __NR_futex_waitv
#define __NR_futex_waitv 449
#endif

struct jw;

struct contention_bpf;

/* futex waits, the futex part of contention.bpf.c's sched_switch program
 * (futexwaits.bpf.h), loaded with it when asked (--futex): its maps are the
 * contention skeleton's */
void futex_init(struct contention_bpf *cskel, int ncpus);
void futex_start(void);
/* stop counting; waits still open count up to t_stop */
void futex_stop(uint64_t t_stop);
/* read /proc/PID/maps of the processes seen waiting (periodically and at
 * stop, while they are alive) */
void futex_snapshot_maps(void);
/* read (again) the memory maps of one process, for its user stacks */
void futex_read_maps(uint32_t tgid);
/* "futex_probe", "futex", "user_stacks", "user_stack_copies", "user_maps"
 * keys of the data event */
void futex_json(struct jw *w);
/* futex_* counters, inside the "counters" object */
void futex_counters_json(struct jw *w);
/* the "maps" object's futex_stats entry */
void futex_map_use_json(struct jw *w);
bool futex_attached(void);
/* the fd of the open futex waits by thread id (tasks.bpf.c reads them);
 * -1 without futex waits */
int futex_open_fd(void);
void futex_destroy(void);

#endif
