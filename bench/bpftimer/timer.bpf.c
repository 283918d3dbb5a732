#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#define CLOCK_MONOTONIC 1
struct elem { struct bpf_timer t; __u64 armed; };
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 64); __type(key, int); __type(value, struct elem); } timers SEC(".maps");
struct stk { __u64 ips[127]; };
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, 1); __type(key, int); __type(value, struct stk); } buf SEC(".maps");
struct { __u64 hits, user_ok, kern_ok, starts, cancels, idle_hits, kdepth, udepth; } g;
static int cb(void *map, int *key, struct elem *e)
{
	struct task_struct *t = bpf_get_current_task_btf();
	int z = 0;
	struct stk *b = bpf_map_lookup_elem(&buf, &z);
	long n;

	__sync_fetch_and_add(&g.hits, 1);
	if (!t->pid) { __sync_fetch_and_add(&g.idle_hits, 1); e->armed = 0; return 0; }
	if (b) {
		n = bpf_get_task_stack(t, b->ips, sizeof(b->ips), 0);
		if (n > 0) { __sync_fetch_and_add(&g.kern_ok, 1); g.kdepth += n / 8; }
		n = bpf_get_task_stack(t, b->ips, sizeof(b->ips), BPF_F_USER_STACK);
		if (n > 0) { __sync_fetch_and_add(&g.user_ok, 1); g.udepth += n / 8; }
	}
	bpf_timer_start(&e->t, 20000000, BPF_F_TIMER_CPU_PIN);
	return 0;
}
SEC("tp_btf/sched_switch")
int BPF_PROG(sw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	int cpu = bpf_get_smp_processor_id();
	struct elem *e = bpf_map_lookup_elem(&timers, &cpu);

	if (!e)
		return 0;
	if (!e->armed && next->pid) {
		bpf_timer_init(&e->t, &timers, CLOCK_MONOTONIC);
		bpf_timer_set_callback(&e->t, cb);
		if (!bpf_timer_start(&e->t, 20000000, BPF_F_TIMER_CPU_PIN)) { e->armed = 1; __sync_fetch_and_add(&g.starts, 1); }
	} else if (e->armed && !next->pid) {
		bpf_timer_cancel(&e->t); e->armed = 0; __sync_fetch_and_add(&g.cancels, 1);
	}
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
