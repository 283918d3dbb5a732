/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_FILELOCKS_H
#define LOCKSCOPE_FILELOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/types.h>

struct jw;
struct contention_bpf;

/* load and attach filelocks.bpf.c on contention.bpf.c's tgid filter (and
 * its map of threads' SQLite files, whose sleeps it times); 0 or -errno
 * (then filelocks_json says why it is unavailable) */
int filelocks_load(bool system_wide, struct contention_bpf *cskel, int ncpus);
/* clear the maps and count from now */
void filelocks_start(void);
/* stop counting; waits still open count up to t_stop */
void filelocks_stop(uint64_t t_stop);
/* read the memory maps of the processes whose sleeps have stack copies
 * (each once; the loader's tick) */
void filelocks_snapshot_maps(void);
/* fn(inode address, wait so far) for each file-lock wait counted so far,
 * by file: the time series keeps them beside the kernel's locks */
void filelocks_each_wait(void (*fn)(__u64 key, __u64 total_ns, void *ctx), void *ctx);
/* "file_lock_probe" and "file_lock_waits" keys of the data event */
void filelocks_json(struct jw *w);
void filelocks_destroy(void);

#endif
