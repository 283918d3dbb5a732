// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * File-lock waits: POSIX record locks (fcntl F_SETLKW), OFD locks
 * (F_OFD_SETLKW), flock(2) and lease breaks, timed from the kernel's own
 * filelock tracepoints and named by the lock that blocked them.
 *
 * A blocking request that conflicts is queued under a held lock and its
 * task sleeps: posix_lock_inode / flock_lock_inode return
 * FILE_LOCK_DEFERRED, and the tracepoint at their end sees the request
 * with its flc_blocker set. The wait begins there (its first deferral: a
 * waiter woken and beaten to the lock is deferred again, one wait) and
 * ends at the thread's next posix_lock_inode / flock_lock_inode that does
 * not defer (the lock taken, or an error), or at fcntl_setlk's end (an
 * interrupted F_SETLKW). A lease break waits between break_lease_block and
 * break_lease_unblock for the leases of the file.
 *
 * The blocker is followed up its tree (the kernel queues a request under
 * an earlier waiter it conflicts with) to the held lock: its kind, type,
 * range and the process that took it (flc_pid) name what was waited for.
 * A non-blocking try that fails (F_SETLK, F_OFD_SETLK: EAGAIN) opens a
 * busy wait instead (FLK_BUSY): a program that retries later (SQLite's
 * busy handler sleeps and tries again; it never blocks in the kernel)
 * waits from that try to its next lock taken on the same file. The held
 * lock it met is looked for among the file's POSIX locks (another owner,
 * an overlapping range, one of the two a write lock).
 *
 * Threads of one process whose connections share SQLite's in-memory lock
 * of a database file find it held without a system call; their busy
 * sleeps are timed by contention.bpf.c (sqlitesleeps.bpf.h) from the file
 * of each thread's last successful lock call on SQLite's lock bytes, noted
 * here in flk_sqlite.
 *
 * Aggregated by (file, held lock, holder, waiting thread): count, total,
 * max. Waits still open at stop are added by the loader (filelocks.c).
 */
#include "maps.bpf.h"
#include "filelocks_types.h"
#include "filelock.bpf.h"
#include "flkshared.bpf.h"
#include "flkopen.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define FILE_LOCK_DEFERRED 1
#define EAGAIN 11
#define POSIX_SCAN 16       /* a file's POSIX locks looked at for the one a failed try met */
#define BLOCKER_DEPTH 8     /* blocker-tree levels followed to the held lock */

const volatile bool system_wide = false;
const volatile __u32 self_tgid = 0;
bool enabled = false;

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AGG_ENTRIES);
	__type(key, struct flk_key);
	__type(value, struct flk_stat);
} flk_stats SEC(".maps");

/* the waits open on each file (an inode's releases are kept while any) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);                 /* struct inode * */
	__type(value, __s64);
} flk_waiters SEC(".maps");

/* releases of a file's locks with waiters, by process and release site */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FLK_RELEASES);
	__type(key, struct flk_release_key);
	__type(value, __u64);               /* releases */
} flk_releases SEC(".maps");

/* the locked files' paths by inode (flk_path), built in a per-CPU buffer */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, __u64);                 /* struct inode * */
	__type(value, struct flk_path);
} flk_paths SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flk_path);
} flk_path_buf SEC(".maps");

/* the inode's path below its file system's root, once per inode */
static __always_inline void note_path(struct inode *inode)
{
	__u64 key = (__u64)inode;
	__u32 zero = 0;
	struct hlist_node *alias;
	struct dentry *d, *parent;
	struct flk_path *p;

	if (bpf_map_lookup_elem(&flk_paths, &key))
		return;
	p = bpf_map_lookup_elem(&flk_path_buf, &zero);
	alias = BPF_CORE_READ(inode, i_dentry.first);
	if (!p || !alias)
		return;
	d = (struct dentry *)((__u64)alias - bpf_core_field_offset(struct dentry, d_u.d_alias));
	p->depth = 0;
	p->more = 0;
	for (int i = 0; i < FLK_PATH_DEPTH; i++) {
		parent = BPF_CORE_READ(d, d_parent);
		if (!parent || parent == d)          /* the file system's root */
			break;
		bpf_probe_read_kernel_str(p->names[i], FLK_NAME_LEN, BPF_CORE_READ(d, d_name.name));
		p->depth = i + 1;
		d = parent;
	}
	if (p->depth == FLK_PATH_DEPTH && d && BPF_CORE_READ(d, d_parent) != d)
		p->more = 1;
	bpf_map_update_elem(&flk_paths, &key, p, BPF_NOEXIST);
}

COUNTERS_MAP(flk_counters, FLK__MAX, flk_count);

static __always_inline bool traced(__u32 tgid)
{
	if (system_wide)
		return tgid != self_tgid;
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

/* the held lock at the root of fl's blocker tree, described into k */
static __always_inline bool held_lock(void *fl, struct flk_key *k)
{
	if (bpf_core_field_exists(struct file_lock, c)) {
		/* file_lock and file_lease start with their file_lock_core */
		struct file_lock_core *c = &((struct file_lock *)fl)->c, *b;

		b = BPF_CORE_READ(c, flc_blocker);
		if (!b)
			return false;
		for (int i = 0; i < BLOCKER_DEPTH; i++) {
			struct file_lock_core *up = BPF_CORE_READ(b, flc_blocker);

			if (!up)
				break;
			b = up;
		}
		k->flags = BPF_CORE_READ(b, flc_flags) & FLK_KINDS;
		k->type = BPF_CORE_READ(b, flc_type);
		k->holder_tgid = BPF_CORE_READ(b, flc_pid);
		if (k->flags & (FLK_POSIX | FLK_OFDLCK)) {
			struct file_lock *bl = (struct file_lock *)b;

			k->start = BPF_CORE_READ(bl, fl_start);
			k->end = BPF_CORE_READ(bl, fl_end);
		}
		return true;
	} else {
		struct file_lock___old *b = BPF_CORE_READ((struct file_lock___old *)fl, fl_blocker);

		if (!b)
			return false;
		for (int i = 0; i < BLOCKER_DEPTH; i++) {
			struct file_lock___old *up = BPF_CORE_READ(b, fl_blocker);

			if (!up)
				break;
			b = up;
		}
		k->flags = BPF_CORE_READ(b, fl_flags) & FLK_KINDS;
		k->type = BPF_CORE_READ(b, fl_type);
		k->holder_tgid = BPF_CORE_READ(b, fl_pid);
		if (k->flags & (FLK_POSIX | FLK_OFDLCK)) {
			k->start = BPF_CORE_READ(b, fl_start);
			k->end = BPF_CORE_READ(b, fl_end);
		}
		return true;
	}
}

/* the first lease of the inode: the one a lease break waits for */
static __always_inline bool held_lease(struct inode *inode, struct flk_key *k)
{
	struct file_lock_context *ctx = BPF_CORE_READ(inode, i_flctx);
	struct list_head *first;
	struct file_lease *l;

	if (!ctx || !bpf_core_type_exists(struct file_lease))
		return false;
	first = BPF_CORE_READ(ctx, flc_lease.next);
	if (!first || first == &ctx->flc_lease)
		return false;
	l = (void *)first - bpf_core_field_offset(struct file_lease, c.flc_list);
	k->flags = FLK_LEASE;
	k->type = BPF_CORE_READ(l, c.flc_type);
	k->holder_tgid = BPF_CORE_READ(l, c.flc_pid);
	return true;
}

/* the held lock that made the non-blocking request fl fail: the first of
 * the inode's POSIX locks (at most POSIX_SCAN) of another owner whose range
 * overlaps, one of the two a write lock (CO-RE: Linux 6.9+'s layout) */
static __always_inline bool conflicting_posix(struct inode *inode, void *fl, struct flk_key *k)
{
	struct file_lock *req = fl;
	struct file_lock_context *ctx;
	struct list_head *head, *pos;
	fl_owner_t owner;
	loff_t start, end;
	unsigned char type;

	if (!bpf_core_field_exists(struct file_lock, c))
		return false;
	ctx = BPF_CORE_READ(inode, i_flctx);
	if (!ctx)
		return false;
	owner = BPF_CORE_READ(req, c.flc_owner);
	type = BPF_CORE_READ(req, c.flc_type);
	start = BPF_CORE_READ(req, fl_start);
	end = BPF_CORE_READ(req, fl_end);
	head = &ctx->flc_posix;
	pos = BPF_CORE_READ(head, next);
	for (int i = 0; i < POSIX_SCAN && pos && pos != head; i++) {
		struct file_lock *l = (void *)pos - bpf_core_field_offset(struct file_lock, c.flc_list);
		loff_t ls = BPF_CORE_READ(l, fl_start), le = BPF_CORE_READ(l, fl_end);
		unsigned char lt = BPF_CORE_READ(l, c.flc_type);

		if (BPF_CORE_READ(l, c.flc_owner) != owner && ls <= end && start <= le &&
		    (lt == 1 || type == 1)) {           /* F_WRLCK */
			k->flags = BPF_CORE_READ(l, c.flc_flags) & FLK_KINDS;
			k->type = lt;
			k->holder_tgid = BPF_CORE_READ(l, c.flc_pid);
			k->start = ls;
			k->end = le;
			return true;
		}
		pos = BPF_CORE_READ(pos, next);
	}
	return false;
}

static __always_inline void holder_comm(__s32 pid, char *comm)
{
	struct task_struct *t;

	if (!bpf_task_from_pid || pid <= 0)   /* a kernel without the kfunc: no name */
		return;
	t = bpf_task_from_pid(pid);
	if (!t)
		return;
	bpf_probe_read_kernel_str(comm, 16, t->group_leader->comm);
	bpf_task_release(t);
}

static __always_inline void waiters_add(__u64 inode, __s64 n)
{
	__s64 *w = bpf_map_lookup_elem(&flk_waiters, &inode);

	if (!w && n > 0 && bpf_map_update_elem(&flk_waiters, &inode, &n, BPF_NOEXIST))
		w = bpf_map_lookup_elem(&flk_waiters, &inode);   /* another CPU made it */
	if (w)
		__sync_fetch_and_add(w, n);
}

/* the current thread let go of a lock of the file (an unlock, or a close):
 * while others wait for the file and it waits for none, its release site,
 * once per (process, ip, sp) copied; the releases counted by it */
static __always_inline void released(struct inode *inode)
{
	__u64 id = bpf_get_current_pid_tgid(), one = 1, *n;
	struct flk_release_key k = { .inode = (__u64)inode, .tgid = id >> 32 };
	__s64 *w = bpf_map_lookup_elem(&flk_waiters, &k.inode);
	__u32 tid = (__u32)id;
	struct pt_regs *regs;

	/* a waiter letting go of its other locks (SQLite's writer, its SHARED
	 * lock after the RESERVED one failed) releases nothing waited for */
	if (!w || *w <= 0 || !enabled || !traced(k.tgid) || bpf_map_lookup_elem(&flk_open, &tid))
		return;
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	k.copy = flk_stack_copy(regs, k.tgid);
	n = bpf_map_lookup_elem(&flk_releases, &k);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&flk_releases, &k, &one, BPF_NOEXIST);
}

/* a deferred request of the current thread: its wait begins, or goes on
 * (woken and blocked again: the holder now is the last one seen); busy: a
 * non-blocking try that failed */
static __always_inline void begin(struct inode *inode, void *fl, bool lease, bool busy, bool posix)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct flk_open *o, fresh = {};

	if (!enabled || !traced(tgid))
		return;
	fresh.key.inode = (__u64)inode;
	fresh.key.ino = BPF_CORE_READ(inode, i_ino);
	fresh.key.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	fresh.key.tid = tid;
	fresh.key.tgid = tgid;
	note_path(inode);
	if (busy) {
		flk_count(FLK_BUSY_BEGIN);
		if (!posix || !conflicting_posix(inode, fl, &fresh.key)) {
			flk_count(FLK_BUSY_NO_HOLDER);
			fresh.key.holder_tgid = -1;
			fresh.key.flags = posix ? FLK_POSIX : FLK_FLOCK;
			fresh.key.type = request_type(fl);
		}
		fresh.key.flags |= FLK_BUSY;
	} else if (!(lease ? held_lease(inode, &fresh.key) : held_lock(fl, &fresh.key))) {
		flk_count(FLK_NO_BLOCKER);
		fresh.key.holder_tgid = -1;
		if (lease)
			fresh.key.flags = FLK_LEASE;
	}
	holder_comm(fresh.key.holder_tgid, fresh.holder_comm);
	o = bpf_map_lookup_elem(&flk_open, &tid);
	if (o) {
		if (!busy)
			flk_count(FLK_REDEFERRED);
		fresh.start = o->start;
	} else {
		if (!busy)
			flk_count(FLK_BEGIN);
		fresh.start = bpf_ktime_get_ns();
		waiters_add(fresh.key.inode, 1);
	}
	if (bpf_map_update_elem(&flk_open, &tid, &fresh, BPF_ANY))
		flk_count(FLK_OPEN_FULL);
}

/* the current thread's open wait, if any, ends now */
static __always_inline void end(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct flk_open *o = bpf_map_lookup_elem(&flk_open, &tid);

	if (!o)
		return;
	waiters_add(o->key.inode, -1);
	flk_count(flk_add_wait(&flk_stats, o, bpf_ktime_get_ns() - o->start) ? FLK_END : FLK_STATS_FULL);
	bpf_map_delete_elem(&flk_open, &tid);
}

/* a busy wait ends at the next lock the thread takes on the same file
 * (an unlock between two tries, or a lock of another file, does not end it) */
static __always_inline void busy_tried(struct inode *inode, void *fl)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct flk_open *o = bpf_map_lookup_elem(&flk_open, &tid);

	if (!o || !(o->key.flags & FLK_BUSY))
		end();
	else if (o->key.inode == (__u64)inode && request_type(fl) != F_UNLCK)
		end();
}

/* a lock call on SQLite's lock bytes that succeeded: the file the thread's
 * sleeps may be waiting for (sqlitesleeps.bpf.h); one that failed opens a
 * busy wait here, which its sleeps are part of */
static __always_inline void note_sqlite(struct inode *inode, void *fl, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct flk_sqlite q = {};
	__s64 start = request_start(fl);

	if (start < SQLITE_LOCK_FIRST || start > SQLITE_LOCK_LAST || !enabled || !traced(id >> 32))
		return;
	if (ret) {
		bpf_map_delete_elem(&flk_sqlite, &tid);
		return;
	}
	q.inode = (__u64)inode;
	q.ino = BPF_CORE_READ(inode, i_ino);
	q.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	note_path(inode);
	bpf_map_update_elem(&flk_sqlite, &tid, &q, BPF_ANY);
}

static __always_inline void lock_tried(struct inode *inode, void *fl, int ret, bool posix)
{
	if (posix)
		note_sqlite(inode, fl, ret);
	if (ret == FILE_LOCK_DEFERRED) {
		begin(inode, fl, false, false, posix);
	} else if (ret == -EAGAIN) {
		begin(inode, fl, false, true, posix);
	} else if (ret == 0) {
		if (request_type(fl) == F_UNLCK)
			released(inode);
		busy_tried(inode, fl);
	} else {
		end();
	}
}

SEC("tp_btf/posix_lock_inode")
int BPF_PROG(lksc_posix_lock, struct inode *inode, void *fl, int ret)
{
	if (!inode || !fl)
		return 0;
	lock_tried(inode, fl, ret, true);
	return 0;
}

SEC("tp_btf/flock_lock_inode")
int BPF_PROG(lksc_flock_lock, struct inode *inode, void *fl, int ret)
{
	if (!inode || !fl)
		return 0;
	lock_tried(inode, fl, ret, false);
	return 0;
}

/* the end of fcntl(F_SETLK*): an F_SETLKW interrupted by a signal ends
 * here (a busy wait goes on: the F_SETLK that failed just opened it) */
SEC("tp_btf/fcntl_setlk")
int BPF_PROG(lksc_fcntl_setlk, struct inode *inode, void *fl, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct flk_open *o = bpf_map_lookup_elem(&flk_open, &tid);

	if (o && !(o->key.flags & FLK_BUSY))
		end();
	return 0;
}

SEC("tp_btf/break_lease_block")
int BPF_PROG(lksc_lease_block, struct inode *inode, void *fl)
{
	if (!inode || !fl)
		return 0;
	begin(inode, fl, true, false, false);
	return 0;
}

SEC("tp_btf/break_lease_unblock")
int BPF_PROG(lksc_lease_unblock, struct inode *inode, void *fl)
{
	end();
	return 0;
}
