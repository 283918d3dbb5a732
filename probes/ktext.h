/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_KTEXT_H
#define LOCKSCOPE_KTEXT_H

#include <linux/types.h>

struct jw;
struct id_set;

/* static data of the kernel image and modules lies above this address
 * (x86-64: __START_KERNEL_map); memory allocated at run time lies below */
#define KTEXT_STATIC_MIN 0xffffffff80000000ULL

int ktext_load(void);
void ktext_json(struct jw *w, int stacks_fd, const struct id_set *stack_ids);
void ktext_destroy(void);

#endif
