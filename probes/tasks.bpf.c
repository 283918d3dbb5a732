// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Per-thread times and wake-ups of the tracked tasks.
 *
 * sched_switch (contention.bpf.c's one program on it, tasktimes.bpf.h;
 * this object shares its task_times map): per thread (task_times, by tid) the time on CPU (switch-in
 * to switch-out), the time off CPU split into preempted (switched out while
 * runnable) and asleep (anything else), and the switch-outs. The hash entry
 * is the hot state: one lookup per side of a switch. A thread's entry is made
 * at its first event of the window, which says where it was since the window
 * started (or since it was created, if later): on CPU before a switch-out,
 * asleep before a wake-up, runnable before a switch-in without one (a new
 * thread). Threads with no event at all get theirs from the task iterator at
 * stop, from their state then; the iterator also takes the names (comm, and
 * the group leader's) and whether it is a kernel thread as they are at stop,
 * and a thread that exits takes them at its last switch-out. The idle tasks
 * (pid 0) are never tracked. The loader adds the spans still open at stop.
 *
 * sched_waking: who woke a tracked thread, by (waker thread, wakee thread,
 * the futex the wakee sleeps on, from the open futex waits, or 0):
 * count, and the time the wakee had been off CPU. A thread is often woken on
 * its way to sleep, after it set its sleeping state but before it switched
 * out (then it still sleeps, for the wake-up's latency): no time off CPU yet,
 * and its futex is read from its registers. The waker is the current task, or
 * tid 0 in interrupt context (hard or soft, "[interrupt]") and for the idle
 * task; wakers need not be tracked (kworkers, journal threads, other
 * processes). A wake-up out of a lock wait also records the releaser as the
 * lock's holder (holders.bpf.h).
 */
#include "shared.bpf.h"        /* first: system_wide, enabled, t_start... */
#include "tasks_types.h"
#include "futexopen.bpf.h"     /* contention.bpf.c's, with --futex */
#include "futex_wait.bpf.h"
#include "taskstate.bpf.h"     /* contention.bpf.c's, shared */

char LICENSE[] SEC("license") = "Dual MIT/GPL";


const volatile bool have_futex = false;    /* futex_open is contention.bpf.c's (--futex) */

__u64 wakeup_inserts = 0;                  /* entries put in `wakeups` (the loader drains it: tasks.c) */

#include "tasktimes.bpf.h"
#include "holders.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, WAKEUP_ENTRIES);
	__type(key, struct wakeup_key);
	__type(value, struct wakeup_stat);
} wakeups SEC(".maps");

SEC("tp_btf/sched_waking")
int BPF_PROG(lksc_tasks_waking, struct task_struct *p)
{
	struct wakeup_key key = {};
	struct wakeup_stat *w;
	struct task_times *tt;
	__u64 now, wait = 0;
	bool irq;

	if (!enabled)
		return 0;
	key.wakee_tid = p->pid;
	if (!key.wakee_tid)
		return 0;
	tt = times_of(p, key.wakee_tid, WAS_ASLEEP);
	if (!tt)
		return 0;
	/* the idle task releases no lock: its wake-ups are a timer's or an
	 * interrupt's, some of which the stack test misses (a CPython waiter's
	 * 5-ms time-outs read as wake-ups by swapper/1, 600 in 4 s) */
	irq = in_interrupt_context(ctx) || !(__u32)bpf_get_current_pid_tgid();
	if (tt->on_start) {
		/* woken on its way to sleep, before its switch-out: it has not
		 * slept yet, nor has sched_switch seen its wait; which futex it
		 * waits on, its registers say */
		__u32 op;

		tcount(TCNT_WAKEUPS_ON_CPU);
		if (have_futex)
			futex_wait_of((struct pt_regs *)bpf_task_pt_regs(p), nr_futex, nr_futex_waitv,
				      !irq && bpf_get_current_pid_tgid() >> 32 == p->tgid, &key.uaddr, &op);
	} else {
		now = bpf_ktime_get_ns();
		if (tt->off_start && now > tt->off_start)
			wait = now - tt->off_start;
		if (have_futex) {
			struct ufutex_open *o = bpf_map_lookup_elem(&futex_open, &key.wakee_tid);

			if (o && o->start)       /* 0: its last wait closed */
				key.uaddr = o->uaddr;
		}
	}
	if (!irq) {
		key.waker_tid = (__u32)bpf_get_current_pid_tgid();
		hold_released(ctx, p, wait, key.uaddr);
	} else if (key.uaddr) {
		py_wait_timed_out(p, wait, key.uaddr);
	}
	w = bpf_map_lookup_elem(&wakeups, &key);
	if (!w) {
		struct wakeup_stat fresh = {};

		if (irq) {
			__builtin_memcpy(fresh.waker_comm, "[interrupt]", sizeof("[interrupt]"));
		} else {
			fresh.waker_tgid = bpf_get_current_pid_tgid() >> 32;
			bpf_get_current_comm(fresh.waker_comm, sizeof(fresh.waker_comm));
		}
		if (bpf_map_update_elem(&wakeups, &key, &fresh, BPF_NOEXIST) == 0)
			__sync_fetch_and_add(&wakeup_inserts, 1);
		w = bpf_map_lookup_elem(&wakeups, &key);
		if (!w) {
			tcount(TCNT_WAKEUPS_FULL);
			return 0;
		}
	}
	__sync_fetch_and_add(&w->count, 1);
	__sync_fetch_and_add(&w->wait_ns, wait);
	return 0;
}

/* at stop (the loader runs it): an entry for the tracked threads that had
 * no event in the window, and everyone's names as they are now */
/* a tracked thread that execs takes the new program's names: a command held
 * in lockscope's gate (a shell that execs it once its pid is tracked) may
 * have been seen before its exec, and would stay "sh" */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(lksc_tasks_exec, struct task_struct *p)
{
	__u32 tid = p->pid;
	struct task_times *tt;

	if (!enabled)
		return 0;
	tt = bpf_map_lookup_elem(&task_times, &tid);
	if (tt)
		take_names(tt, p);
	return 0;
}

SEC("iter/task")
int lksc_tasks_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct task_times *tt;
	__u32 tid;

	if (!t)
		return 0;
	tid = t->pid;
	if (!tid || t->exit_state)
		return 0;
	tt = times_of(t, tid, WAS_AS_NOW);
	if (tt)
		take_names(tt, t);
	return 0;
}
