"""Where a kernel lock lives: static data of the kernel image (one global
variable), static data of a module, or memory allocated at run time (slab,
per-CPU areas, vmalloc, pages); and, where a symbol table is at hand, which
variable it is.

Many kernels export only text symbols and a few section markers in
/proc/kallsyms (no CONFIG_KALLSYMS_ALL), so the image's data range is found
from what is there, best first (`read`):

1. the linker's own symbols `_sdata`/`_edata` and `__bss_start`/`__bss_stop`,
   when kallsyms has them;
2. /proc/iomem's "Kernel data" and "Kernel bss" resources (root only): the
   kernel registers exactly [_sdata, _edata) and [__bss_start, __bss_stop)
   there (arch/x86/kernel/setup.c), as physical addresses, which map to
   virtual ones by the offset between `_text` and "Kernel code";
3. the section markers alone, from the x86-64 image layout
   (arch/x86/kernel/vmlinux.lds.S): .data begins with the init task's stack,
   so `__start_init_stack` is `_sdata`; after .data come the exception, ORC
   and per-CPU template sections, then init code and data (freed after
   boot), then .bss and .brk. Nothing else is mapped between `_sdata` and
   the module area that could hold a live lock, so the data range is
   [_sdata, start of the module area): .data and .bss with nothing in
   between that a contended lock could be on. The module area begins at
   __START_KERNEL_map + KERNEL_IMAGE_SIZE (0xffffffffc0000000 with a
   randomizable base, 0xffffffffa0000000 without); the lowest module or BPF
   symbol says which.

Modules: /proc/modules gives each module's core allocation; since 6.4 a
module's data is a separate allocation in the module area, so a static lock
of a module is placed "in a module" by the area, and by name when it falls
inside a listed range.

Exact names (`SymbolTable`): /proc/kallsyms when it lists data variables, or
a System.map or vmlinux ELF given with --vmlinux; their link-time addresses
are moved by the boot's KASLR offset (runtime `_text` minus the file's).
"""
from __future__ import annotations

import bisect
import re
import struct
from pathlib import Path

from lockscope.model.jsondata import format_addr, parse_addr
from lockscope.model.probedata import KernelImage, ModuleRange
from .kallsyms import rows as kallsyms_rows

START_KERNEL_MAP = 0xffffffff80000000
MODULES_RANDOMIZED = START_KERNEL_MAP + (1 << 30)     # KERNEL_IMAGE_SIZE 1 GiB (CONFIG_RANDOMIZE_BASE)
MODULES_FIXED = START_KERNEL_MAP + (512 << 20)        # 512 MiB otherwise
MODULES_END = 0xffffffffff000000

STATIC_KERNEL = "kernel"      # static data of the kernel image
STATIC_MODULE = "module"      # static data of a module
TEXT = "text"                 # kernel text or read-only data: not a lock
DYNAMIC = "dynamic"           # slab, per-CPU area, vmalloc, pages

# kallsyms / System.map types of data: initialized, BSS (global or local)
_DATA_TYPES = set("dDbB")
# linker markers, not variables
_MARKER = re.compile(r"^(__start_|__stop_|__end_)|^_[se](text|data|inittext|initdata|rodata|bss)$|^_end$"
                     r"|^__(bss_start|bss_stop|init_begin|init_end|per_cpu_start|per_cpu_end|brk_base|brk_limit)$")


# ---- the image's data range --------------------------------------------------

def _kallsyms(lines: list[list[str]]) -> tuple[dict[str, int], int | None]:
    """Named markers and linker symbols of kallsyms (its rows, split), and
    the lowest module (or BPF) symbol."""
    want = {"_text", "_stext", "_etext", "_sdata", "_edata", "__bss_start", "__bss_stop", "_end",
            "__start_init_stack", "__start_rodata", "__init_begin"}
    found: dict[str, int] = {}
    lowest_mod = None
    for parts in lines:
        if len(parts) < 3:
            continue
        if len(parts) > 3:          # "[module]" or "[bpf]"
            a = int(parts[0], 16)
            if a and (lowest_mod is None or a < lowest_mod):
                lowest_mod = a
        elif parts[2] in want:
            found[parts[2]] = int(parts[0], 16)
    return found, lowest_mod


def _iomem(path: Path) -> dict[str, tuple[int, int]]:
    """'Kernel code', 'Kernel data', 'Kernel bss' -> physical [start, end)."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                rng, _, name = line.strip().partition(" : ")
                if name.startswith("Kernel "):
                    lo, hi = (int(x, 16) for x in rng.split("-"))
                    if hi:                  # all zero: not root
                        out[name] = (lo, hi + 1)
    except OSError:
        pass
    return out


def _modules(path: Path) -> list[ModuleRange]:
    out = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 6 and parse_addr(p[5]):
                    out.append(ModuleRange(name=p[0], start=parse_addr(p[5]), size=int(p[1])))
    except OSError:
        pass
    return out


def read(kallsyms: Path | str = "/proc/kallsyms", iomem: Path | str = "/proc/iomem",
         modules: Path | str = "/proc/modules", *, lines: list[list[str]] | None = None) -> KernelImage | None:
    """The running kernel's image bounds; None when kallsyms shows no
    addresses (kptr_restrict) or is not x86-64-shaped. `lines`: kallsyms
    already read (kallsyms.rows)."""
    try:
        syms, lowest_mod = _kallsyms(kallsyms_rows(kallsyms) if lines is None else lines)
    except OSError:
        return None
    text = syms.get("_text") or syms.get("_stext")
    if not text or text < START_KERNEL_MAP:
        return None
    modules_start = MODULES_RANDOMIZED if (lowest_mod or MODULES_RANDOMIZED) >= MODULES_RANDOMIZED \
        else MODULES_FIXED
    img = KernelImage(text=text, modules_start=modules_start, modules=_modules(Path(modules)))
    res = _iomem(Path(iomem))
    if "_sdata" in syms and "_edata" in syms:
        img.data = [syms["_sdata"], syms["_edata"]]
        if "__bss_start" in syms and "__bss_stop" in syms:
            img.bss = [syms["__bss_start"], syms["__bss_stop"]]
        img.bounds = "kallsyms: _sdata.._edata, __bss_start..__bss_stop"
    elif "Kernel code" in res and "Kernel data" in res:
        off = text - res["Kernel code"][0]
        img.data = [res["Kernel data"][0] + off, res["Kernel data"][1] + off]
        if "Kernel bss" in res:
            img.bss = [res["Kernel bss"][0] + off, res["Kernel bss"][1] + off]
        img.bounds = "/proc/iomem: Kernel data, Kernel bss"
    else:
        start = syms.get("_sdata") or syms.get("__start_init_stack")
        if not start:
            return None
        img.data = [start, modules_start]
        img.bounds = "kallsyms markers: __start_init_stack (= _sdata) .. the module area"
    return img


def region(img: KernelImage, addr: int) -> tuple[str, str | None]:
    """(STATIC_KERNEL | STATIC_MODULE | TEXT | DYNAMIC, the module's name)."""
    if img.data and img.data[0] <= addr < img.data[1] or img.bss and img.bss[0] <= addr < img.bss[1]:
        return STATIC_KERNEL, None
    if img.modules_start <= addr < MODULES_END:
        for m in img.modules:
            if m.start <= addr < m.start + m.size:
                return STATIC_MODULE, m.name
        return STATIC_MODULE, None
    if img.text <= addr < (img.data[0] if img.data else img.modules_start):
        return TEXT, None
    return DYNAMIC, None


# ---- exact names ---------------------------------------------------------------

class SymbolTable:
    """Data symbols (variables) of a kernel: addresses as linked, their sizes
    where the file gives them (an ELF), and the file's `_text`."""

    def __init__(self, entries: list[tuple[int, int, str]], text: int | None, source: str):
        entries.sort()
        self._addrs = [a for a, _, _ in entries]
        self._sizes = [s for _, s, _ in entries]
        self._names = [n for _, _, n in entries]
        self.text = text
        self.source = source

    def __len__(self) -> int:
        return len(self._addrs)

    def resolve(self, addr: int, runtime_text: int) -> tuple[str, int] | None:
        """(variable, offset) of a runtime address, or None when it is in no
        known variable."""
        a = addr - (runtime_text - self.text) if self.text else addr
        i = bisect.bisect_right(self._addrs, a) - 1
        if i < 0:
            return None
        off = a - self._addrs[i]
        size = self._sizes[i]
        if not size:         # no sizes (a map): up to the next symbol
            size = (self._addrs[i + 1] - self._addrs[i]) if i + 1 < len(self._addrs) else 1 << 12
        return (self._names[i], off) if off < size else None


def _text_symbols(lines, source: str) -> SymbolTable:
    """The data symbols of nm-format rows, split."""
    entries, text = [], None
    for p in lines:
        if len(p) != 3:
            continue
        if p[2] == "_text":
            text = parse_addr(p[0])
        if p[1] in _DATA_TYPES and not _MARKER.match(p[2]):
            entries.append((parse_addr(p[0]), 0, p[2]))
    return SymbolTable(entries, text, source)


def _elf_symbols(path: Path) -> SymbolTable:
    """STT_OBJECT symbols of an ELF64 little-endian file (a vmlinux)."""
    with open(path, "rb") as f:
        eh = f.read(64)
        if eh[4] != 2 or eh[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", eh, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", eh, 0x3a)
        f.seek(shoff)
        raw = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", raw, i * shentsize) for i in range(shnum)]
        symtab = next((s for s in sections if s[1] == 2), None)      # SHT_SYMTAB
        if symtab is None:
            raise ValueError(f"{path}: no symbol table (a stripped file)")
        strtab = sections[symtab[6]]
        f.seek(strtab[4])
        names = f.read(strtab[5])
        f.seek(symtab[4])
        data = f.read(symtab[5])
    entries, text = [], None
    for off in range(0, len(data), 24):
        st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, off)
        name = names[st_name:names.index(b"\0", st_name)].decode(errors="replace")
        if name == "_text":
            text = st_value
        if st_info & 0xf == 1 and st_shndx and st_value:             # STT_OBJECT, defined
            entries.append((st_value, st_size, name))
    return SymbolTable(entries, text, str(path))


def load_symbols(path: Path | str) -> SymbolTable:
    """A System.map (or any `nm`-format list) or a vmlinux ELF file;
    ValueError when it is neither or holds no data symbols."""
    path = Path(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"\x7fELF":
        table = _elf_symbols(path)
    else:
        with open(path, errors="replace") as f:
            table = _text_symbols((line.split() for line in f), str(path))
    if not len(table):
        raise ValueError(f"{path}: no data symbols (neither a System.map nor a vmlinux with a symbol table)")
    return table


# kallsyms lists variables only with CONFIG_KALLSYMS_ALL; without it, it has
# the few dozen section markers (filtered out as _MARKER) and no variable
MIN_KALLSYMS_VARIABLES = 100


def kallsyms_symbols(path: Path | str = "/proc/kallsyms", *,
                     lines: list[list[str]] | None = None) -> SymbolTable | None:
    """The running kernel's variables, when /proc/kallsyms lists them with
    their addresses; runtime addresses, so no KASLR shift. `lines`: kallsyms
    already read (kallsyms.rows)."""
    try:
        table = _text_symbols(kallsyms_rows(path) if lines is None else lines, "/proc/kallsyms")
    except OSError:
        return None
    if len(table) < MIN_KALLSYMS_VARIABLES or not table._addrs[-1]:
        return None
    table.text = None
    return table


def resolve_static(img: KernelImage, addrs, table: SymbolTable) -> None:
    """Name every static kernel address of `addrs` that is inside a variable
    of `table`: img.symbols["0x..."] = "var" or "var+0x8"."""
    for a in sorted(set(addrs)):
        if region(img, a)[0] != STATIC_KERNEL:
            continue
        hit = table.resolve(a, img.text)
        if hit:
            name, off = hit
            img.symbols[format_addr(a)] = name if not off else f"{name}+0x{off:x}"
    img.symbols_from = table.source
