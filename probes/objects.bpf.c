// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Iterators that compute the addresses of known lock fields of the kernel
 * objects reachable from the tracked tasks (and from the loader itself,
 * which holds O_PATH descriptors of the workload's test paths). The loader
 * matches contended lock addresses against them: a match is a verified name.
 *
 * Addresses are computed with CO-RE field offsets, so one object file works
 * across kernel versions; fields that a kernel lacks stay 0. Which fields of
 * an object are read is generated from analyzer/kernel/lockfields.toml
 * (LOCKFIELDS_<BASE> in build/lockfields.h); this file only reaches the
 * objects ("bases") they hang off.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u32 self_tgid = 0;
const volatile bool system_wide = false;

/* the tracked tgids, shared with contention.bpf.c (the loader reuses its fd) */
#include "maps.bpf.h"
#include "objects_types.h"

/* the file record is built here: it is larger than the BPF stack */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct obj_file);
} file_rec SEC(".maps");

static __always_inline bool wanted(__u32 tgid, bool include_self)
{
	if (tgid == self_tgid)
		return include_self;
	if (system_wide)
		return true;
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

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
	LOCKFIELDS_EXT4_SB(r, sbi);
	if (bpf_core_type_exists(struct mb_cache) && bpf_core_field_exists(sbi->s_ea_block_cache)) {
		struct mb_cache *ea = BPF_CORE_READ(sbi, s_ea_block_cache);

		if (ea)
			LOCKFIELDS_EXT4_EA_BLOCK_CACHE(r, ea);
	}
	ei = (void *)inode - bpf_core_field_offset(struct ext4_inode_info, vfs_inode);
	LOCKFIELDS_EXT4_INODE(r, ei);
	j = BPF_CORE_READ(sbi, s_journal);
	if (!j || !bpf_core_type_exists(struct journal_s))
		return;
	LOCKFIELDS_JOURNAL(r, j);
}

static __always_inline void xfs_locks(struct obj_file *r, void *fs_info, struct inode *inode)
{
	struct xfs_mount *mp = fs_info;
	struct xfs_inode *ip;
	struct xlog *log;
	struct xfs_cil *cil;

	if (!bpf_core_type_exists(struct xfs_mount) || !bpf_core_type_exists(struct xfs_inode))
		return;
	LOCKFIELDS_XFS_MOUNT(r, mp);
	ip = (void *)inode - bpf_core_field_offset(struct xfs_inode, i_vnode);
	LOCKFIELDS_XFS_INODE(r, ip);
	log = BPF_CORE_READ(mp, m_log);
	if (!log)
		return;
	LOCKFIELDS_XLOG(r, log);
	cil = BPF_CORE_READ(log, l_cilp);
	if (!cil)
		return;
	LOCKFIELDS_XFS_CIL(r, cil);
}

static __always_inline void btrfs_locks(struct obj_file *r, void *fs_info, struct inode *inode)
{
	struct btrfs_fs_info *fsi = fs_info;
	struct btrfs_inode *bi;
	struct btrfs_root *root;
	struct extent_buffer *eb;

	if (!bpf_core_type_exists(struct btrfs_fs_info) || !bpf_core_type_exists(struct btrfs_inode))
		return;
	LOCKFIELDS_BTRFS_FS_INFO(r, fsi);
	root = BPF_CORE_READ(fsi, tree_root);
	eb = root ? BPF_CORE_READ(root, node) : NULL;
	if (eb)
		LOCKFIELDS_BTRFS_TREE_ROOT_NODE(r, eb);
	bi = (void *)inode - bpf_core_field_offset(struct btrfs_inode, vfs_inode);
	LOCKFIELDS_BTRFS_INODE(r, bi);
	root = BPF_CORE_READ(bi, root);
	if (!root)
		return;
	LOCKFIELDS_BTRFS_ROOT(r, root);
	eb = BPF_CORE_READ(root, node);
	if (eb)
		LOCKFIELDS_BTRFS_ROOT_NODE(r, eb);
}

#define LKSC_S_IFMT 00170000
#define LKSC_S_IFSOCK 0140000
#define LKSC_AF_UNIX 1
#define LKSC_AF_INET 2

/* the socket behind a socket file: its sock, family, type, protocol and
 * addresses (IPv4 and unix; others are named by family and protocol) */
static __always_inline void socket_of(struct obj_file *r, struct socket *sock)
{
	struct sock *sk = BPF_CORE_READ(sock, sk);
	struct unix_address *ua;

	if (!sk)
		return;
	r->sk = (__u64)sk;
	r->sk_family = BPF_CORE_READ(sk, __sk_common.skc_family);
	r->sk_type = BPF_CORE_READ(sk, sk_type);
	r->sk_protocol = BPF_CORE_READ(sk, sk_protocol);
	if (r->sk_family == LKSC_AF_INET) {
		r->saddr = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		r->daddr = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		r->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
		r->dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	} else if (r->sk_family == LKSC_AF_UNIX && bpf_core_type_exists(struct unix_sock)) {
		ua = BPF_CORE_READ((struct unix_sock *)sk, addr);
		if (!ua)
			return;
		r->unix_len = BPF_CORE_READ(ua, len);
		bpf_probe_read_kernel(r->unix_path, sizeof(r->unix_path), ua->name[0].sun_path);
	}
}

/* what stands behind the file: its private data (typed by f_op->release,
 * offline), its inode's lock context and the file system's private part */
static __always_inline void behind(struct obj_file *r, struct file *file, struct inode *inode, struct super_block *sb)
{
	const struct file_operations *fop = BPF_CORE_READ(file, f_op);

	r->file = (__u64)file;
	r->f_release = fop ? (__u64)BPF_CORE_READ(fop, release) : 0;
	r->private_data = (__u64)BPF_CORE_READ(file, private_data);
	r->i_flctx = (__u64)BPF_CORE_READ(inode, i_flctx);
	if (sb)
		r->s_fs_info = (__u64)BPF_CORE_READ(sb, s_fs_info);
	if ((r->i_mode & LKSC_S_IFMT) == LKSC_S_IFSOCK && r->private_data)
		socket_of(r, (struct socket *)r->private_data);
}

SEC("iter/task_file")
int lksc_iter_files(struct bpf_iter__task_file *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	static const struct obj_file zero = {};
	struct obj_file *r;
	__u32 key = 0;
	__u32 tgid;
	struct inode *inode, *pinode;
	struct super_block *sb;
	struct address_space *mapping;
	struct dentry *d, *parent;
	const char *fsname;
	void *fs_info;

	if (!task || !file)
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	if (!wanted(tgid, true))
		return 0;
	inode = BPF_CORE_READ(file, f_inode);
	r = bpf_map_lookup_elem(&file_rec, &key);
	if (!inode || !r)
		return 0;
	*r = zero;
	r->tgid = tgid;
	r->type = OBJ_FILE;
	r->fd = ctx->fd;
	r->inode = (__u64)inode;
	r->ino = BPF_CORE_READ(inode, i_ino);
	r->i_mode = BPF_CORE_READ(inode, i_mode);
	LOCKFIELDS_INODE(r, inode);
	mapping = BPF_CORE_READ(inode, i_mapping);
	if (mapping)
		LOCKFIELDS_MAPPING(r, mapping);
	sb = BPF_CORE_READ(inode, i_sb);
	if (sb) {
		r->sb = (__u64)sb;
		r->dev = BPF_CORE_READ(sb, s_dev);
		LOCKFIELDS_SB(r, sb);
		fsname = BPF_CORE_READ(sb, s_type, name);
		if (fsname)
			bpf_probe_read_kernel_str(r->fstype, sizeof(r->fstype), fsname);
		fs_info = BPF_CORE_READ(sb, s_fs_info);
		if (fs_info && bpf_core_type_exists(struct shmem_sb_info))
			LOCKFIELDS_SHMEM_SB(r, (struct shmem_sb_info *)fs_info);
		if (fs_info && fs_is(r->fstype, "ext4", 5))
			ext4_locks(r, fs_info, inode);
		else if (fs_info && fs_is(r->fstype, "xfs", 4))
			xfs_locks(r, fs_info, inode);
		else if (fs_info && fs_is(r->fstype, "btrfs", 6))
			btrfs_locks(r, fs_info, inode);
	}
	behind(r, file, inode, sb);
	d = BPF_CORE_READ(file, f_path.dentry);
	if (d) {
		LOCKFIELDS_DENTRY(r, d);
		parent = BPF_CORE_READ(d, d_parent);
		if (parent && parent != d) {
			LOCKFIELDS_PARENT_DENTRY(r, parent);
			pinode = BPF_CORE_READ(parent, d_inode);
			if (pinode) {
				r->parent_inode = (__u64)pinode;
				LOCKFIELDS_PARENT_INODE(r, pinode);
				r->parent_ino = BPF_CORE_READ(pinode, i_ino);
			}
		}
	}
	bpf_seq_write(seq, r, sizeof(*r));
	return 0;
}

/* node 0 of the task's memory cgroup (whose lruvec holds the LRU lists its
 * page cache and anonymous pages go on) */
static __always_inline struct mem_cgroup_per_node *memcg_node_of(struct task_struct *task)
{
	struct cgroup_subsys_state *css;
	struct mem_cgroup *memcg;
	int id;

	if (!bpf_core_type_exists(struct mem_cgroup) ||
	    !bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id))
		return NULL;
	id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	if (id < 0 || id >= 16)
		return NULL;
	css = BPF_CORE_READ(task, cgroups, subsys[id]);
	if (!css)
		return NULL;
	memcg = (void *)css - bpf_core_field_offset(struct mem_cgroup, css);
	return BPF_CORE_READ(memcg, nodeinfo[0]);
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
	struct mem_cgroup_per_node *pn;

	if (!task)
		return 0;
	r.tgid = BPF_CORE_READ(task, tgid);
	if (!wanted(r.tgid, false))
		return 0;
	r.type = OBJ_TASK;
	r.pid = BPF_CORE_READ(task, pid);
	r.ppid = BPF_CORE_READ(task, real_parent, tgid);
	bpf_probe_read_kernel_str(r.comm, sizeof(r.comm), task->comm);
	mm = BPF_CORE_READ(task, mm);
	if (mm) {
		r.mm = (__u64)mm;
		LOCKFIELDS_MM(&r, mm);
	}
	r.task = (__u64)task;
	r.signal = (__u64)BPF_CORE_READ(task, signal);
	files = BPF_CORE_READ(task, files);
	r.files = (__u64)files;
	if (files)
		LOCKFIELDS_FILES(&r, files);
	fs = BPF_CORE_READ(task, fs);
	r.fs = (__u64)fs;
	if (fs) {
		struct super_block *sb = BPF_CORE_READ(fs, pwd.dentry, d_sb);

		LOCKFIELDS_FS(&r, fs);
		if (sb) {
			r.cwd_sb = (__u64)sb;
			r.cwd_fs_info = (__u64)BPF_CORE_READ(sb, s_fs_info);
			r.cwd_dev = BPF_CORE_READ(sb, s_dev);
			bpf_probe_read_kernel_str(r.cwd_fstype, sizeof(r.cwd_fstype), BPF_CORE_READ(sb, s_type, name));
		}
	}
	r.ipc_ns = (__u64)BPF_CORE_READ(task, nsproxy, ipc_ns);
	sighand = BPF_CORE_READ(task, sighand);
	r.sighand = (__u64)sighand;
	if (sighand)
		LOCKFIELDS_SIGHAND(&r, sighand);
	LOCKFIELDS_TASK(&r, task);
	if (bpf_core_field_exists(task->thread_info.cpu))
		r.cpu = BPF_CORE_READ(task, thread_info.cpu);
	/* the runqueue through the task's CFS runqueue (CONFIG_FAIR_GROUP_SCHED):
	 * the per-CPU `runqueues` needs a data symbol this kernel may not export */
	if (bpf_core_field_exists(task->se.cfs_rq) && bpf_core_field_exists(((struct cfs_rq *)0)->rq)) {
		struct cfs_rq *cfs = BPF_CORE_READ(task, se.cfs_rq);
		struct rq *rq = cfs ? BPF_CORE_READ(cfs, rq) : NULL;

		if (rq)
			LOCKFIELDS_RQ(&r, rq);
	}
	pn = memcg_node_of(task);
	if (pn)
		LOCKFIELDS_MEMCG_NODE(&r, pn);
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}

/* ---- every mounted file system -------------------------------------------
 * A lock inside a superblock or its file system's own part (a tmpfs's
 * used_blocks counter, ext4's free-cluster counter, ...) is named wherever
 * the program's files are, not only where an open file or a working
 * directory reaches it. The kernel's list of superblocks (s_list) is walked
 * from the first task's working directory, once per snapshot (the loader
 * clears sbs_walked before each); the list's head, the kernel's global
 * super_blocks, lies in the kernel image and is passed over. */
#define MAX_SUPER_BLOCKS 512
#define KERNEL_IMAGE_START 0xffffffff80000000ULL

bool sbs_walked = false;

static __always_inline void emit_sb(struct seq_file *seq, struct super_block *sb)
{
	struct obj_sb r = { .type = OBJ_SB };

	r.sb = (__u64)sb;
	r.s_fs_info = (__u64)BPF_CORE_READ(sb, s_fs_info);
	r.dev = BPF_CORE_READ(sb, s_dev);
	bpf_probe_read_kernel_str(r.fstype, sizeof(r.fstype), BPF_CORE_READ(sb, s_type, name));
	bpf_seq_write(seq, &r, sizeof(r));
}

struct sb_walk {
	struct seq_file *seq;
	struct list_head *head, *node;
	__u64 off;
};

/* bpf_loop callback: the next superblock of the list (the verifier sees it
 * once, not once per superblock) */
static long sb_next(__u32 i, void *data)
{
	struct sb_walk *w = data;
	struct list_head *node = w->node;

	node = BPF_CORE_READ(node, next);
	if (!node || node == w->head)
		return 1;
	if ((__u64)node < KERNEL_IMAGE_START)
		emit_sb(w->seq, (struct super_block *)((__u64)node - w->off));
	w->node = node;
	return 0;
}

SEC("iter/task")
int lksc_iter_sbs(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct sb_walk w = { .seq = ctx->meta->seq, .off = bpf_core_field_offset(struct super_block, s_list) };
	struct super_block *start;

	if (!task || sbs_walked)
		return 0;
	start = BPF_CORE_READ(task, fs, pwd.dentry, d_sb);
	if (!start)
		return 0;
	sbs_walked = true;
	emit_sb(w.seq, start);
	w.head = w.node = (struct list_head *)((__u64)start + w.off);
	bpf_loop(MAX_SUPER_BLOCKS, sb_next, &w, 0);
	return 0;
}
