/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Owners: who owned a kernel mutex or rwsem when a tracked thread began to
 * wait for it, and what the owner was doing. Called by contention.bpf.c's
 * contention_begin, for the waits it walks a stack for (waitsampling.bpf.h's
 * budget), so the looks cost no more than the walks they ride on.
 *
 * A mutex's and an rwsem's `owner` word holds the owning task's pointer with
 * flag bits below it (mutex: 3 bits; rwsem: reader-owned, non-spinnable). A
 * reader-owned rwsem has no one owner (the word keeps the last reader: not
 * the holder). The waiter reads the word where it waits anyway; the owner is
 * taken by pid (bpf_task_from_pid, a counted reference, dropped before the
 * program ends) and compared with the pointer, so a task that exited is not
 * read. An owner on a CPU is running its critical section (a mutex waiter
 * spins only while its owner runs): no stack is read off a running task,
 * whose saved stack is stale. An owner off CPU, if tracked, has its
 * switch-out stack, task state and the lock or futex it waits on in its task
 * storage (offcpu.bpf.h): that is what it does while it holds the lock
 * (asleep in a journal commit, preempted, waiting for another lock).
 *
 * A mutex waiter looks when it begins to spin and again when it gives up and
 * sleeps; an rwsem waiter (it begins only to sleep) once. The looks are
 * counted by (lock, waiter's process, what the owner did): the analyzer turns
 * them into shares of the looks, beside the release sites of holders.bpf.h,
 * which see only the waits a wake-up ended.
 */
#ifndef LOCKSCOPE_OWNERS_BPF_H
#define LOCKSCOPE_OWNERS_BPF_H

#include "contention.bpf.h"
#include "futex_wait.bpf.h"

#define OWNER_ENTRIES       4096
#define MUTEX_FLAG_BITS     0x07UL
#define RWSEM_READER_OWNED  0x01UL
#define RWSEM_FLAG_BITS     0x03UL
#define GLIBC_MUTEX_OWNER   8           /* pthread_mutex_t.__data.__owner, after __lock and __count */
#define FUTEX_TID_BITS      0x3fffffffU /* a PI futex word's owner tid */
#define PID_MAX             (1U << 22)  /* PID_MAX_LIMIT on 64-bit */

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, OWNER_ENTRIES);
	__type(key, struct owner_key);
	__type(value, struct owner_stat);
} owners SEC(".maps");

/* whether the owner of a wait with these flags can be read: a mutex, or an
 * rwsem (read or write; not a per-CPU rwsem or an rt_mutex) */
static __always_inline bool owner_readable(__u32 flags)
{
	if (flags & LCB_F_MUTEX)
		return true;
	return (flags & (LCB_F_READ | LCB_F_WRITE)) && !(flags & (LCB_F_PERCPU | LCB_F_RT | LCB_F_SPIN));
}

/* what the owner, task `pid`, does, in k (it must be the task at `ptr`
 * where ptr is not 0, and of process `tgid` where tgid is not 0: else
 * left OWNER_NONE); its tid and comm in s */
static __always_inline void owner_doing(__u32 pid, __u64 ptr, __u32 tgid, struct owner_key *k,
					struct owner_stat *s)
{
	struct task_struct *t = bpf_task_from_pid(pid);
	struct task_state *ots;
	struct owner_key seen = *k;

	if (!t)
		return;                 /* exited: OWNER_NONE */
	/* read through t (trusted) first, compared with ptr last: after an
	 * equality test the compiler may read through the pointer read from
	 * the lock, which the verifier refuses */
	seen.owner_tgid = t->tgid;
	s->owner_tid = t->pid;
	bpf_probe_read_kernel_str(s->owner_comm, sizeof(s->owner_comm), t->comm);
	if (t->on_cpu) {
		seen.how = OWNER_RUNNING;
	} else {
		ots = bpf_task_storage_get(&tstate, t, NULL, 0);
		if (!ots || ots->gen != generation) {
			seen.how = OWNER_UNTRACKED;
		} else if (ots->off_start) {
			seen.how = OWNER_OFF_CPU;
			seen.stack_id = ots->off_stack;
			seen.state = ots->off_state;
			seen.act_lock = ots->off_lock;
		} else {
			/* switched in, not yet marked on a CPU: running */
			seen.how = OWNER_RUNNING;
		}
	}
	/* else its pid was taken by another task, or a futex's neighbour
	 * word was no owner's tid */
	if ((!ptr || (__u64)t == ptr) && (!tgid || seen.owner_tgid == tgid))
		*k = seen;
	bpf_task_release(t);
}

static __always_inline void count_look(struct cpu_state *cs, const struct owner_key *k,
				       const struct owner_stat *fresh)
{
	struct owner_stat *s = bpf_map_lookup_elem(&owners, k);

	count(cs, CNT_OWNER_LOOKS);
	if (!s) {
		bpf_map_update_elem(&owners, k, fresh, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&owners, k);
		if (!s) {
			count(cs, CNT_OWNERS_FULL);
			return;
		}
	}
	__sync_fetch_and_add(&s->count, 1);
}

/* a sampled waiter on kernel lock `lock` looks at its owner */
static __noinline void look_at_owner(struct cpu_state *cs, __u64 lock, __u32 flags)
{
	struct owner_key k = { .lock = lock, .how = OWNER_NONE, .stack_id = STACK_NOT_SAMPLED };
	struct owner_stat fresh = {};
	__u64 word, mask = (flags & LCB_F_MUTEX) ? MUTEX_FLAG_BITS : RWSEM_FLAG_BITS;
	struct task_struct *o;

	if (!cs)
		return;
	k.tgid = bpf_get_current_pid_tgid() >> 32;
	if (flags & LCB_F_MUTEX)
		word = BPF_CORE_READ((struct mutex *)lock, owner.counter);
	else
		word = BPF_CORE_READ((struct rw_semaphore *)lock, owner.counter);
	o = (struct task_struct *)(word & ~mask);
	if (!(flags & LCB_F_MUTEX) && (word & RWSEM_READER_OWNED))
		k.how = OWNER_READERS;
	else if (o)
		owner_doing(BPF_CORE_READ(o, pid), (__u64)o, 0, &k, &fresh);
	count_look(cs, &k, &fresh);
}

/* a sampled waiter going to sleep on futex word `uaddr` (process `tgid`,
 * futex command `op`) looks at the word's owner where the word says who
 * it is: a PI futex holds the owner's tid; a glibc pthread_mutex keeps it
 * in __owner, the int 8 bytes after its lock word (the analyzer keeps only
 * the looks at pthread mutexes: after another lock's word, the int is not
 * a tid, and one that happens to be a thread of the process is discarded
 * there). Runs in the waiter's context: its memory. */
static __noinline void look_at_futex_owner(struct cpu_state *cs, __u64 uaddr, __u32 tgid, __u32 op)
{
	struct owner_key k = { .lock = uaddr, .tgid = tgid, .how = OWNER_NONE, .stack_id = STACK_NOT_SAMPLED };
	struct owner_stat fresh = {};
	bool pi = op == FUTEX_LOCK_PI || op == FUTEX_LOCK_PI2;
	__u32 tid = 0;

	if (!cs || bpf_probe_read_user(&tid, sizeof(tid), (void *)(uaddr + (pi ? 0 : GLIBC_MUTEX_OWNER))))
		return;
	if (pi)
		tid &= FUTEX_TID_BITS;
	if (tid && tid < PID_MAX)
		owner_doing(tid, 0, tgid, &k, &fresh);
	count_look(cs, &k, &fresh);
}

#endif
