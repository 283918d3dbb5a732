// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Iterators that compute the addresses of known lock fields of the kernel
 * objects reachable from the tracked tasks (and from the loader itself,
 * which holds O_PATH descriptors of the workload's test paths). The loader
 * matches contended lock addresses against them: a match is a verified name.
 *
 * Addresses are computed with CO-RE field offsets, so one object file works
 * across kernel versions; fields that a kernel lacks stay 0.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "probe.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u32 self_tgid = 0;
const volatile bool system_wide = false;

/* shared with contention.bpf.c (the loader reuses the map's fd) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} tracked SEC(".maps");

#define ADDR(p, field) ((__u64)__builtin_preserve_access_index(&(p)->field))

static __always_inline bool wanted(__u32 tgid, bool include_self)
{
	if (tgid == self_tgid)
		return include_self;
	if (system_wide)
		return true;
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

/* fs->lock became fs->seq (a seqlock, whose spinlock is seq.lock) in 6.x */
struct fs_struct___old {
	spinlock_t lock;
} __attribute__((preserve_access_index));

/* mm->mmap_lock was mm->mmap_sem before 5.8 */
struct mm_struct___old {
	struct rw_semaphore mmap_sem;
} __attribute__((preserve_access_index));

SEC("iter/task_file")
int lksc_iter_files(struct bpf_iter__task_file *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct obj_file r = {};
	struct inode *inode, *pinode;
	struct super_block *sb;
	struct address_space *mapping;
	struct dentry *d, *parent;
	const char *fsname;
	void *fs_info;

	if (!task || !file)
		return 0;
	r.tgid = BPF_CORE_READ(task, tgid);
	if (!wanted(r.tgid, true))
		return 0;
	inode = BPF_CORE_READ(file, f_inode);
	if (!inode)
		return 0;
	r.type = OBJ_FILE;
	r.fd = ctx->fd;
	r.inode = (__u64)inode;
	r.ino = BPF_CORE_READ(inode, i_ino);
	r.i_mode = BPF_CORE_READ(inode, i_mode);
	r.i_rwsem = ADDR(inode, i_rwsem);
	r.i_lock = ADDR(inode, i_lock);
	mapping = BPF_CORE_READ(inode, i_mapping);
	if (mapping) {
		r.i_mmap_rwsem = ADDR(mapping, i_mmap_rwsem);
		if (bpf_core_field_exists(mapping->invalidate_lock))
			r.invalidate_lock = ADDR(mapping, invalidate_lock);
	}
	sb = BPF_CORE_READ(inode, i_sb);
	if (sb) {
		r.sb = (__u64)sb;
		r.dev = BPF_CORE_READ(sb, s_dev);
		r.s_vfs_rename_mutex = ADDR(sb, s_vfs_rename_mutex);
		r.s_inode_list_lock = ADDR(sb, s_inode_list_lock);
		r.s_umount = ADDR(sb, s_umount);
		fsname = BPF_CORE_READ(sb, s_type, name);
		if (fsname)
			bpf_probe_read_kernel_str(r.fstype, sizeof(r.fstype), fsname);
		fs_info = BPF_CORE_READ(sb, s_fs_info);
		if (fs_info && bpf_core_type_exists(struct shmem_sb_info)) {
			struct shmem_sb_info *sbinfo = fs_info;

			r.shmem_stat_lock = ADDR(sbinfo, stat_lock);
			r.shmem_shrinklist_lock = ADDR(sbinfo, shrinklist_lock);
		}
	}
	d = BPF_CORE_READ(file, f_path.dentry);
	if (d) {
		r.d_lock = ADDR(d, d_lockref.lock);
		parent = BPF_CORE_READ(d, d_parent);
		if (parent && parent != d) {
			r.parent_d_lock = ADDR(parent, d_lockref.lock);
			pinode = BPF_CORE_READ(parent, d_inode);
			if (pinode) {
				r.parent_inode = (__u64)pinode;
				r.parent_i_rwsem = ADDR(pinode, i_rwsem);
				r.parent_ino = BPF_CORE_READ(pinode, i_ino);
			}
		}
	}
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}

SEC("iter/task")
int lksc_iter_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct obj_task r = {};
	struct mm_struct *mm;
	struct files_struct *files;
	struct fs_struct *fs;
	struct sighand_struct *sighand;

	if (!task)
		return 0;
	r.tgid = BPF_CORE_READ(task, tgid);
	if (!wanted(r.tgid, false))
		return 0;
	r.type = OBJ_TASK;
	r.pid = BPF_CORE_READ(task, pid);
	bpf_probe_read_kernel_str(r.comm, sizeof(r.comm), task->comm);
	mm = BPF_CORE_READ(task, mm);
	if (mm) {
		r.mm = (__u64)mm;
		if (bpf_core_field_exists(mm->mmap_lock))
			r.mmap_lock = ADDR(mm, mmap_lock);
		else
			r.mmap_lock = ADDR((struct mm_struct___old *)mm, mmap_sem);
		r.page_table_lock = ADDR(mm, page_table_lock);
	}
	files = BPF_CORE_READ(task, files);
	if (files)
		r.file_lock = ADDR(files, file_lock);
	fs = BPF_CORE_READ(task, fs);
	if (fs) {
		if (bpf_core_field_exists(fs->seq))
			r.fs_lock = ADDR(fs, seq.lock);
		else
			r.fs_lock = ADDR((struct fs_struct___old *)fs, lock);
	}
	sighand = BPF_CORE_READ(task, sighand);
	if (sighand)
		r.siglock = ADDR(sighand, siglock);
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}
