"""The loader's rows that lockscope reads at record time and does not keep
as they came: the raw USDT waits (probes/usdt.c),
the JVMs' wait stacks and method names (usdt.c), the Python stacks
(pyframes.c), the USDT-named locks of the release sites (holders.c) and
the Go processes (gomutex.c). Each is declared in proberows.toml, which
generates its writer in the loader and checks it against its class here;
the analyzer reads them with jsondata.from_list, never by key."""
from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Optional

from lockscope.model.jsondata import HEX, optional


@dataclass
class UsdtRow:
    """Waits of one (process, usdt.toml entry, lock value and name, mode,
    call path) as the probe counted them (analyzer/user/usdt.py names them)."""
    tgid: int
    entry: int = 0               # the table's probe index
    value: int = 0               # the numeric argument naming the lock; a JVM's: the object
    mode: int = 0
    name: str = ""               # the string argument naming the lock
    stack: Optional[int] = optional(hex=True)   # a JvmStackRow.id; absent: none
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0


@dataclass
class JvmStackRow:
    """A JVM wait's call path: return addresses, or an interpreted frame's
    Method * with JVM_METHOD_FRAME set (analyzer/user/jvmframes.py)."""
    id: int = field(metadata=HEX)
    tgid: int = 0
    pcs: list[str] = field(default_factory=list)    # "0x..." each


@dataclass
class JvmMethodRow:
    """The name of an interpreted Java frame's method, by (process, Method *)."""
    tgid: int = 0
    method: int = field(default=0, metadata=HEX)
    cls: str = field(default="", metadata={"json": "class"})   # internal form: java/util/Hashtable
    name: str = ""


@dataclass
class PyStackRow:
    """A Python stack read by probes/pyframes.bpf.h: `function (file.py:line)`
    frames innermost first ("?": a code object not named)."""
    id: int = 0
    tgid: int = 0
    frames: list[str] = field(default_factory=list)


@dataclass
class HoldUsdtLock:
    """A lock that a program's USDT probes name, by the id its holders know
    it by (usdtwait.bpf.h): the key of its waits."""
    id: int = field(metadata=HEX)
    tgid: int = 0
    entry: int = 0
    value: int = 0
    mode: int = 0
    name: str = ""


@dataclass
class GoProcess:
    """A tracked process running a Go executable, and its load bias."""
    tgid: int = 0
    exe: str = ""
    bias: int = field(default=0, metadata=HEX)


@dataclass
class StackCopy:
    """A copy of a thread's user registers and stack top (struct
    ustack_copy), unwound with the ELF CFI at record time (analyzer/user/unwind.py)."""
    ip: int = field(default=0, metadata=HEX)
    sp: int = field(default=0, metadata=HEX)
    bp: int = field(default=0, metadata=HEX)
    bytes: str = ""              # the stack from sp up, lowercase hex

    def regs(self) -> tuple:
        """(ip, sp, bp, the bytes from sp up), as unwind.unwind takes them."""
        return self.ip, self.sp, self.bp, builtins.bytes.fromhex(self.bytes)


@dataclass
class FutexStackCopy(StackCopy):
    """The copy of a walked futex wait, by its FutexWait key."""
    tgid: int = 0
    tid: int = 0
    uaddr: int = field(default=0, metadata=HEX)
    op: int = 0
    stack: int = -1
    sample: int = 0
    in_usdt: Optional[int] = optional()


@dataclass
class HoldStackCopy(StackCopy):
    """The copy of a walked release, by its Release key."""
    tgid: int = 0
    lock: int = field(default=0, metadata=HEX)
    stack: int = -1
    sample: int = 0


@dataclass
class SleepStackCopy(StackCopy):
    """The copy of a sleep of a thread that takes SQLite's lock bytes
    (probes/filelocks.bpf.c, FLK_SLEEP), by the id its waits carry
    (FileLockWait.copy)."""
    id: int = 0
    tgid: int = 0


@dataclass
class SampleCopy(StackCopy):
    """The copy of a CPU sample, by its number (a cpu_samples row's `copy`)."""
    copy: int = 0
