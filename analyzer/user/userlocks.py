"""User-space locks: futex waits named by ELF symbol or by user stack.

The futex probe (probes/futexwaits.bpf.h) aggregates futex waits by (process,
futex address, op, user stack); the loader adds the memory maps of those
processes, read while they were alive. Here:

- `resolve(data)` turns that into the record's raw form: every futex address
  resolved through the maps to a file, offset and, when it lies in a global or
  static object of the program or a library, the ELF symbol (STT_OBJECT)
  covering it; every user stack symbolized with the ELF function symbols
  (the separate debug file of a library, found by build id, when the library
  itself is stripped). Reading ELF files is done here, once, at record time.
- `name_futexes(raw, workers, window_ns)` groups the waits into `Lock`s from
  that raw form alone (testable offline): tier `verified` for an address
  resolved to a symbol (`pthread_mutex pmutex_global_lock in
  lockscope-workload`), tier `site` for heap, stack or anonymous memory,
  named by the innermost frame of the program outside the C library
  (`pthread_mutex @ worker_loop (heap)`).

The kind comes from the wait op and the C library frame the wait came from
(`__lll_lock_wait` -> pthread_mutex, `pthread_cond_wait` -> pthread_cond...).
Waits in pthread_join are a thread waiting for another to exit, not a lock:
they are left out of the locks (the off-CPU summary still has that time).
"""
from __future__ import annotations

import bisect
import functools
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from typing import Any

from lockscope.analyzer import demangle, futexspin, libraries, sleepkinds, unwind
from lockscope.analyzer.lockacc import MAX_FRAMES, LockAcc, heaviest_first, spread
from lockscope.jsondata import format_addr, from_dict, from_list, parse_addr
from lockscope.probedata import (FutexAddress, FutexKernelWait, FutexProbe, FutexWait, RawProbe, futex_key,
                                 heaviest)
from lockscope.record import Lock

FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2 = 0, 6, 9, 11, 13
FUTEX_OP_WAITV = 0x100
OP_NAMES = {FUTEX_WAIT: "wait", FUTEX_LOCK_PI: "lock_pi", FUTEX_WAIT_BITSET: "wait_bitset",
            FUTEX_WAIT_REQUEUE_PI: "wait_requeue_pi", FUTEX_LOCK_PI2: "lock_pi2", FUTEX_OP_WAITV: "waitv"}
DEBUG_ROOT = Path("/usr/lib/debug")
PAGE = 4096
COMPONENT = "user space"



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


def _build_id(elf) -> str | None:
    for sec in elf.iter_sections():
        if sec.header.sh_type == "SHT_NOTE":
            for note in sec.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return note["n_desc"]
    return None


def _symbols_of(elf, table: str, functions: list, objects: list) -> bool:
    sec = elf.get_section_by_name(table)
    if sec is None:
        return False
    for sym in sec.iter_symbols():
        typ = sym["st_info"]["type"]
        if not sym.name or sym["st_shndx"] == "SHN_UNDEF" or not sym["st_value"]:
            continue
        # versioned aliases (name@@GLIBC_x) are the same symbol
        item = (sym["st_value"], sym["st_size"], sym.name.split("@")[0])
        if typ in ("STT_FUNC", "STT_GNU_IFUNC"):
            functions.append(item)
        elif typ == "STT_OBJECT":
            objects.append(item)
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
                bid = _build_id(elf)
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


def resolve(data: dict) -> dict[str, Any]:
    """The futex part of the probe's data event, as kept in the record's raw
    section (RawProbe's futex fields): the heaviest aggregates, their stacks
    symbolized and their addresses resolved (while the ELF files are at hand).

    An aggregate with a copy of its user stack (`user_stack_copies`: the
    registers and top of the stack at the sleep) gets the stack unwound from
    it with the ELF CFI (analyzer/unwind.py), spliced with its frame-pointer
    stack, under a key of its own ("pid:cfiN", distinct stacks of a process
    numbered from 0) named by `FutexWait.user_stack`; the others keep the
    frame-pointer stack ("pid:stack"), unwound from the older probe's
    `user_stack_words` (256 bytes by stack id) where those are given."""
    if data.get("futex_probe") is None:
        return {}
    out: dict[str, Any] = {"futex_probe": from_dict(FutexProbe, data["futex_probe"])}
    if "futex" not in data:
        return out
    entries = heaviest(from_list(FutexWait, data["futex"]), "total_ns")
    spaces = {int(tgid): AddressSpace(parse_maps(rows)) for tgid, rows in data.get("user_maps", {}).items()}
    stacks_raw = data.get("user_stacks", {})
    copies = _stack_copies(data.get("user_stack_copies") or [])
    words_raw = data.get("user_stack_words", {})
    addresses: dict[str, FutexAddress] = {}
    stacks: dict[str, list[str]] = {}
    unwound: dict[tuple[int, tuple[int, ...]], str] = {}     # (tgid, ips) -> key
    n_unwound: dict[int, int] = defaultdict(int)
    for e in entries:
        space = spaces.get(e.tgid)
        key = futex_key(e)
        if key not in addresses:
            addresses[key] = space.resolve_data(e.uaddr) if space else \
                FutexAddress(region="unknown", reason="the process exited before its memory maps were read")
        sid = str(e.stack)
        copy = copies.get((e.tgid, e.tid, e.uaddr, e.op, e.stack))
        if copy is not None and space is not None:
            ips = tuple(unwind.unwind(space, *copy, [parse_addr(a) for a in stacks_raw.get(sid, [])]))
            ukey = unwound.get((e.tgid, ips))
            if ukey is None:
                ukey = unwound[(e.tgid, ips)] = f"{e.tgid}:cfi{n_unwound[e.tgid]}"
                n_unwound[e.tgid] += 1
                stacks[ukey] = [space.symbolize(a) for a in ips]
            e.user_stack = ukey
            continue
        skey = f"{e.tgid}:{sid}"
        if sid in stacks_raw and skey not in stacks:
            ips = [parse_addr(a) for a in stacks_raw[sid]]
            if space and ips and sid in words_raw:
                # the older probe: the top 256 bytes of the stack of the first
                # wait with this stack (its sp not kept), unwound as well
                words = b"".join(parse_addr(w).to_bytes(8, "little") for w in words_raw[sid])
                ips = unwind.unwind(space, ips[0], unwind.UNKNOWN_SP, None, words, ips)
            stacks[skey] = [space.symbolize(a) for a in ips] if space else ["[unknown]"] * len(ips)
    _demangle(stacks, addresses)
    out.update({"futex": entries, "user_stacks": stacks, "futex_addresses": addresses})
    if "futex_kernel" in data:
        out["futex_kernel"] = heaviest(from_list(FutexKernelWait, data["futex_kernel"]), "total_ns")
    return out


def _stack_copies(rows: list[dict]) -> dict[tuple, tuple[int, int, int, bytes]]:
    """The probe's user stack copies by aggregate key (tgid, tid, uaddr, op,
    stack): (ip, sp, bp, the bytes from sp up); a malformed one is left out."""
    out = {}
    for c in rows:
        try:
            out[(int(c["tgid"]), int(c["tid"]), parse_addr(c["uaddr"]), int(c["op"]), int(c["stack"]))] = \
                (parse_addr(c["ip"]), parse_addr(c["sp"]), parse_addr(c.get("bp", 0)), bytes.fromhex(c["bytes"]))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _demangle(stacks: dict[str, list[str]], addresses: dict[str, FutexAddress]) -> None:
    """C++ and Rust names of frames and futex symbols made readable, all in
    one demangler run (analyzer/demangle.py)."""
    names = demangle.demangle_all([frame_function(f) for fr in stacks.values() for f in fr] +
                                  [a.symbol for a in addresses.values() if a.symbol])
    if not names:
        return
    for key, frames in stacks.items():
        stacks[key] = [names[fn] + f[len(fn):] if (fn := frame_function(f)) in names else f for f in frames]
    for a in addresses.values():
        if a.symbol in names:
            a.symbol = names[a.symbol]


# ---- naming ----------------------------------------------------------------

_FRAME = re.compile(r"^(.*)\+0x[0-9a-f]+ \[[^\]]*\]$")


def frame_function(frame: str) -> str:
    """The function of a frame 'func+0x1f [file]' (a demangled C++ name may
    itself hold '+' or spaces); a frame without a symbol is returned whole."""
    if frame.startswith("["):
        return frame
    m = _FRAME.match(frame)
    return m.group(1) if m else frame.split("+", 1)[0]


def frame_file(frame: str) -> str:
    m = re.search(r"\[([^\]+]+)(?:\+0x[0-9a-f]+)?\]$", frame)
    return m.group(1) if m else ""


def in_runtime(frame: str) -> bool:
    """Whether a frame is a library's (the C library, libstdc++, Rust's std,
    a runtime: analyzer/libraries.toml), the lock's implementation rather
    than the program's code that took it."""
    return libraries.default().is_library(frame_file(frame), frame_function(frame))


def futex_kind(op: int, frames: list[str]) -> str:
    """The user-space primitive of a futex wait (pthread_mutex,
    pthread_cond, pthread_join, ...; `futex` when none is recognised): its
    op, then the C library frames on top of its stack (sleepkinds.toml)."""
    return sleepkinds.default().futex_primitive(op, runtime_functions(frames))[0]


def runtime_functions(frames: list[str]) -> list[str]:
    """The library functions at the top of a user stack (the C library's,
    Rust std's, a runtime's), innermost first."""
    out = []
    for fr in frames:
        if not in_runtime(fr):
            break
        out.append(frame_function(fr))
    return out


def site(frames: list[str]) -> str:
    """The program's own code that took a lock: the innermost frame outside
    the libraries (libraries.toml) with a function name."""
    for fr in frames:
        if not in_runtime(fr) and not fr.startswith("["):
            return frame_function(fr)
    for fr in frames:
        if not in_runtime(fr):
            return fr
    return "[no user frame]"


_REGION_NAMES = {"heap": "heap", "stack": "stack", "anon": "anonymous memory", "file": "file mapping",
                 "unmapped": "unmapped", "unknown": "address not resolved"}


def _futexes(raw: RawProbe) -> dict[tuple, list[FutexWait]]:
    """The aggregates of each futex (tgid, uaddr, op)."""
    per_futex: dict[tuple, list[FutexWait]] = defaultdict(list)
    for e in raw.futex or []:
        per_futex[(e.tgid, e.uaddr, e.op)].append(e)
    return per_futex


def _futex_lock(e: FutexWait, kind: str, frames: list[str], raw: RawProbe, groups: dict[str, LockAcc]) -> LockAcc:
    """The named lock a futex's waits add up to: verified by ELF symbol, or site."""
    where = raw.futex_address(e)
    if where.region == "object":
        base = os.path.basename(where.file)
        # the lock object, not the futex word in it (a glibc rwlock has two)
        offset = sleepkinds.default().object_start(kind, where.symbol_offset or 0)
        sym = where.symbol + (f"+0x{offset:x}" if offset else "")
        name, cls, tier = f"{kind} {sym} in {base}", f"{kind} {where.symbol}", "verified"
        obj = f"{where.symbol} ({where.file})"
    else:
        region = _REGION_NAMES.get(where.region, where.region)
        s = site(frames) if frames else "[no stack]"
        name, cls, tier, obj = f"{kind} @ {s} ({region})", f"{kind} @ {s}", "site", None
    acc = groups.get(name)
    if acc is None:
        acc = groups[name] = LockAcc(name, cls, tier, kind, object=obj, component=COMPONENT,
                                     explain="user-space lock: time threads slept in futex waits on it")
    return acc


def lock_words(raw: RawProbe, folded=None) -> set[tuple[int, int]]:
    """The futex words (tgid, uaddr) that name_futexes counts under a lock
    whatever the roles say: the word of a lock primitive (a mutex, a rwlock;
    not a condition variable or semaphore, a lock or idle by its wake-ups)
    by its heaviest sampled stack, as roles.futex_primitives decides, with a
    wait of a lock kind that no USDT wait folds (`folded`). Kernel spinning
    inside the futex syscalls on these words is their lock's
    (analyzer/futexspin.py)."""
    table = sleepkinds.default()
    out = set()
    for (tgid, uaddr, op), es in _futexes(raw).items():
        framed = [e for e in es if raw.user_frames(e)]
        top = max(framed, key=lambda e: e.total_ns, default=None)
        if not sum(e.total_ns for e in es) or \
                table.primitive_kind(futex_kind(op, raw.user_frames(top) if top else [])) != sleepkinds.LOCK:
            continue
        for e in framed or es:
            frames = raw.user_frames(e)
            if folded is not None and frames and folded(e, frames):
                continue
            if table.primitive_kind(futex_kind(e.op, frames)) == sleepkinds.LOCK:
                out.add((tgid, uaddr))
                break
    return out


def _add_kernel_spin(raw: RawProbe, groups: dict[str, LockAcc], words: dict[tuple, dict[str, int]],
                     folded) -> None:
    """The kernel lock waits spun inside the futex syscalls on a lock's words
    join that lock (analyzer/futexspin.py), split over the locks a word's
    waits went to by their wait on it, and listed by kernel lock name."""
    from lockscope.analyzer import naming     # naming imports this module

    charged = naming.futex_charges(raw, folded)
    names = naming.address_names(raw, {c.lock for c in charged})
    for c in charged:
        locks = words.get((c.tgid, c.uaddr), {})
        name = names.get(c.lock, format_addr(c.lock))
        weights = list(locks.values())
        for acc_name, n, ns in zip(locks, futexspin.split(c.count, weights), futexspin.split(c.total_ns, weights)):
            groups[acc_name].add_kernel_spin(name, n, ns, c.max_ns)


def name_futexes(raw: RawProbe, workers: int, window_ns: int, roles=None, folded=None) -> list[Lock]:
    """Futex waits of the record's raw section as named locks, heaviest
    first. Waits that are not for a lock are left out: with `roles` (a
    roles.RoleAnalysis) every wait the sleep kinds call idle (a join, a
    condition variable or semaphore wait for work), and each lock's wait is
    split by the role of the waiting thread (Lock.roles); without it (records
    of threads without per-thread data) only pthread_join waits.

    Waits counted without a stack (sampling) take the frames of their
    futex's sampled waits, in proportion to those waits' time. `folded(e,
    frames)` true: the sleep of a lock the program named itself (a USDT
    wait, analyzer/usdt.py), counted there, left out here.

    Kernel locks spun on inside the futex syscalls on a lock's words are
    part of its wait (`Lock.kernel_spin`; naming.name_locks leaves them out)."""
    table = sleepkinds.default()
    groups: dict[str, LockAcc] = {}
    words: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))   # (tgid, uaddr) -> lock -> wait
    for key, es in _futexes(raw).items():
        if roles is not None:
            prim = roles.primitive.get(key, sleepkinds.UNKNOWN_PRIMITIVE)
            part = {id(e): roles.lock_fraction(e, prim) * e.total_ns for e in es}
        else:
            prim = None
            part = {id(e): float(e.total_ns) for e in es}
        lock_ns = sum(part.values())
        total_ns = sum(e.total_ns for e in es)
        if lock_ns <= 0 or not total_ns:
            continue
        scale = lock_ns / total_ns
        by_role: dict[str, float] = defaultdict(float)
        if roles is not None:
            for e in es:
                by_role[roles.role_of(e.tid) or f"pid {e.tgid}"] += part[id(e)] / lock_ns
        for sh in spread(es, lambda e: bool(raw.user_frames(e))):
            e = sh.entry
            frames = raw.user_frames(e)
            if folded is not None and frames and folded(e, frames):
                continue
            kind = futex_kind(e.op, frames) if frames or prim is None else prim
            if roles is None and table.primitive_kind(kind) == sleepkinds.IDLE:
                continue
            acc = _futex_lock(e, kind, frames, raw, groups)
            acc.addresses.add(f"{e.tgid}:{format_addr(table.object_start(kind, e.uaddr))}")
            wait = round(sh.wait_ns * scale)
            words[(e.tgid, e.uaddr)][acc.name] += wait
            acc.add(round(sh.count * scale), wait, sh.max_ns, OP_NAMES.get(e.op, str(e.op)))
            acc.add_stack(tuple(frames[:MAX_FRAMES]), "futex", round(sh.count * scale), wait,
                          sh.sampled if frames else 0)
            for role, frac in by_role.items():
                acc.roles[role] += round(wait * frac)
    if raw.futex_kernel:
        _add_kernel_spin(raw, groups, words, folded)
    return heaviest_first([acc.to_lock(workers, window_ns, lambda k: site(list(k)) if k else "[no stack]")
                           for acc in groups.values()])


def futex_warnings(raw: RawProbe | None) -> list[str]:
    probe = raw.futex_probe if raw else None
    if probe and not probe.attached:
        return [f"user-space locks not measured: {probe.reason or 'the futex probe did not load'}"]
    return []
