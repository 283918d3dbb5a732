"""A traced process's address space as lockscope reads it after the run:
its mappings (/proc/PID/maps rows kept by the probe) and the ELF symbols of
the files mapped (pyelftools; separate debug files by build id under
/usr/lib/debug), to name a futex address (a global's symbol, or heap, stack,
anonymous memory) and to symbolize user stack frames."""
from __future__ import annotations

import bisect
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

from lockscope.model.jsondata import parse_addr
from lockscope.model.probedata import FutexAddress

DEBUG_ROOT = Path("/usr/lib/debug")
PAGE = 4096


# ---- ELF symbols (pyelftools) ---------------------------------------------

@dataclass
class ElfSymbols:
    """Function and object symbols of one ELF file, by virtual address, and
    its loadable segments (to turn file offsets into addresses)."""
    path: str
    functions: list[tuple[int, int, str]] = field(default_factory=list)   # (addr, size, name), sorted
    objects: list[tuple[int, int, str]] = field(default_factory=list)
    segments: list[tuple[int, int, int, int]] = field(default_factory=list)  # (p_offset, p_filesz, p_vaddr, p_flags)
    source: str = ""                                                    # which file the symbols came from

    @property
    def first_load(self) -> tuple[int, int] | None:
        """(p_offset, p_vaddr) of the loadable segment the image starts with."""
        if not self.segments:
            return None
        off, _, vaddr, _ = min(self.segments, key=lambda s: s[2])
        return off, vaddr

    def vaddr_of_mapping(self, offset: int, perms: str) -> int | None:
        """A guess, for a mapping whose image start is not in the maps: the
        ELF virtual address mapped at file offset `offset` (a mapping's
        start) with permissions `perms` ('r-xp'): the loadable segment with
        the same permissions containing that page. Ambiguous when two
        segments share a file page (AddressSpace uses the load bias)."""
        want = (("w" in perms[:3]) << 1) | ("x" in perms[:3])
        best = None
        for off, size, vaddr, flags in self.segments:
            page = off & ~(PAGE - 1)
            if page <= offset < off + max(size, 1):
                cand = offset - off + vaddr
                if flags & 3 == want:      # PF_W | PF_X
                    return cand
                best = cand                # e.g. a RELRO part made read-only
        return best

    @staticmethod
    def _find(table: list[tuple[int, int, str]], addrs: list[int], vaddr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(addrs, vaddr) - 1
        # symbols may nest or share addresses: look back a little for one covering vaddr
        for j in range(i, max(-1, i - 8), -1):
            a, size, name = table[j]
            if a <= vaddr < a + max(size, 1):
                return name, vaddr - a
        return None

    def function_at(self, vaddr: int) -> tuple[str, int] | None:
        return self._find(self.functions, self._faddrs, vaddr)

    def object_at(self, vaddr: int) -> tuple[str, int] | None:
        return self._find(self.objects, self._oaddrs, vaddr)

    def __post_init__(self):
        self._faddrs = [a for a, _, _ in self.functions]
        self._oaddrs = [a for a, _, _ in self.objects]


def elf_build_id(elf) -> str | None:
    for sec in elf.iter_sections():
        if sec.header.sh_type == "SHT_NOTE":
            for note in sec.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return note["n_desc"]
    return None


# Elf{32,64}_Sym as struct formats, fields reordered to (st_name, st_info,
# st_shndx, st_value, st_size); the table is unpacked in one pass (pyelftools'
# per-symbol parse takes 0.7 s for libc's 10,000 symbols, this 10 ms)
_SYM = {32: ("IIIBxH", 16, (0, 3, 4, 1, 2)), 64: ("IBxHQQ", 24, (0, 1, 2, 3, 4))}
_STT_OBJECT, _STT_FUNC, _STT_GNU_IFUNC = 1, 2, 10


def _symbols_of(elf, table: str, functions: list, objects: list) -> bool:
    sec = elf.get_section_by_name(table)
    if sec is None:
        return False
    fmt, size, order = _SYM[elf.elfclass]
    fmt = ("<" if elf.little_endian else ">") + fmt
    data = sec.data()
    strtab = elf.get_section(sec["sh_link"]).data()
    import struct
    for raw in struct.iter_unpack(fmt, data[:len(data) // size * size]):
        st_name, st_info, st_shndx, st_value, _size = (raw[i] for i in order)
        if not st_name or st_shndx == 0 or not st_value:      # nameless, SHN_UNDEF, or no address
            continue
        typ = st_info & 0xF
        if typ not in (_STT_FUNC, _STT_GNU_IFUNC, _STT_OBJECT):
            continue
        name = strtab[st_name:strtab.index(b"\0", st_name)].decode("utf-8", "replace")
        # versioned aliases (name@@GLIBC_x) are the same symbol
        item = (st_value, _size, name.split("@")[0])
        (objects if typ == _STT_OBJECT else functions).append(item)
    return True


@functools.lru_cache(maxsize=128)
def elf_symbols(path: str, debug_root: str = str(DEBUG_ROOT)) -> ElfSymbols | None:
    """The symbols of an ELF file; None if it cannot be read. A stripped file
    (no .symtab) gets the full table from its separate debug file, found by
    build id, when one is installed (e.g. libc6-dbg); else its .dynsym."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            segments = [(s["p_offset"], s["p_filesz"], s["p_vaddr"], s["p_flags"]) for s in elf.iter_segments()
                        if s["p_type"] == "PT_LOAD"]
            functions: list = []
            objects: list = []
            source = path
            if not _symbols_of(elf, ".symtab", functions, objects):
                bid = elf_build_id(elf)
                debug = Path(debug_root) / ".build-id" / bid[:2] / f"{bid[2:]}.debug" if bid else None
                done = False
                if debug and debug.exists():
                    try:
                        with open(debug, "rb") as d:
                            done = _symbols_of(ELFFile(d), ".symtab", functions, objects)
                            source = str(debug)
                    except (OSError, ELFError):
                        done = False
                if not done:
                    functions, objects, source = [], [], path
                    _symbols_of(elf, ".dynsym", functions, objects)
    except (OSError, ELFError, ValueError):
        return None
    functions.sort()
    objects.sort()
    return ElfSymbols(path, functions, objects, segments, source)


# ---- memory maps ------------------------------------------------------------

@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    path: str            # a file, or a region such as [heap], [stack]


def parse_maps(rows: list) -> list[Mapping]:
    """The loader's rows [start, end, perms, offset, path] (hex strings), or
    lines of /proc/PID/maps."""
    out = []
    for r in rows:
        if isinstance(r, str):
            parts = r.split(None, 5)
            if len(parts) < 5:
                continue
            lo, hi = parts[0].split("-")
            r = [lo, hi, parts[1], parts[2], parts[5].strip() if len(parts) > 5 else ""]
        out.append(Mapping(parse_addr(r[0]), parse_addr(r[1]), r[2], parse_addr(r[3]), r[4]))
    out.sort(key=lambda m: m.start)
    return out


def _is_file(path: str) -> bool:
    return path.startswith("/")


def _file_path(path: str) -> str:
    return path[:-len(" (deleted)")] if path.endswith(" (deleted)") else path


class AddressSpace:
    """One process's maps, resolving addresses to files and ELF symbols."""

    def __init__(self, maps: list[Mapping], symbols=elf_symbols):
        self.maps = maps
        self._starts = [m.start for m in maps]
        self._symbols = symbols

    def mapping(self, addr: int) -> tuple[Mapping | None, int]:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.maps[i].end:
            return self.maps[i], i
        return None, i

    def _file_vaddr(self, addr: int) -> tuple[str, int, ElfSymbols | None] | None:
        """(file, virtual address in that file's ELF, its symbols)."""
        m, i = self.mapping(addr)
        if m is None:
            return None
        if not _is_file(m.path):
            # .bss beyond the file's last page: anonymous memory right after
            # a file-backed mapping of the same object
            prev = self.maps[i - 1] if i > 0 else None
            if m.path or prev is None or prev.end != m.start or not _is_file(prev.path):
                return None
            fm = prev
        else:
            fm = m
        path = _file_path(fm.path)
        syms = self._symbols(path)
        if syms is None:
            return path, fm.offset + (addr - fm.start), None
        bias = self._load_bias(i if fm is m else i - 1, path, syms)
        if bias is not None:
            return path, addr - bias, syms
        start_vaddr = syms.vaddr_of_mapping(fm.offset, fm.perms)
        if start_vaddr is None:
            return path, fm.offset + (addr - fm.start), None
        return path, start_vaddr + (addr - fm.start), syms

    def _load_bias(self, i: int, path: str, syms: ElfSymbols) -> int | None:
        """The load bias of the image of `path` that mapping i belongs to: the
        address its first loadable segment was mapped at, less that segment's
        page-aligned virtual address. Every address of the image is then its
        ELF address plus the bias, also where two segments share one file
        page (two writable LOAD segments of a Rust or lld binary, whose
        second mapping starts at a file offset inside the first). The image
        start is the lowest mapping of the file at that page's offset found
        walking down from mapping i over the file's mappings and the gaps
        between them; None when the maps do not show it."""
        first = syms.first_load
        if first is None:
            return None
        want = first[0] & ~(PAGE - 1)
        start = None
        for j in range(i, -1, -1):
            mj = self.maps[j]
            if _file_path(mj.path) == path:
                if mj.offset == want:
                    start = mj.start
            elif mj.path:
                break                       # another file or region
        if start is None:
            return None
        return start - (first[1] & ~(PAGE - 1))

    def code_location(self, addr: int) -> tuple[str, int] | None:
        """(file, ELF virtual address) of an address in an executable file
        mapping; None elsewhere (anonymous or JIT code, [vdso], unmapped)."""
        m, _ = self.mapping(addr)
        if m is None or "x" not in m.perms[:3] or not _is_file(m.path):
            return None
        r = self._file_vaddr(addr)
        return (r[0], r[1]) if r is not None and r[2] is not None else None

    def resolve_data(self, addr: int) -> FutexAddress:
        """Where a futex lives: region (object, file, heap, stack, anon,
        unmapped), file, symbol and offset in it."""
        m, _ = self.mapping(addr)
        r = self._file_vaddr(addr)
        if r is not None:
            path, vaddr, syms = r
            hit = syms.object_at(vaddr) if syms else None
            if hit:
                return FutexAddress(region="object", file=path, symbol=hit[0], symbol_offset=hit[1], vaddr=vaddr)
            return FutexAddress(region="file", file=path, vaddr=vaddr)
        if m is None:
            return FutexAddress(region="unmapped" if self.maps else "unknown")
        if m.path == "[heap]":
            return FutexAddress(region="heap")
        if m.path.startswith("[stack"):
            return FutexAddress(region="stack")
        # thread stacks and large malloc arenas are anonymous mappings
        return FutexAddress(region="anon")

    def symbolize(self, addr: int) -> str:
        """'func+0x1f [file]'; '[file+0xoffset]' without a symbol."""
        r = self._file_vaddr(addr)
        if r is None:
            return "[unknown]"
        path, vaddr, syms = r
        base = os.path.basename(path)
        # a return address points after the call: look up the call itself
        hit = syms.function_at(vaddr) or syms.function_at(vaddr - 1) if syms else None
        if hit:
            return f"{hit[0]}+0x{hit[1]:x} [{base}]"
        return f"[{base}+0x{vaddr:x}]"
