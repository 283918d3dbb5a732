// SPDX-License-Identifier: MIT
/* Runs the object iterators, resolves each file's path while its descriptor
 * is open, and keeps one entry per inode / per process across snapshots. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "objects.h"

#define SET_SLOTS (1u << 17)   /* open addressing; twice the entries we keep */
#define MAX_ENTRIES (SET_SLOTS / 2)

struct file_entry {
	struct obj_file r;
	char path[512];
};

static struct file_entry *files;
static unsigned int nfiles;
static struct obj_task *tasks;
static unsigned int ntasks;
/* hash set of object keys: inode addresses (kernel pointers) for files and
 * cpu << 32 | pid (below 2^47) for threads, so the two never collide; 0 is
 * empty */
static uint64_t *seen;
static unsigned int dropped;    /* objects not kept: table full */

static bool set_add(uint64_t key)
{
	uint64_t h = key * 0x9e3779b97f4a7c15ULL;

	for (unsigned int i = 0; i < SET_SLOTS; i++) {
		unsigned int slot = (unsigned int)((h >> 40) + i) & (SET_SLOTS - 1);

		if (seen[slot] == key)
			return false;
		if (seen[slot] == 0) {
			seen[slot] = key;
			return true;
		}
	}
	return false;
}

int objects_init(void)
{
	files = calloc(MAX_ENTRIES, sizeof(*files));
	tasks = calloc(MAX_ENTRIES, sizeof(*tasks));
	seen = calloc(SET_SLOTS, sizeof(*seen));
	if (!files || !tasks || !seen)
		return -ENOMEM;
	return 0;
}

void objects_reset(void)
{
	nfiles = ntasks = dropped = 0;
	memset(seen, 0, SET_SLOTS * sizeof(*seen));
}

static void keep_file(const struct obj_file *r)
{
	char link[64];
	struct file_entry *e;
	ssize_t n;

	if (!set_add(r->inode))
		return;
	if (nfiles >= MAX_ENTRIES) {
		dropped++;
		return;
	}
	e = &files[nfiles++];
	e->r = *r;
	snprintf(link, sizeof(link), "/proc/%u/fd/%u", r->tgid, r->fd);
	n = readlink(link, e->path, sizeof(e->path) - 1);
	e->path[n > 0 ? n : 0] = '\0';
}

static void keep_task(const struct obj_task *r)
{
	/* one entry per thread and CPU it was seen on: threads share mm, files,
	 * fs and sighand, but each has its pi_lock, and each CPU its runqueue */
	if (!set_add(((uint64_t)r->cpu << 32) | r->pid))
		return;
	if (ntasks >= MAX_ENTRIES) {
		dropped++;
		return;
	}
	tasks[ntasks++] = *r;
}

static int run_iter(struct bpf_link *link, size_t rec_size, void (*keep)(const void *))
{
	static char buf[1 << 16];
	size_t have = 0;
	int fd = bpf_iter_create(bpf_link__fd(link));

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - have);
		size_t off = 0;

		if (n < 0) {
			/* EAGAIN: the kernel stopped a long walk without output; read on */
			if (errno == EINTR || errno == EAGAIN)
				continue;
			int err = -errno;
			close(fd);
			return err;
		}
		if (n == 0)
			break;
		have += (size_t)n;
		for (; have - off >= rec_size; off += rec_size)
			keep(buf + off);
		memmove(buf, buf + off, have - off);
		have -= off;
	}
	close(fd);
	return 0;
}

static void keep_file_cb(const void *p) { keep_file(p); }
static void keep_task_cb(const void *p) { keep_task(p); }

int objects_snapshot(struct bpf_link *files_it, struct bpf_link *tasks_it)
{
	int err = run_iter(files_it, sizeof(struct obj_file), keep_file_cb);

	if (err)
		return err;
	return run_iter(tasks_it, sizeof(struct obj_task), keep_task_cb);
}

/* file-system private lock fields, only those the iterator filled in */
static void fs_private_json(struct jw *w, const struct obj_file *r)
{
#define FS_LOCK(field) { #field, offsetof(struct obj_file, field) }
	static const struct { const char *key; size_t off; } fields[] = {
		FS_LOCK(ext4_s_orphan_lock), FS_LOCK(ext4_s_md_lock), FS_LOCK(ext4_s_es_lock),
		FS_LOCK(jbd2_j_state_lock), FS_LOCK(jbd2_j_list_lock), FS_LOCK(jbd2_j_checkpoint_mutex),
		FS_LOCK(jbd2_j_barrier), FS_LOCK(jbd2_j_history_lock), FS_LOCK(jbd2_j_revoke_lock),
		FS_LOCK(jbd2_j_abort_mutex), FS_LOCK(ext4_i_data_sem), FS_LOCK(ext4_i_raw_lock),
		FS_LOCK(ext4_i_es_lock), FS_LOCK(ext4_xattr_sem),
		FS_LOCK(xfs_m_sb_lock), FS_LOCK(xfs_l_icloglock), FS_LOCK(xfs_xc_ctx_lock),
		FS_LOCK(xfs_xc_push_lock), FS_LOCK(xfs_i_lock), FS_LOCK(xfs_i_flags_lock),
		FS_LOCK(btrfs_trans_lock), FS_LOCK(btrfs_tree_root_node_lock), FS_LOCK(btrfs_root_node_lock),
		FS_LOCK(btrfs_root_log_mutex), FS_LOCK(btrfs_inode_lock),
	};
#undef FS_LOCK
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		__u64 v;

		memcpy(&v, (const char *)r + fields[i].off, sizeof(v));
		if (v)
			jw_khex(w, fields[i].key, v);
	}
}

void objects_json(struct jw *w)
{
	jw_key(w, "objects");
	jw_obj(w);
	jw_ku64(w, "dropped", dropped);
	jw_key(w, "files");
	jw_arr(w);
	for (unsigned int i = 0; i < nfiles; i++) {
		const struct obj_file *r = &files[i].r;

		jw_obj(w);
		jw_kstr(w, "path", files[i].path);
		jw_ku64(w, "tgid", r->tgid);
		jw_ku64(w, "fd", r->fd);
		jw_ku64(w, "ino", r->ino);
		jw_ku64(w, "mode", r->i_mode);
		jw_ku64(w, "dev", r->dev);
		jw_kstr(w, "fstype", r->fstype);
		jw_khex(w, "inode", r->inode);
		jw_khex(w, "sb", r->sb);
		jw_khex(w, "i_rwsem", r->i_rwsem);
		jw_khex(w, "i_lock", r->i_lock);
		jw_khex(w, "i_mmap_rwsem", r->i_mmap_rwsem);
		jw_khex(w, "invalidate_lock", r->invalidate_lock);
		jw_khex(w, "d_lock", r->d_lock);
		jw_khex(w, "parent_d_lock", r->parent_d_lock);
		jw_khex(w, "parent_inode", r->parent_inode);
		jw_khex(w, "parent_i_rwsem", r->parent_i_rwsem);
		jw_ku64(w, "parent_ino", r->parent_ino);
		jw_khex(w, "s_vfs_rename_mutex", r->s_vfs_rename_mutex);
		jw_khex(w, "s_inode_list_lock", r->s_inode_list_lock);
		jw_khex(w, "s_umount", r->s_umount);
		jw_khex(w, "shmem_stat_lock", r->shmem_stat_lock);
		jw_khex(w, "shmem_shrinklist_lock", r->shmem_shrinklist_lock);
		fs_private_json(w, r);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	jw_key(w, "tasks");
	jw_arr(w);
	for (unsigned int i = 0; i < ntasks; i++) {
		const struct obj_task *r = &tasks[i];

		jw_obj(w);
		jw_ku64(w, "tgid", r->tgid);
		jw_ku64(w, "pid", r->pid);
		jw_kstr(w, "comm", r->comm);
		jw_khex(w, "mm", r->mm);
		jw_khex(w, "mmap_lock", r->mmap_lock);
		jw_khex(w, "page_table_lock", r->page_table_lock);
		jw_khex(w, "file_lock", r->file_lock);
		jw_khex(w, "fs_lock", r->fs_lock);
		jw_khex(w, "siglock", r->siglock);
		jw_khex(w, "pi_lock", r->pi_lock);
		jw_ku64(w, "cpu", r->cpu);
		if (r->rq_lock)
			jw_khex(w, "rq_lock", r->rq_lock);
		if (r->lru_lock)
			jw_khex(w, "lru_lock", r->lru_lock);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	jw_obj_end(w);
}
