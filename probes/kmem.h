/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_KMEM_H
#define LOCKSCOPE_KMEM_H

struct jw;

int kmem_load(void);
void kmem_reset(void);
void kmem_resolve_map(int lock_stats_fd);
void kmem_json(struct jw *w);
void kmem_destroy(void);

#endif
