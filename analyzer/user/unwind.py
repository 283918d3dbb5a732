"""User stacks unwound with the ELF call-frame information (x86-64).

The futex probe copies, when a thread goes to sleep in a futex wait, its
user registers ip, sp, bp and the top bytes of its user stack from sp (like
`perf record --call-graph dwarf`). Here, after the run, that copy is unwound
with the `.eh_frame` of each file the frames are in (DWARF CFI, read with
pyelftools), through functions built without frame pointers, such as all of
Debian's C library: the frame-pointer walk the probe also takes skips them
(and with them `pthread_cond_wait`, `__lll_lock_wait`, `pthread_join`...,
what the thread waited in) or stops in them.

- `cfi_table(path)`: the CFI of one file, cached. The FDEs are found through
  the `.eh_frame_hdr` search table (one binary search, no scan of the whole
  `.eh_frame`: librocksdb has 18,000 FDEs) and parsed and decoded one at a
  time, when a frame falls in them. pyelftools 0.33 cannot decode an FDE
  with DW_CFA_GNU_args_size (common in C++, one in libc): it is decoded
  without that instruction (no unwinding rule); an FDE that still fails is
  skipped as missing.
- `cfi_frames(space, ip, sp, bp, stack)`: the frames the copy unwinds to and
  why the walk stopped. Registers by DWARF x86-64 number: rbx 3, rbp 6, rsp
  7, r12-r15, return address column 16 (the CIE's). CFA = register + offset
  (rsp or rbp based); registers saved at CFA + n are read from the copy.
  The walk stops at an expression rule (not evaluated: signal frames, PLT
  entries), a read outside the copy, an ip outside any mapped file or
  without CFI, an undefined or zero return address (the outermost frame,
  `_start` or `clone3`), an sp that does not grow, or `max_frames`.
- `splice(cfi, fp)` and `unwind(...)`: the CFI frames continued by the
  frame-pointer stack once they meet one of its frames (past the copy's end
  the frame pointers go on), else followed by the frame-pointer frames not
  among them.

`space` is an addrspace.AddressSpace (the process's maps); its
`code_location(addr)` gives the file and ELF virtual address of an address
in an executable file mapping. Return addresses are looked up at ip - 1 (the
call, not what follows it: a call may be a function's last instruction).
"""
from __future__ import annotations

import bisect
import functools
import io
import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Protocol, Sequence
from lockscope.proberows import constant

MAX_UNWIND_DEPTH = constant("MAX_STACK_DEPTH")    # frames unwound: as the probe's frame-pointer walk
RBX, RBP, RSP = 3, 6, 7
CALLEE_SAVED = (RBX, RBP, 12, 13, 14, 15)
WORD = 8
# where to put a copy whose sp was not kept (the older probe's 256 bytes,
# `user_stack_words`): rsp-based rules only need offsets from sp, and no
# absolute address (a saved rbp) falls in a copy placed this high
UNKNOWN_SP = 1 << 63

# .eh_frame_hdr pointer encodings (DW_EH_PE_*)
_PE_OMIT = 0xFF
_PE_FORMATS = {0x00: "<Q", 0x02: "<H", 0x03: "<I", 0x04: "<Q", 0x0A: "<h", 0x0B: "<i", 0x0C: "<q"}
_PE_PCREL, _PE_DATAREL = 0x10, 0x30
_TABLE_DATAREL_SDATA4 = 0x3B     # what GNU ld, gold, lld and mold write
_CFA_GNU_ARGS_SIZE = 0x2E


class Space(Protocol):
    def code_location(self, addr: int) -> Optional[tuple[str, int]]: ...


# ---- one file's CFI ---------------------------------------------------------

@dataclass
class CfiTable:
    """The `.eh_frame` of one ELF file: FDE start addresses (sorted) and
    their offsets in the section, parsed and decoded on demand."""
    path: str
    starts: list[int]
    offsets: list[int]
    entry_at: Any                                   # offset -> pyelftools CFIEntry
    _rows: dict[int, Any] = field(default_factory=dict)
    failed: int = 0                                 # FDEs pyelftools could not parse or decode

    def rule_row(self, vaddr: int) -> Optional[tuple[dict, int]]:
        """(the decoded CFI row in effect at `vaddr`, the return address
        column), or None where no FDE covers it."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0:
            return None
        off = self.offsets[i]
        got = self._rows.get(off, False)
        if got is False:
            got = self._rows[off] = self._decode(off)
        if got is None:
            return None
        lo, hi, pcs, rows, ra = got
        if not lo <= vaddr < hi:
            return None
        j = bisect.bisect_right(pcs, vaddr) - 1
        return (rows[j], ra) if j >= 0 else None

    def _decode(self, off: int):
        try:
            fde = self.entry_at(off)
            lo = fde.header["initial_location"]
            ra = fde.cie.header["return_address_register"]
            try:
                table = fde.get_decoded().table
            except Exception:
                # pyelftools 0.33 parses DW_CFA_GNU_args_size (C++ code, and
                # one FDE of libc) but its decoder rejects it: it only says
                # how many bytes of outgoing arguments are pushed, nothing an
                # unwinder needs, so decode again without it
                if not any(int(i.opcode) == _CFA_GNU_ARGS_SIZE for i in fde.instructions):
                    raise
                fde.instructions = [i for i in fde.instructions if int(i.opcode) != _CFA_GNU_ARGS_SIZE]
                table = fde.get_decoded().table
        except Exception:            # pyelftools raises assorted errors on what it cannot read
            self.failed += 1
            return None
        if not table:
            return None
        return lo, lo + fde.header["address_range"], [r["pc"] for r in table], table, ra


def _section(elf, name: str) -> Optional[tuple[bytes, int]]:
    sec = elf.get_section_by_name(name)
    if sec is None or sec.header.sh_type == "SHT_NOBITS":
        return None
    return sec.data(), sec["sh_addr"]


def _read_vaddr(elf, f, vaddr: int, size: int | None) -> Optional[bytes]:
    """File bytes at ELF virtual address `vaddr` (to the end of its loadable
    segment when `size` is None)."""
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= vaddr < seg["p_vaddr"] + seg["p_filesz"]:
            start = seg["p_offset"] + vaddr - seg["p_vaddr"]
            end = seg["p_offset"] + seg["p_filesz"]
            f.seek(start)
            return f.read(min(end - start, size) if size is not None else end - start)
    return None


def _encoded(data: bytes, pos: int, enc: int, vaddr: int, hdr_vaddr: int) -> tuple[Optional[int], int]:
    """One DW_EH_PE-encoded pointer of .eh_frame_hdr at `pos`: (value, next pos)."""
    fmt = _PE_FORMATS.get(enc & 0x0F)
    if enc == _PE_OMIT or fmt is None or enc & 0x70 not in (0, _PE_PCREL, _PE_DATAREL):
        return None, pos
    size = struct.calcsize(fmt)
    (v,) = struct.unpack_from(fmt, data, pos)
    if enc & 0x70 == _PE_PCREL:
        v += vaddr + pos
    elif enc & 0x70 == _PE_DATAREL:
        v += hdr_vaddr
    return v & 0xFFFFFFFFFFFFFFFF, pos + size


@functools.lru_cache(maxsize=64)
def cfi_table(path: str) -> Optional[CfiTable]:
    """The CFI of the ELF file at `path`, or None without a readable
    `.eh_frame`. Indexed through `.eh_frame_hdr` when it has the usual
    search table, else by parsing every entry once."""
    from elftools.common.exceptions import ELFError
    from elftools.dwarf.callframe import CallFrameInfo
    from elftools.dwarf.structs import DWARFStructs
    from elftools.elf.elffile import ELFFile
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf["e_machine"] != "EM_X86_64":
                return None
            hdr = _section(elf, ".eh_frame_hdr")
            if hdr is None:
                seg = next((s for s in elf.iter_segments() if s["p_type"] == "PT_GNU_EH_FRAME"), None)
                if seg is not None:
                    hdr = seg.data(), seg["p_vaddr"]
            eh = _section(elf, ".eh_frame")
            table = None
            if hdr is not None:
                data, hv = hdr
                if len(data) >= 4 and data[0] == 1:
                    eh_ptr, pos = _encoded(data, 4, data[1], hv, hv)
                    count, pos = _encoded(data, pos, data[2], hv, hv)
                    if eh is None and eh_ptr is not None:
                        got = _read_vaddr(elf, f, eh_ptr, None)
                        eh = (got, eh_ptr) if got else None
                    if data[3] == _TABLE_DATAREL_SDATA4 and count is not None and pos + 8 * count <= len(data):
                        table = [(a + hv, b + hv) for a, b in struct.iter_unpack("<ii", data[pos:pos + 8 * count])]
            if eh is None:
                return None
            eh_data, eh_vaddr = eh
            cfi = CallFrameInfo(stream=io.BytesIO(eh_data), size=len(eh_data), address=eh_vaddr,
                                base_structs=DWARFStructs(little_endian=True, dwarf_format=32, address_size=8),
                                for_eh_frame=True)
    except (OSError, ELFError, ValueError, struct.error):
        return None
    entry_at = getattr(cfi, "_parse_entry_at", None)      # pyelftools' parser of one entry
    if table is None or entry_at is None:
        try:
            entries = [e for e in cfi.get_entries() if hasattr(e, "cie") and e.cie is not None]
        except Exception:
            return None
        by_offset = {e.offset: e for e in entries}
        table = sorted((e.header["initial_location"], eh_vaddr + e.offset) for e in entries)
        entry_at = by_offset.__getitem__
    table.sort()
    return CfiTable(path, [a for a, _ in table], [b - eh_vaddr for _, b in table], entry_at)


# ---- unwinding ----------------------------------------------------------------

class Unwound(NamedTuple):
    frames: list[int]        # ip first, then return addresses
    stop: str                # why the walk ended
    outermost: bool          # it reached the stack's first frame (nothing beyond)


def cfi_frames(space: Space, ip: int, sp: int, bp: int | None, stack: bytes,
               max_frames: int = MAX_UNWIND_DEPTH) -> Unwound:
    """Unwind a copy of a user stack (`stack`: the bytes from `sp` up) from
    the registers ip, sp, bp (0 or None: unknown) with the files' CFI."""
    def word(addr: int) -> Optional[int]:
        o = addr - sp
        if o < 0 or o + WORD > len(stack):
            return None
        return int.from_bytes(stack[o:o + WORD], "little")

    regs: dict[int, int] = {RSP: sp}
    if bp:
        regs[RBP] = bp
    frames = [ip]
    pc, top = ip, True
    while True:
        if len(frames) >= max_frames:
            return Unwound(frames, f"{max_frames} frames", False)
        loc = space.code_location(pc if top else pc - 1)
        if loc is None:
            return Unwound(frames, f"0x{pc:x} is not in an executable file mapping", False)
        path, vaddr = loc
        table = cfi_table(path)
        if table is None:
            return Unwound(frames, f"no .eh_frame in {path}", False)
        got = table.rule_row(vaddr)
        if got is None:
            return Unwound(frames, f"no CFI for 0x{vaddr:x} in {path}", False)
        row, ra_col = got
        rule = row["cfa"]
        if rule.expr is not None or rule.reg is None:
            return Unwound(frames, f"CFA by expression at 0x{vaddr:x} in {path}", False)
        if rule.reg not in regs:
            return Unwound(frames, f"CFA based on unknown register {rule.reg} at 0x{vaddr:x} in {path}", False)
        cfa = regs[rule.reg] + rule.offset
        new: dict[int, int] = {RSP: cfa}
        ra = None
        for r in CALLEE_SAVED + (ra_col,):
            rr = row.get(r)
            v: Optional[int] = None
            if rr is None or rr.type == "SAME_VALUE":
                v = None if r == ra_col else regs.get(r)
            elif rr.type == "OFFSET":
                v = word(cfa + rr.arg)
                if v is None and r == ra_col:
                    return Unwound(frames, "return address beyond the stack copy", False)
            elif rr.type == "VAL_OFFSET":
                v = cfa + rr.arg
            elif rr.type == "REGISTER":
                v = regs.get(rr.arg)
            elif rr.type == "UNDEFINED":
                if r == ra_col:
                    return Unwound(frames, "outermost frame (return address undefined)", True)
            elif r == ra_col:
                return Unwound(frames, f"return address by {rr.type.lower()} at 0x{vaddr:x} in {path}", False)
            if r == ra_col:
                ra = v
            elif v is not None:
                new[r] = v
        if ra is None:
            return Unwound(frames, f"no return address rule at 0x{vaddr:x} in {path}", False)
        if ra == 0:
            return Unwound(frames, "outermost frame (return address 0)", True)
        if cfa <= regs[RSP]:
            return Unwound(frames, "stack pointer did not grow", False)
        frames.append(ra)
        regs, pc, top = new, ra, False


def splice(cfi: Sequence[int], fp: Sequence[int], outermost: bool = False) -> list[int]:
    """The CFI frames, continued by the frame-pointer stack `fp` (ip first)
    from the first of its frames after the first that the CFI frames reach;
    if they reach none, followed by the frame-pointer frames not among them
    (not when the CFI walk ended at the outermost frame)."""
    rest = list(fp[1:])
    first: dict[int, int] = {}
    for i, a in enumerate(rest):
        first.setdefault(a, i)
    for k in range(1, len(cfi)):
        if cfi[k] in first:
            return list(cfi[:k]) + rest[first[cfi[k]]:]
    if outermost or not cfi:
        return list(cfi) or list(fp)
    seen = set(cfi)
    return list(cfi) + [a for a in rest if a not in seen]


def unwind(space: Space, ip: int, sp: int, bp: int | None, stack: bytes, fp_stack: Sequence[int] = (),
           max_frames: int = MAX_UNWIND_DEPTH) -> list[int]:
    """The user stack of a sleeping thread: unwound from its registers and
    stack copy with the CFI, spliced with its frame-pointer stack."""
    u = cfi_frames(space, ip, sp, bp, stack, max_frames)
    return splice(u.frames, list(fp_stack), u.outermost)[:max_frames]
