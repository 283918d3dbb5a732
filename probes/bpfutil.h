/* SPDX-License-Identifier: MIT */
/* Helpers shared by the loader's C files (loader.c and the files it is split
 * into, futex.c, kmem.c): clock, clearing and walking BPF maps, adding up
 * per-CPU wait statistics, and the JSON of stacks, programs and map use. */
#ifndef LOCKSCOPE_BPFUTIL_H
#define LOCKSCOPE_BPFUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>

struct ustack_copy;

struct bpf_map;
struct bpf_object;
struct jw;
struct wait_stat;

/* "the WHAT did not load: <the error>" into buf (err: -errno or errno);
 * returns buf. One wording for every optional probe's JSON reason. */
const char *not_loaded(char *buf, size_t n, const char *what, int err);

/* CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns */
uint64_t now_ns(void);

/* delete every entry of a hash or stack map; 0 or -ENOMEM */
int clear_map(struct bpf_map *map);

/* acc += s: counts and totals add, the max is the larger */
void wait_stat_add(struct wait_stat *acc, const struct wait_stat *s);
/* the sum over ncpus per-CPU values */
void wait_stat_sum(const struct wait_stat *per_cpu, int ncpus, struct wait_stat *sum);
__u64 u64_sum(const __u64 *per_cpu, int ncpus);
/* a program's counters (a per-CPU array of n __u64 slots, COUNTERS_MAP):
 * every slot set to 0 on every CPU; out[i] = slot i summed over the CPUs
 * (0 where it cannot be read) */
void counters_zero(const struct bpf_map *map, __u32 n, int ncpus);
void counters_read(const struct bpf_map *map, __u32 n, int ncpus, __u64 *out);

/* calls fn with each key of a per-CPU map of struct wait_stat and its sum
 * over the CPUs (keys of at most 128 bytes); 0, or -ENOMEM */
typedef void (*wait_fn)(const void *key, const struct wait_stat *sum, void *ctx);
int for_each_wait(int fd, int ncpus, wait_fn fn, void *ctx);

/* distinct stack ids, in the order first seen */
struct id_set {
	__s32 *ids;
	size_t n, cap;
};
/* adds id unless it is negative (no stack) or already in */
void id_set_add(struct id_set *set, __s32 id);

/* "name": {"ID": ["0x..", ...], ...}: the value of each id of the set found
 * in the map at fd, as up to depth (<= MAX_STACK_DEPTH) 64-bit words; a
 * stack (until_zero) ends at its first 0 */
void emit_stacks(struct jw *w, const char *name, int fd, const struct id_set *set, int depth,
		 bool until_zero);
/* "name": [{...}, ...]: every stack copy of the hash map at fd (keys of
 * key_size <= 64 bytes), each written by row (a generated EMIT_ROW_ of
 * lockscope/proberows.toml: the key's fields, "ip", "sp", "bp", "bytes") */
typedef void (*copy_row_fn)(struct jw *w, const void *key, const struct ustack_copy *c);
void emit_ustack_copies(struct jw *w, const char *name, int fd, size_t key_size, copy_row_fn row);
/* "name": {"entries": used, "max_entries": the map's} */
void emit_map_use(struct jw *w, const char *name, const struct bpf_map *map, unsigned int used);

/* an open-addressing set of non-zero 64-bit keys in slots[nslots] (a power
 * of two, zeroed); true if key was added, false if it was in (or no slot
 * was free) */
bool u64_set_add(uint64_t *slots, unsigned int nslots, uint64_t key);

/* an {"event":"error"} line: the stage, errno (either sign) and a message */
void emit_error(const char *stage, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
