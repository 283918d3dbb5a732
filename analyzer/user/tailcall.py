"""Frames a tail call took off a user stack, found again from the call.

A function that ends with `pthread_mutex_unlock(&m)` (a lock guard going
out of scope at its end, in C++ or Rust) is compiled to `jmp
pthread_mutex_unlock`: its frame is gone before the unlock runs, and the
stack the release probe sees (probes/holders.bpf.h) goes from the C
library's unlock straight to the caller. The caller's return address still
follows its `call` of the lost function: where that is a direct call (`e8
rel32`, x86-64) to the start of a function of the program that is not the
frame above, that function made the tail call, and is put back in the stack.
A call through the PLT (a library function called normally) or through a
register says nothing and changes nothing.
"""
from __future__ import annotations

import functools
from typing import Callable

CALL_REL32 = 0xE8


@functools.lru_cache(maxsize=64)
def _segments(path: str) -> tuple[tuple[int, int, int], ...]:
    """The executable LOAD segments of an ELF file: (vaddr, size in the
    file, file offset)."""
    from elftools.elf.elffile import ELFFile    # here: `lockscope` runs its checks before pyelftools is needed
    try:
        with open(path, "rb") as f:
            return tuple((s["p_vaddr"], s["p_filesz"], s["p_offset"]) for s in ELFFile(f).iter_segments()
                         if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1)
    except (OSError, ValueError, Exception):   # a file gone, or not ELF (pyelftools raises its own errors)
        return ()


def _code(path: str, vaddr: int, n: int) -> bytes | None:
    """n bytes of code at an ELF virtual address of a file, or None."""
    for start, size, offset in _segments(path):
        if start <= vaddr and vaddr + n <= start + size:
            try:
                with open(path, "rb") as f:
                    f.seek(offset + vaddr - start)
                    return f.read(n)
            except OSError:
                return None
    return None


def call_target(space, ret: int) -> int | None:
    """The runtime address a direct `call rel32` ending at return address
    `ret` called, or None (another kind of call, or the code not readable)."""
    loc = space.code_location(ret - 1)
    if loc is None:
        return None
    path, vaddr = loc
    code = _code(path, vaddr + 1 - 5, 5)
    if not code or len(code) < 5 or code[0] != CALL_REL32:
        return None
    return ret + int.from_bytes(code[1:], "little", signed=True)


def restore(space, ips: list[int], frames: list[str], own: Callable[[str], bool],
            function: Callable[[str], str]) -> tuple[list[int], list[str]]:
    """The stack (ips, and frames: their symbolized names) with the function
    a tail call removed put back above the innermost frame of the program's
    own code (`own(frame)`); `function(frame)` is a frame's function name."""
    for i, fr in enumerate(frames):
        if not own(fr):
            continue
        if i == 0:
            break
        target = call_target(space, ips[i])
        if target is None:
            break
        name = space.symbolize(target)
        if name.startswith("[") or "+0x0 [" not in name or not own(name) or \
                function(name) in (function(frames[i - 1]), function(fr)):
            break
        return ips[:i] + [target] + ips[i:], frames[:i] + [name] + frames[i:]
    return ips, frames
