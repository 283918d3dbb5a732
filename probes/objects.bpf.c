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

/* the tracked tgids, shared with contention.bpf.c (the loader reuses its fd) */
#include "maps.bpf.h"

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

static __always_inline bool fs_is(const char *fstype, const char *name, int n)
{
	for (int i = 0; i < n; i++)
		if (fstype[i] != name[i])
			return false;
	return true;
}

/* file-system private locks through sb->s_fs_info and the fs inode that
 * embeds the VFS inode; each behind a type check, so kernels without the
 * file system (or with other layouts) load the same object */
static __always_inline void ext4_locks(struct obj_file *r, void *fs_info, struct inode *inode)
{
	struct ext4_sb_info *sbi = fs_info;
	struct ext4_inode_info *ei;
	struct journal_s *j;

	if (!bpf_core_type_exists(struct ext4_sb_info) || !bpf_core_type_exists(struct ext4_inode_info))
		return;
	r->ext4_s_orphan_lock = ADDR(sbi, s_orphan_lock);
	r->ext4_s_md_lock = ADDR(sbi, s_md_lock);
	if (bpf_core_field_exists(sbi->s_es_lock))
		r->ext4_s_es_lock = ADDR(sbi, s_es_lock);
	ei = (void *)inode - bpf_core_field_offset(struct ext4_inode_info, vfs_inode);
	r->ext4_i_data_sem = ADDR(ei, i_data_sem);
	r->ext4_i_raw_lock = ADDR(ei, i_raw_lock);
	r->ext4_i_es_lock = ADDR(ei, i_es_lock);
	r->ext4_xattr_sem = ADDR(ei, xattr_sem);
	j = BPF_CORE_READ(sbi, s_journal);
	if (!j || !bpf_core_type_exists(struct journal_s))
		return;
	r->jbd2_j_state_lock = ADDR(j, j_state_lock);
	r->jbd2_j_list_lock = ADDR(j, j_list_lock);
	r->jbd2_j_checkpoint_mutex = ADDR(j, j_checkpoint_mutex);
	r->jbd2_j_barrier = ADDR(j, j_barrier);
	r->jbd2_j_history_lock = ADDR(j, j_history_lock);
	r->jbd2_j_revoke_lock = ADDR(j, j_revoke_lock);
	if (bpf_core_field_exists(j->j_abort_mutex))
		r->jbd2_j_abort_mutex = ADDR(j, j_abort_mutex);
}

static __always_inline void xfs_locks(struct obj_file *r, void *fs_info, struct inode *inode)
{
	struct xfs_mount *mp = fs_info;
	struct xfs_inode *ip;
	struct xlog *log;
	struct xfs_cil *cil;

	if (!bpf_core_type_exists(struct xfs_mount) || !bpf_core_type_exists(struct xfs_inode))
		return;
	r->xfs_m_sb_lock = ADDR(mp, m_sb_lock);
	ip = (void *)inode - bpf_core_field_offset(struct xfs_inode, i_vnode);
	r->xfs_i_lock = ADDR(ip, i_lock);
	r->xfs_i_flags_lock = ADDR(ip, i_flags_lock);
	log = BPF_CORE_READ(mp, m_log);
	if (!log)
		return;
	r->xfs_l_icloglock = ADDR(log, l_icloglock);
	cil = BPF_CORE_READ(log, l_cilp);
	if (!cil)
		return;
	r->xfs_xc_ctx_lock = ADDR(cil, xc_ctx_lock);
	r->xfs_xc_push_lock = ADDR(cil, xc_push_lock);
}

static __always_inline void btrfs_locks(struct obj_file *r, void *fs_info, struct inode *inode)
{
	struct btrfs_fs_info *fsi = fs_info;
	struct btrfs_inode *bi;
	struct btrfs_root *root;
	struct extent_buffer *eb;

	if (!bpf_core_type_exists(struct btrfs_fs_info) || !bpf_core_type_exists(struct btrfs_inode))
		return;
	r->btrfs_trans_lock = ADDR(fsi, trans_lock);
	root = BPF_CORE_READ(fsi, tree_root);
	eb = root ? BPF_CORE_READ(root, node) : NULL;
	if (eb)
		r->btrfs_tree_root_node_lock = ADDR(eb, lock);
	bi = (void *)inode - bpf_core_field_offset(struct btrfs_inode, vfs_inode);
	r->btrfs_inode_lock = ADDR(bi, lock);
	root = BPF_CORE_READ(bi, root);
	if (!root)
		return;
	r->btrfs_root_log_mutex = ADDR(root, log_mutex);
	eb = BPF_CORE_READ(root, node);
	if (eb)
		r->btrfs_root_node_lock = ADDR(eb, lock);
}

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
		if (fs_info && fs_is(r.fstype, "ext4", 5))
			ext4_locks(&r, fs_info, inode);
		else if (fs_info && fs_is(r.fstype, "xfs", 4))
			xfs_locks(&r, fs_info, inode);
		else if (fs_info && fs_is(r.fstype, "btrfs", 6))
			btrfs_locks(&r, fs_info, inode);
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

/* lruvec lock of node 0 of the task's memory cgroup (the LRU lists its page
 * cache and anonymous pages go on) */
static __always_inline __u64 lru_lock_of(struct task_struct *task)
{
	struct cgroup_subsys_state *css;
	struct mem_cgroup_per_node *pn;
	struct mem_cgroup *memcg;
	int id;

	if (!bpf_core_type_exists(struct mem_cgroup) ||
	    !bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id))
		return 0;
	id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	if (id < 0 || id >= 16)
		return 0;
	css = BPF_CORE_READ(task, cgroups, subsys[id]);
	if (!css)
		return 0;
	memcg = (void *)css - bpf_core_field_offset(struct mem_cgroup, css);
	pn = BPF_CORE_READ(memcg, nodeinfo[0]);
	if (!pn)
		return 0;
	return ADDR(pn, lruvec.lru_lock);
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
	r.pi_lock = ADDR(task, pi_lock);
	if (bpf_core_field_exists(task->thread_info.cpu))
		r.cpu = BPF_CORE_READ(task, thread_info.cpu);
	/* the runqueue through the task's CFS runqueue (CONFIG_FAIR_GROUP_SCHED):
	 * the per-CPU `runqueues` needs a data symbol this kernel may not export */
	if (bpf_core_field_exists(task->se.cfs_rq) && bpf_core_field_exists(((struct cfs_rq *)0)->rq)) {
		struct cfs_rq *cfs = BPF_CORE_READ(task, se.cfs_rq);
		struct rq *rq = cfs ? BPF_CORE_READ(cfs, rq) : NULL;

		if (rq)
			r.rq_lock = ADDR(rq, __lock);
	}
	r.lru_lock = lru_lock_of(task);
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}
