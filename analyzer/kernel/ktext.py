"""Global kernel locks named from the kernel's own text (issue 29).

On a kernel without data symbols in /proc/kallsyms, a contended static lock
is only an address. The function that takes it loads that address as a
constant into the first argument register before the call: `rtnl_lock` is
`mov $rtnl_mutex,%rdi; jmp mutex_lock`, `cpus_read_lock` calls
`__percpu_down_read` with `mov $cpu_hotplug_lock,%rdi` before it. The probe
reads the text before the return addresses of the waits' stacks and the
first bytes of the functions called there (probes/ktext.c); this module
finds the immediates (x86-64: `mov $imm32,%rdi` sign-extended, `movabs
$imm64,%rdi`) and, where a function of globals.toml loads exactly the
contended address, names the lock after its variable. The address match
is what makes it verified; a byte pattern that merely looks like an
instruction cannot match a contended lock's address by chance."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lockscope import tables
from lockscope.model.ktextdata import TextCall
from ..lockacc import LockAcc
from .knowledge import function
from lockscope.proberows import constant

TABLE = Path(__file__).resolve().with_name("globals.toml")
KTEXT_BYTES = constant("KTEXT_BYTES")    # the bytes read at each address
CALL = 0xE8                      # call rel32
JMP = 0xE9                       # jmp rel32
MOV_RDI_IMM32 = b"\x48\xc7\xc7"  # mov $imm32 (sign-extended), %rdi
MOVABS_RDI = b"\x48\xbf"         # movabs $imm64, %rdi
# what a function may begin with before its body: endbr64, the 5-byte nop
# that ftrace patches, or the call to __fentry__ it becomes
_PROLOGUE = (b"\xf3\x0f\x1e\xfa", b"\x0f\x1f\x44\x00\x00", b"\x66\x0f\x1f\x44\x00\x00")


@dataclass(frozen=True)
class Global:
    variable: str
    loaded_by: tuple[str, ...]
    component: str
    explain: str


@dataclass(frozen=True)
class Found:
    """A static lock address loaded by a function of the table."""
    rule: Global
    function: str           # the function that loads it
    site: str               # the caller's frame whose call led there
    wrapper: bool           # True: the function is a wrapper the caller calls


@functools.lru_cache(maxsize=1)
def table() -> dict[str, Global]:
    """globals.toml, by each function that loads a variable."""
    out: dict[str, Global] = {}
    for i, g in enumerate(tables.load(TABLE, Global, "global")):
        for fn in g.loaded_by:
            if fn in out:
                raise tables.error(TABLE, tables.where("global", i, g.variable),
                                   f"{fn} is listed for {out[fn].variable} and {g.variable}")
            out[fn] = g
    return out


def _s64(b: bytes) -> int:
    return int.from_bytes(b, "little", signed=True) & 0xFFFFFFFFFFFFFFFF


def rdi_before_call(code: bytes) -> int | None:
    """The constant last loaded into %rdi in `code`, the bytes before a
    return address (the call is their last 5 bytes)."""
    body = code[:-5]
    best, at = None, -1
    i = body.rfind(MOV_RDI_IMM32)
    if i >= 0 and i + 7 <= len(body):
        best, at = _s64(body[i + 3:i + 7]), i
    j = body.rfind(MOVABS_RDI)
    if j > at and j + 10 <= len(body):
        best = int.from_bytes(body[j + 2:j + 10], "little")
    return best


def wrapper_loads(code: bytes) -> int | None:
    """The constant a wrapper loads into %rdi before it jumps to (or calls)
    the lock function: `code` is the wrapper's first bytes."""
    i = 0
    while True:
        for p in _PROLOGUE:
            if code.startswith(p, i):
                i += len(p)
                break
        else:
            if code[i:i + 1] == bytes([CALL]) and i == 0:     # call __fentry__ (ftrace on)
                i += 5
                continue
            break
    if code.startswith(MOV_RDI_IMM32, i) and code[i + 7:i + 8] in (bytes([JMP]), bytes([CALL])):
        return _s64(code[i + 3:i + 7])
    if code.startswith(MOVABS_RDI, i) and code[i + 10:i + 11] in (bytes([JMP]), bytes([CALL])):
        return int.from_bytes(code[i + 2:i + 10], "little")
    return None


def text_calls(regions: dict[int, bytes], symbolize: Callable[[int], str]) -> list[TextCall]:
    """The direct calls the probe read (`regions`: address -> bytes, the
    bytes before each return address and the called functions' first
    bytes), each with what it loads: kept where a constant is loaded."""
    out = []
    for addr, code in sorted(regions.items()):
        if len(code) != KTEXT_BYTES or code[-5] != CALL:
            continue
        ret = addr + KTEXT_BYTES
        target = (ret + int.from_bytes(code[-4:], "little", signed=True)) & 0xFFFFFFFFFFFFFFFF
        tcode = regions.get(target, b"")
        if rdi_before_call(code) is None and (not tcode or wrapper_loads(tcode) is None):
            continue
        out.append(TextCall(ret=ret, caller=symbolize(ret), target=target,
                            function=function(symbolize(target)),
                            caller_bytes=code.hex(), target_bytes=tcode.hex()))
    return out


def find(addr: int, frames: list[list[str]], calls: list[TextCall]) -> Found | None:
    """The variable of the static lock at `addr`, from the calls in its
    waits' stacks (`frames`: each stack's symbolized frames): a wrapper of
    the table called there that loads `addr`, or a function of the table
    that loads `addr` itself before its call."""
    if not calls:
        return None
    by_site = {c.caller: c for c in calls}
    rules = table()
    for stack in frames:
        for frame in stack:
            c = by_site.get(frame)
            if c is None:
                continue
            if c.function in rules and c.target_bytes and wrapper_loads(bytes.fromhex(c.target_bytes)) == addr:
                return Found(rules[c.function], c.function, frame, wrapper=True)
            fn = function(frame)
            if fn in rules and rdi_before_call(bytes.fromhex(c.caller_bytes)) == addr:
                return Found(rules[fn], fn, frame, wrapper=False)
    return None


def lock_acc(found: Found, kind: str, groups: dict[str, LockAcc]) -> LockAcc:
    """The named lock of a static address a function of the table loads
    (verified: the kernel's text says so)."""
    g = found.rule
    acc = groups.get(g.variable) or LockAcc(g.variable, g.variable, "verified", kind)
    acc.object = acc.object or "kernel image (static data)"
    acc.component, acc.rule = acc.component or g.component, acc.rule or f"globals.toml: {g.variable}"
    who = f"{found.function}() (called in {function(found.site)})" if found.wrapper else f"{found.function}()"
    acc.explain = acc.explain or (f"static variable {g.variable} of the kernel image: the kernel's text shows "
                                  f"{who} loading this address for its lock: {g.explain}")
    return acc
