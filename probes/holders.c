// SPDX-License-Identifier: MIT
/* Loader side of holders.bpf.h: read the releases of each lock by release
 * site and what the releasers did meanwhile, and emit them with the release
 * stacks (kernel stacks of kernel locks, user stacks and stack-top copies of
 * futex locks). */
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "grow.h"
#include "holders.h"

/* the rows of the data event's "holds" and "hold_activity": their JSON is
 * EMIT_ROW_HOLDS / EMIT_ROW_HOLD_ACTIVITY (lockscope/proberows.toml) */
struct hold_row {
	struct hold_key k;
	struct hold_stat s;
};
struct act_row {
	struct hold_act_key k;
	__u64 ns;
};
static struct hold_row *hrows;
static size_t nhrows;
static struct act_row *arows;
static size_t narows;

void holders_free(void)
{
	free(hrows);
	free(arows);
	hrows = NULL;
	arows = NULL;
	nhrows = narows = 0;
}

void holders_clear(const struct holder_maps *m)
{
	clear_map(m->holds);
	clear_map(m->activity);
	clear_map(m->seen);
	clear_map(m->copies);
	clear_map(m->usdt_held);
	holders_free();
}

/* every (key, value) of a hash map into a growing array of rows of `size`
 * bytes, the key at offset 0 and the value at `voff` */
static size_t read_rows(int fd, size_t ksize, size_t voff, size_t size, void **rows)
{
	char key[64], *prev = NULL, *p, *buf = *rows;
	size_t n = 0, cap = 0;      /* rows read, bytes allocated */

	while (bpf_map_get_next_key(fd, prev, key) == 0) {
		prev = key;
		if (!GROW_TO(buf, cap, (n + 1) * size, 256 * size))
			break;
		*rows = buf;
		p = buf + n * size;
		memcpy(p, key, ksize);
		if (bpf_map_lookup_elem(fd, key, p + voff) == 0)
			n++;
	}
	return n;
}

void holders_read(const struct holder_maps *m)
{
	holders_free();
	nhrows = read_rows(bpf_map__fd(m->holds), sizeof(struct hold_key), offsetof(struct hold_row, s),
			   sizeof(struct hold_row), (void **)&hrows);
	narows = read_rows(bpf_map__fd(m->activity), sizeof(struct hold_act_key), offsetof(struct act_row, ns),
			   sizeof(struct act_row), (void **)&arows);
	for (size_t i = 0; i < nhrows; i++)
		hrows[i].s.waker_comm[sizeof(hrows[i].s.waker_comm) - 1] = '\0';
}

static bool kernel_lock(__u64 lock)
{
	return lock >= 1ULL << 63;
}

/* a row of "hold_stack_copies": the release's key and the copy */
struct hold_copy_row {
	const struct hold_key *k;
	const struct ustack_copy *c;
};

static void copy_row(struct jw *w, const void *key, const struct ustack_copy *c)
{
	struct hold_copy_row r = { .k = key, .c = c };

	EMIT_ROW_HOLD_STACK_COPIES(w, &r);
}

/* a row of "hold_usdt_locks": a lock's id and its usdt_key */
struct usdt_lock_row {
	const __u64 *id;
	const struct usdt_key *k;
};

/* "hold_usdt_locks": the USDT-named locks (usdt_key) behind the ids of
 * the releases charged to them */
static void emit_usdt_locks(struct jw *w, int fd)
{
	__u64 id, *prev = NULL;
	struct usdt_key k;
	struct usdt_lock_row r = { .id = &id, .k = &k };

	jw_key(w, "hold_usdt_locks");
	jw_arr(w);
	while (bpf_map_get_next_key(fd, prev, &id) == 0) {
		prev = &id;
		if (bpf_map_lookup_elem(fd, &id, &k))
			continue;
		k.name[sizeof(k.name) - 1] = '\0';
		EMIT_ROW_HOLD_USDT_LOCKS(w, &r);
	}
	jw_arr_end(w);
}

void holders_json(struct jw *w, const struct holder_maps *m)
{
	struct id_set kids = {}, uids = {};

	jw_key(w, "holds");
	jw_arr(w);
	for (size_t i = 0; i < nhrows; i++) {
		const struct hold_row *r = &hrows[i];

		EMIT_ROW_HOLDS(w, r);
		id_set_add(kernel_lock(r->k.lock) ? &kids : &uids, r->k.stack_id);
	}
	jw_arr_end(w);

	jw_key(w, "hold_activity");
	jw_arr(w);
	for (size_t i = 0; i < narows; i++)
		EMIT_ROW_HOLD_ACTIVITY(w, &arows[i]);
	jw_arr_end(w);

	emit_stacks(w, "hold_stacks", bpf_map__fd(m->stacks), &kids, MAX_STACK_DEPTH, true);
	emit_stacks(w, "hold_user_stacks", bpf_map__fd(m->user_stacks), &uids, MAX_STACK_DEPTH, true);
	free(kids.ids);
	free(uids.ids);
	emit_ustack_copies(w, "hold_stack_copies", bpf_map__fd(m->copies), sizeof(struct hold_key), copy_row);
	emit_usdt_locks(w, bpf_map__fd(m->usdt_held));
}

void holders_map_use_json(struct jw *w, const struct holder_maps *m)
{
	emit_map_use(w, "holds", m->holds, nhrows);
	emit_map_use(w, "hold_activity", m->activity, narows);
}
