/* SPDX-License-Identifier: MIT */
#ifndef LOCKSCOPE_ELFSYM_H
#define LOCKSCOPE_ELFSYM_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>

/* where an ELF file's link-time addresses lie in a process: an address is
 * value - base_vaddr + the start of the file's mapping at offset 0 when the
 * file is position-independent (ET_DYN), value itself otherwise */
struct elf_base {
	__u64 base_vaddr;     /* the vaddr of its loadable segment at file offset 0 */
	bool dyn;
};

/* the values of names[0..n) in the ELF file's .symtab and .dynsym into
 * values[] (0: not defined there), and its elf_base; false: the file is not
 * readable as ELF (values all 0) */
bool elf_symbol_values(const char *path, const char *const *names, size_t n, __u64 *values, struct elf_base *base);

/* the address in a process of value, given the file's mapping start */
static inline __u64 elf_address(const struct elf_base *b, __u64 value, __u64 map_start)
{
	return b->dyn ? value - b->base_vaddr + map_start : value;
}

#endif
