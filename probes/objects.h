/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_OBJECTS_H
#define LOCKSCOPE_OBJECTS_H

struct bpf_link;
struct jw;

int objects_init(void);
void objects_reset(void);
int objects_snapshot(struct bpf_link *files_it, struct bpf_link *tasks_it, struct bpf_link *sbs_it);
void objects_json(struct jw *w);

#endif
