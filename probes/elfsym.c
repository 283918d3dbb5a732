// SPDX-License-Identifier: MIT
/* Symbol values of an ELF file (.symtab and .dynsym), for the loader parts
 * that read a runtime's state from a process's memory (pyframes.c: CPython's
 * _PyRuntime; jvmmon.c: HotSpot's gHotSpotVMStructs). */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <string.h>
#include <unistd.h>
#include "elfsym.h"

bool elf_symbol_values(const char *path, const char *const *names, size_t n, __u64 *values, struct elf_base *base)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf_Scn *scn = NULL;
	size_t nph, found = 0;
	GElf_Ehdr eh;
	bool ok = false;
	Elf *e;

	memset(values, 0, n * sizeof(*values));
	memset(base, 0, sizeof(*base));
	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (!e || !gelf_getehdr(e, &eh) || elf_getphdrnum(e, &nph))
		goto out;
	ok = true;
	base->dyn = eh.e_type == ET_DYN;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(e, i, &ph) && ph.p_type == PT_LOAD && ph.p_offset == 0) {
			base->base_vaddr = ph.p_vaddr;
			break;
		}
	}
	while ((scn = elf_nextscn(e, scn)) && found < n) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) ||
		    !(d = elf_getdata(scn, NULL)) || !sh.sh_entsize)
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize && found < n; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(d, i, &sym) || sym.st_shndx == SHN_UNDEF ||
			    !(name = elf_strptr(e, sh.sh_link, sym.st_name)))
				continue;
			for (size_t k = 0; k < n; k++)
				if (!values[k] && !strcmp(name, names[k])) {
					values[k] = sym.st_value;
					found++;
				}
		}
	}
out:
	if (e)
		elf_end(e);
	close(fd);
	return ok;
}
