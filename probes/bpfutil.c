// SPDX-License-Identifier: MIT
/* Helpers shared by the loader's C files: see bpfutil.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "grow.h"

#define MAX_KEY_SIZE 192

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

const char *not_loaded(char *buf, size_t n, const char *what, int err)
{
	snprintf(buf, n, "the %s did not load: %s", what, strerror(err < 0 ? -err : err));
	return buf;
}

int clear_map(struct bpf_map *map)
{
	int fd = bpf_map__fd(map);
	size_t ksz = bpf_map__key_size(map);
	char *keys = NULL;
	size_t n = 0, cap = 0;      /* keys held, bytes allocated */
	int err;

	/* collect first: deleting while walking restarts the walk (the previous
	 * key is found from n: growing the array moves it) */
	for (;;) {
		if (!GROW_TO(keys, cap, (n + 1) * ksz, 1024 * ksz)) {
			free(keys);
			return -ENOMEM;
		}
		err = bpf_map_get_next_key(fd, n ? keys + (n - 1) * ksz : NULL, keys + n * ksz);
		if (err)
			break;
		n++;
	}
	for (size_t i = 0; i < n; i++)
		bpf_map_delete_elem(fd, keys + i * ksz);
	free(keys);
	return 0;
}

void wait_stat_add(struct wait_stat *acc, const struct wait_stat *s)
{
	acc->count += s->count;
	acc->total_ns += s->total_ns;
	acc->untimed += s->untimed;
	if (s->max_ns > acc->max_ns)
		acc->max_ns = s->max_ns;
}

void wait_stat_sum(const struct wait_stat *per_cpu, int ncpus, struct wait_stat *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (int c = 0; c < ncpus; c++)
		wait_stat_add(sum, &per_cpu[c]);
}

__u64 u64_sum(const __u64 *per_cpu, int ncpus)
{
	__u64 sum = 0;

	for (int c = 0; c < ncpus; c++)
		sum += per_cpu[c];
	return sum;
}

void counters_zero(const struct bpf_map *map, __u32 n, int ncpus)
{
	__u64 *zero = calloc(ncpus, sizeof(*zero));

	for (__u32 i = 0; zero && i < n; i++)
		bpf_map_update_elem(bpf_map__fd(map), &i, zero, BPF_ANY);
	free(zero);
}

void counters_read(const struct bpf_map *map, __u32 n, int ncpus, __u64 *out)
{
	__u64 *vals = calloc(ncpus, sizeof(*vals));

	for (__u32 i = 0; i < n; i++)
		out[i] = vals && bpf_map_lookup_elem(bpf_map__fd(map), &i, vals) == 0 ? u64_sum(vals, ncpus) : 0;
	free(vals);
}

/* the per-CPU entries of one wait map read BATCH at a time: two syscalls
 * per BATCH entries instead of two per entry. The time series reads the
 * lock and off-CPU maps 4 times a second; on Exim, whose every process adds
 * its own off-CPU entries, reading them one by one took the loader from 15
 * to 41 ms of CPU a second over 4 s. -1 where the kernel has no batch
 * lookup for the map (read one by one then) */
#define BATCH 256

static int for_each_wait_batch(int fd, int ncpus, wait_fn fn, void *ctx)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info), count;
	char batch[MAX_KEY_SIZE];
	void *keys, *in = NULL;
	struct wait_stat *vals, s;
	int err = 0;

	if (bpf_obj_get_info_by_fd(fd, &info, &len) || info.value_size != sizeof(struct wait_stat) ||
	    info.key_size > MAX_KEY_SIZE)
		return -1;
	keys = calloc(BATCH, info.key_size);
	vals = calloc((size_t)BATCH * ncpus, sizeof(*vals));
	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (;;) {
		count = BATCH;
		err = bpf_map_lookup_batch(fd, in, batch, keys, vals, &count, NULL) ? -errno : 0;
		if (err && err != -ENOENT) {
			/* nothing read yet: the kernel cannot (one by one instead) */
			err = in ? err : -1;
			break;
		}
		for (__u32 i = 0; i < count; i++) {
			wait_stat_sum(vals + (size_t)i * ncpus, ncpus, &s);
			fn((char *)keys + (size_t)i * info.key_size, &s, ctx);
		}
		if (err == -ENOENT) {      /* the map's end */
			err = 0;
			break;
		}
		in = batch;
	}
	free(keys);
	free(vals);
	return err;
}

int for_each_wait(int fd, int ncpus, wait_fn fn, void *ctx)
{
	struct wait_stat *vals, s;
	char key[MAX_KEY_SIZE];
	void *prev = NULL;
	int err = for_each_wait_batch(fd, ncpus, fn, ctx);

	if (err != -1)
		return err;
	if (!(vals = calloc(ncpus, sizeof(*vals))))
		return -ENOMEM;
	while (bpf_map_get_next_key(fd, prev, key) == 0) {
		prev = key;
		if (bpf_map_lookup_elem(fd, key, vals))
			continue;
		wait_stat_sum(vals, ncpus, &s);
		fn(key, &s, ctx);
	}
	free(vals);
	return 0;
}

void id_set_add(struct id_set *set, __s32 id)
{
	if (id < 0)
		return;
	for (size_t i = 0; i < set->n; i++)
		if (set->ids[i] == id)
			return;
	if (!GROW(set->ids, set->cap, set->n, 256))
		return;
	set->ids[set->n++] = id;
}

void emit_stacks(struct jw *w, const char *name, int fd, const struct id_set *set, int depth,
		 bool until_zero)
{
	__u64 ips[MAX_STACK_DEPTH];
	char id[16];

	jw_key(w, name);
	jw_obj(w);
	for (size_t i = 0; i < set->n; i++) {
		memset(ips, 0, sizeof(ips));
		if (bpf_map_lookup_elem(fd, &set->ids[i], ips))
			continue;
		snprintf(id, sizeof(id), "%d", set->ids[i]);
		jw_key(w, id);
		jw_arr(w);
		for (int d = 0; d < depth && !(until_zero && !ips[d]); d++)
			jw_hex(w, ips[d]);
		jw_arr_end(w);
	}
	jw_obj_end(w);
}

void emit_ustack_copies(struct jw *w, const char *name, int fd, size_t key_size, copy_row_fn row)
{
	static struct ustack_copy c;
	__u64 k[8], prev_k[8];       /* keys of at most 64 bytes */
	void *prev = NULL;

	jw_key(w, name);
	jw_arr(w);
	if (key_size > sizeof(k)) {
		jw_arr_end(w);
		return;
	}
	while (bpf_map_get_next_key(fd, prev, k) == 0) {
		memcpy(prev_k, k, key_size);
		prev = prev_k;
		if (bpf_map_lookup_elem(fd, k, &c))
			continue;
		row(w, k, &c);
	}
	jw_arr_end(w);
}

void emit_map_use(struct jw *w, const char *name, const struct bpf_map *map, unsigned int used)
{
	jw_key(w, name);
	jw_obj(w);
	jw_ku64(w, "entries", used);
	jw_ku64(w, "max_entries", bpf_map__max_entries(map));
	jw_obj_end(w);
}

bool u64_set_add(uint64_t *slots, unsigned int nslots, uint64_t key)
{
	uint64_t h = key * 0x9e3779b97f4a7c15ULL;

	for (unsigned int i = 0; i < nslots; i++) {
		unsigned int slot = (unsigned int)((h >> 40) + i) & (nslots - 1);

		if (slots[slot] == key)
			return false;
		if (slots[slot] == 0) {
			slots[slot] = key;
			return true;
		}
	}
	return false;
}

void emit_error(const char *stage, int err, const char *fmt, ...)
{
	struct jw out;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	jw_event_begin(&out, stdout, "error");
	jw_kstr(&out, "stage", stage);
	jw_ki64(&out, "errno", err < 0 ? -err : err);
	jw_kstr(&out, "message", msg);
	jw_event_end(&out);
}
