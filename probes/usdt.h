/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_USDT_H
#define LOCKSCOPE_USDT_H

#include <stdbool.h>

struct jw;

/* load usdt.bpf.c, sharing the tgid filter map; nothing is attached until
 * usdt_attach; 0 or -errno (then usdt_json reports why). on_attach is
 * called at each probe attached (the other programs then look for the
 * waits it names). */
int usdt_load(bool system_wide, int tracked_fd, int waiting_fd, int ncpus, void (*on_attach)(void));
/* the "usdt" command: `usdt start|done COOKIE PROVIDER NAME PATH` attaches
 * the start or done program to probe PROVIDER:NAME of the binary PATH, for
 * every process running it (the tracked map filters); PROVIDER "-": the
 * entry of function NAME (or of the first of its alternatives A,B the
 * binary has); `usdt return COOKIE - NAME PATH`: the done program at its
 * return; `usdt suffix ENTRY I TEXT`: a name suffix of an entry whose
 * waits are filtered by name */
void usdt_command(char *args);
void usdt_start(void);
void usdt_stop(void);
/* "usdt" key of the data event: the probes attached, the waits */
void usdt_json(struct jw *w);
void usdt_counters_json(struct jw *w);
void usdt_map_use_json(struct jw *w);
void usdt_destroy(void);

#endif
