/* SPDX-License-Identifier: MIT */
/* Go sync.Mutex / sync.RWMutex waits (gomutex.bpf.c, loader side gomutex.c):
 * the shapes both sides share, and the loader's entry points. */
#ifndef LOCKSCOPE_GOMUTEX_H
#define LOCKSCOPE_GOMUTEX_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* which semacquire a wait came through (the analyzer names them) */
enum go_sync_kind {
	GO_SYNC_MUTEX = 0,        /* internal/sync.runtime_SemacquireMutex: &Mutex.sema */
	GO_SYNC_RWMUTEX_R = 1,    /* sync.runtime_SemacquireRWMutexR: &RWMutex.readerSem */
	GO_SYNC_RWMUTEX_W = 2,    /* sync.runtime_SemacquireRWMutex: &RWMutex.writerSem */
};

/* per tracked Go process (the probes count only these): its load bias */
struct go_proc {
	__u64 bias;
};

struct go_key {
	__u64 sema;
	__u32 tgid;
	__u32 kind;
	__s32 stack_id;
	__u32 pad;
	/* the semacquire's return address (its caller's pc): at a function's
	 * entry the frame-pointer walk of stack_id skips that frame */
	__u64 ret;
};

#ifndef __VMLINUX_H__
#include <stdbool.h>
#include <stdint.h>
struct jw;

/* load gomutex.bpf.c (no uprobes yet); 0 or -errno */
int gomutex_load(int ncpus);
/* attach to the Go executables of tracked processes not seen yet (their
 * exec may come after `track`): called at start and every tick */
void gomutex_scan(int tracked_fd);
void gomutex_start(void);
void gomutex_stop(void);
/* "go_probe", "go_mutex", "go_releases", "go_stacks" keys of the data event */
void gomutex_json(struct jw *w);
void gomutex_destroy(void);
#endif

#endif
