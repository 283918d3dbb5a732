/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* The kernel's struct file_lock as filelocks.bpf.c and inject.bpf.c read
 * it: Linux 6.9+ (its struct file_lock_core `c`) or the layout before. */
#ifndef LOCKSCOPE_FILELOCK_BPF_H
#define LOCKSCOPE_FILELOCK_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define F_UNLCK 2

/* the kernel's layout before Linux 6.9 (no file_lock_core) */
struct file_lock___old {
	struct file_lock___old *fl_blocker;
	fl_owner_t fl_owner;
	unsigned int fl_flags;
	unsigned char fl_type;
	pid_t fl_pid;
	loff_t fl_start;
	loff_t fl_end;
};

/* the type of request fl: F_RDLCK 0, F_WRLCK 1, F_UNLCK 2 */
static __always_inline __u32 request_type(void *fl)
{
	if (bpf_core_field_exists(struct file_lock, c))
		return BPF_CORE_READ((struct file_lock *)fl, c.flc_type);
	return BPF_CORE_READ((struct file_lock___old *)fl, fl_type);
}

/* the first byte of request fl's range */
static __always_inline __s64 request_start(void *fl)
{
	if (bpf_core_field_exists(struct file_lock, c))
		return BPF_CORE_READ((struct file_lock *)fl, fl_start);
	return BPF_CORE_READ((struct file_lock___old *)fl, fl_start);
}

#endif
