/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The wait a program's USDT probes name that each thread is in (PostgreSQL's
 * LWLock and heavyweight-lock waits): a thread woken in it was woken by that
 * lock's releaser (holders.bpf.h), and a thread asleep in it is waiting for
 * that lock whatever it sleeps on (a semaphore's futex, a latch's epoll):
 * its off-CPU span's lock (contention.bpf.c). Such a lock is named by an id,
 * USDT_LOCK_BIT and a hash of its usdt_key; usdt_held keeps the keys for the
 * loader. Included by contention.bpf.c and tasks.bpf.c.
 */
#ifndef LOCKSCOPE_USDTWAIT_BPF_H
#define LOCKSCOPE_USDTWAIT_BPF_H

#include "maps.bpf.h"
#include "usdt_types.h"

#define USER_SPACE_END       (1ULL << 63)  /* a futex word's address lies below, a kernel lock's above */

/* the USDT-named lock wait open on each thread (usdt.bpf.c writes it), and
 * the USDT locks charged to, by id: contention.bpf.c's maps (the loader makes
 * tasks.bpf.c's and usdt.bpf.c's the same) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OPEN_ENTRIES);
	__type(key, __u32);
	__type(value, struct usdt_key);
} usdt_waiting SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct usdt_key);
} usdt_held SEC(".maps");

/* set by the loader once a USDT probe is attached (each program its own) */
bool usdt_on = false;

/* the id of the USDT-named lock thread `tid` waits for (USDT_LOCK_BIT and a
 * hash of its key), 0: none */
static __always_inline __u64 usdt_lock_of(__u32 tid)
{
	struct usdt_key *k = bpf_map_lookup_elem(&usdt_waiting, &tid);
	const __u64 *word = (const __u64 *)k;
	__u64 h = 0xcbf29ce484222325ULL, id;

	if (!k)
		return 0;
	for (int i = 0; i < sizeof(*k) / 8; i++) {
		h ^= word[i];
		h *= 0x100000001b3ULL;
	}
	id = (h & (USDT_LOCK_BIT - 1)) | USDT_LOCK_BIT;
	if (!bpf_map_lookup_elem(&usdt_held, &id))
		bpf_map_update_elem(&usdt_held, &id, k, BPF_NOEXIST);
	return id;
}

#endif
