/* SPDX-License-Identifier: MIT */
/* Loader side of holders.bpf.h (in tasks.bpf.c): the lock releases of a
 * window, read at stop and emitted with their stacks. */
#ifndef LOCKSCOPE_HOLDERS_H
#define LOCKSCOPE_HOLDERS_H

#include <bpf/libbpf.h>
#include "jsonw.h"

/* the maps of holders.bpf.h, from tasks.bpf.c's skeleton */
struct holder_maps {
	struct bpf_map *holds, *activity, *seen, *stacks, *user_stacks, *copies, *usdt_held;
};

/* empty the maps (at the window's start) */
void holders_clear(const struct holder_maps *m);
/* read the releases and the releasers' activity (at stop) */
void holders_read(const struct holder_maps *m);
/* "holds", "hold_activity", "hold_stacks", "hold_user_stacks",
 * "hold_stack_copies" and "hold_usdt_locks" keys of the data event */
void holders_json(struct jw *w, const struct holder_maps *m);
/* "holds" and "hold_activity" entries of the map_use object */
void holders_map_use_json(struct jw *w, const struct holder_maps *m);
void holders_free(void);

#endif
