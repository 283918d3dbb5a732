/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_LAYOUT_H
#define LOCKSCOPE_LAYOUT_H

struct btf;
struct jw;

/* read the offsets from the kernel's BTF (at start-up) */
void layout_read(const struct btf *btf);
/* the "layout" key of the data event: {"type.member": offset, ...} */
void layout_json(struct jw *w);

#endif
