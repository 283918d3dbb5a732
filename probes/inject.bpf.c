// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Delay injection for `lockscope confirm`: make one lock's critical sections
 * longer by a busy wait of a set number of nanoseconds ("inside"), or add the
 * same wait just outside them ("outside", the control), and count what was
 * added. The two differ only in where the wait falls: a lock that limits
 * throughput passes on an inside wait in full, and absorbs an outside one.
 *
 * Kernel locks: lock:contention_end with ret 0 (the waiter has just
 * acquired the lock): only contended acquisitions get a wait, as with perf
 * lock contention -J (every release of a mutex or rwsem would need fentry
 * or kprobes on their functions, which kernels like this one's refuse).
 * A lock with tracepoints of its own gets a wait at every acquisition:
 * mm->mmap_lock (mmap_lock:mmap_lock_acquire_returned, the control at
 * mmap_lock_start_locking, before it is taken). The `locks` map says which
 * way each lock is delayed (enum inject_site).
 * A kernel mutex or rwsem can also be sampled in time (SITE_TICK): at a
 * timer tick on a CPU running a tracked task, the lock's owner word says
 * whether that task holds it (write-held, for an rwsem): the inside wait
 * runs if it does, the outside one if it does not. Critical sections then
 * get waits in proportion to their time, contended or not, as Coz's
 * virtual speed-ups sample the code. The wait runs in the timer's
 * interrupt: the loader caps it like a spinlock's.
 * A mutex's end fires with its wait_lock still held, so the mutex's waiters
 * queue behind it as they would behind the holder. The outside wait of such
 * an acquisition runs at the task's next return from a system call
 * (raw_syscalls:sys_exit), where no lock of the call is held.
 * User locks (uprobes on the lock's functions, e.g. pthread_mutex_unlock):
 * the inside wait runs before every release, contended or not; the outside
 * one on entry to the acquire function, before the lock is taken. A lock
 * whose lock and unlock are inlined (Rust's std Mutex) is reached by its
 * contended paths only: the inside wait on return from its contended
 * acquire (lock_contended: the lock is held then), the outside one on
 * return from its wake-up of a waiter (wake: after the release and the
 * futex wake; on entry to it the lock is free but its waiter still asleep,
 * so a wait there delays the hand-off as one inside would).
 *
 * A file's locks (POSIX, OFD, flock; by the file's inode, SITE_FILE_LOCK):
 * the inside wait after every lock taken on it (filelock:posix_lock_inode
 * and flock_lock_inode with 0, the lock in place), the outside one after
 * every release (the same tracepoints, an F_UNLCK request). Both fire after
 * the file's lock-list spinlock is dropped.
 *
 * Only the tracked processes are delayed. Delays are set from user space
 * through .bss (0: off); the loader caps them (inject.c).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "inject.h"
#include "filelock.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

volatile __u64 inside_ns;          /* the wait inside the critical section */
volatile __u64 outside_ns;         /* the wait outside it (the control) */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INJECT_MAX_TGIDS);
	__type(key, __u32);
	__type(value, __u8);
} tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INJECT_MAX_LOCKS);
	__type(key, __u64);
	__type(value, __u8);
} locks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INJECT_MAX_LOCKS);
	__type(key, struct ulock_key);
	__type(value, __u8);
} ulocks SEC(".maps");

/* thread id -> outside waits owed by contended kernel acquisitions, paid at
 * its next system call return */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, INJECT_MAX_TGIDS * 4);
	__type(key, __u32);
	__type(value, __u32);
} owed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, INJ_NR);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void add(__u32 k, __u64 v)
{
	__u64 *c = bpf_map_lookup_elem(&counts, &k);

	if (c)
		*c += v;
}

static long until(__u64 i, void *deadline)
{
	return bpf_ktime_get_ns() >= *(__u64 *)deadline;
}

/* busy-wait ns nanoseconds; count it under slot k */
static __always_inline void spin(__u64 ns, __u32 k)
{
	__u64 start = bpf_ktime_get_ns(), deadline = start + ns;

	bpf_loop(INJECT_MAX_LOOPS, until, &deadline, 0);
	add(k, 1);
	add(k + 1, bpf_ktime_get_ns() - start);
}

static __always_inline bool tracked(__u32 tgid)
{
	return bpf_map_lookup_elem(&tgids, &tgid) != NULL;
}

SEC("tp_btf/contention_end")
int BPF_PROG(inject_acquired, void *lock, int ret)
{
	__u64 in = inside_ns, out = outside_ns, addr = (__u64)lock, id;

	__u8 *site;

	if ((!in && !out) || ret)
		return 0;
	site = bpf_map_lookup_elem(&locks, &addr);
	if (!site || *site != SITE_CONTENDED)
		return 0;
	id = bpf_get_current_pid_tgid();
	if (!tracked(id >> 32))
		return 0;
	if (in)
		spin(in, INJ_LOCK);
	if (out) {
		__u32 tid = (__u32)id, one = 1, *n = bpf_map_lookup_elem(&owed, &tid);

		if (n)
			__sync_fetch_and_add(n, 1);
		else
			bpf_map_update_elem(&owed, &tid, &one, BPF_ANY);
	}
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(inject_syscall_done, struct pt_regs *regs, long ret)
{
	__u64 out = outside_ns;
	__u32 tid, *n, times;

	if (!out)
		return 0;
	tid = (__u32)bpf_get_current_pid_tgid();
	n = bpf_map_lookup_elem(&owed, &tid);
	if (!n)
		return 0;
	times = *n < INJECT_MAX_OWED ? *n : INJECT_MAX_OWED;
	bpf_map_delete_elem(&owed, &tid);
	spin(out * times, INJ_CONTROL);
	/* counted as that many waits */
	add(INJ_CONTROL, times - 1);
	return 0;
}

/* ---- kernel mutexes and rwsems, sampled in time ----------------------- */

volatile __u64 tick_lock;          /* the lock sampled (SITE_TICK) */
volatile __u32 tick_rwsem;         /* 1: an rw_semaphore, 0: a mutex */

#define OWNER_FLAGS 0x7UL          /* the flag bits of a mutex's or rwsem's owner word */
#define RWSEM_READER_OWNED 0x1UL

SEC("perf_event")
int inject_tick(struct bpf_perf_event_data *ctx)
{
	__u64 lock = tick_lock, in = inside_ns, out = outside_ns, owner = 0, off;

	if (!lock || (!in && !out) || !tracked(bpf_get_current_pid_tgid() >> 32))
		return 0;
	off = tick_rwsem ? bpf_core_field_offset(struct rw_semaphore, owner) : bpf_core_field_offset(struct mutex, owner);
	bpf_probe_read_kernel(&owner, sizeof(owner), (void *)(lock + off));
	if ((owner & ~OWNER_FLAGS) == (__u64)bpf_get_current_task_btf() && !(tick_rwsem && (owner & RWSEM_READER_OWNED))) {
		if (in)
			spin(in, INJ_LOCK);
	} else if (out) {
		spin(out, INJ_CONTROL);
	}
	return 0;
}

/* ---- mm->mmap_lock: every acquisition ----------------------------------- */

static __always_inline bool mmap_lock_of(struct mm_struct *mm)
{
	__u64 addr = (__u64)&mm->mmap_lock;
	__u8 *site = bpf_map_lookup_elem(&locks, &addr);

	return site && *site == SITE_MMAP_LOCK && tracked(bpf_get_current_pid_tgid() >> 32);
}

SEC("tp_btf/mmap_lock_acquire_returned")
int BPF_PROG(inject_mmap_locked, struct mm_struct *mm, bool write, bool success)
{
	__u64 in = inside_ns;

	if (in && success && mmap_lock_of(mm))
		spin(in, INJ_LOCK);
	return 0;
}

SEC("tp_btf/mmap_lock_start_locking")
int BPF_PROG(inject_mmap_locking, struct mm_struct *mm, bool write)
{
	__u64 out = outside_ns;

	if (out && mmap_lock_of(mm))
		spin(out, INJ_CONTROL);
	return 0;
}

/* ---- a file's locks: every acquisition and release ------------------------ */

static __always_inline void file_lock_done(struct inode *inode, void *fl, int ret)
{
	__u64 in = inside_ns, out = outside_ns, addr = (__u64)inode;
	__u8 *site;

	if (ret || (!in && !out))
		return;
	site = bpf_map_lookup_elem(&locks, &addr);
	if (!site || *site != SITE_FILE_LOCK || !tracked(bpf_get_current_pid_tgid() >> 32))
		return;
	if (request_type(fl) == F_UNLCK) {
		if (out)
			spin(out, INJ_CONTROL);
	} else if (in) {
		spin(in, INJ_LOCK);
	}
}

SEC("tp_btf/posix_lock_inode")
int BPF_PROG(inject_posix_done, struct inode *inode, void *fl, int ret)
{
	if (inode && fl)
		file_lock_done(inode, fl, ret);
	return 0;
}

SEC("tp_btf/flock_lock_inode")
int BPF_PROG(inject_flock_done, struct inode *inode, void *fl, int ret)
{
	if (inode && fl)
		file_lock_done(inode, fl, ret);
	return 0;
}

/* ---- user locks ------------------------------------------------------------ */

/* a user lock of `ulocks`: its address is the first argument (C ABI, or
 * Go's register ABI: ax on x86-64) */
static __always_inline bool user_lock(struct pt_regs *ctx)
{
	struct ulock_key k = { .tgid = bpf_get_current_pid_tgid() >> 32 };

	k.addr = PT_REGS_PARM1(ctx);
	if (bpf_map_lookup_elem(&ulocks, &k))
		return true;
#if defined(__TARGET_ARCH_x86)
	k.addr = ctx->ax;
	k.go = 1;
	return bpf_map_lookup_elem(&ulocks, &k) != NULL;
#else
	return false;
#endif
}

SEC("uprobe")
int inject_release(struct pt_regs *ctx)
{
	__u64 in = inside_ns;

	if (in && user_lock(ctx))
		spin(in, INJ_LOCK);
	return 0;
}

/* thread id -> the lock its contended acquire or wake-up was called on
 * (a thread is in one of them at a time) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, INJECT_MAX_TGIDS * 4);
	__type(key, __u32);
	__type(value, __u64);
} called_on SEC(".maps");

SEC("uprobe")
int inject_contended_entry(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 addr = PT_REGS_PARM1(ctx);

	if (inside_ns || outside_ns)
		bpf_map_update_elem(&called_on, &tid, &addr, BPF_ANY);
	return 0;
}

/* on return from a contended path: ns of waits under slot k, if the lock
 * it was called on is one of ours */
static __always_inline int contended_return(__u64 ns, __u32 k)
{
	__u64 id = bpf_get_current_pid_tgid(), *addr;
	__u32 tid = (__u32)id;
	struct ulock_key key = { .tgid = id >> 32 };

	addr = bpf_map_lookup_elem(&called_on, &tid);
	if (!addr)
		return 0;
	key.addr = *addr;
	bpf_map_delete_elem(&called_on, &tid);
	if (ns && bpf_map_lookup_elem(&ulocks, &key))
		spin(ns, k);
	return 0;
}

SEC("uretprobe")
int inject_contended_return(struct pt_regs *ctx)
{
	return contended_return(inside_ns, INJ_LOCK);
}

SEC("uretprobe")
int inject_wake_return(struct pt_regs *ctx)
{
	return contended_return(outside_ns, INJ_CONTROL);
}

SEC("uprobe")
int inject_acquire(struct pt_regs *ctx)
{
	__u64 out = outside_ns;

	if (out && user_lock(ctx))
		spin(out, INJ_CONTROL);
	return 0;
}
