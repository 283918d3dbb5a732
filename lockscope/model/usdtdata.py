"""The run record's part for application lock waits named by a program's
own probes or functions (probes/usdt.bpf.c, analyzer/user/usdt.py):
`probe.raw.usdt_probe` and `probe.raw.usdt`, part of the schema of
lockscope/model/probedata.py. Documented in README.md, "Run record"."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from lockscope.model.jsondata import optional


@dataclass
class UsdtStack:
    """One call path of a lock's waits, innermost first (a JVM's: its Java
    frames from the first one out, analyzer/user/jvmframes.py), and the
    waits that took it."""
    frames: list[str] = field(default_factory=list)
    count: int = 0
    total_ns: int = 0


@dataclass
class JvmProcess:
    """A JVM whose Java monitors are named at ObjectMonitor::EnterI (probes/
    jvmmon.c): its libjvm.so, whether they were, and why not (monitor probes
    on, a layout not readable)."""
    tgid: int = 0
    file: str = ""
    named: bool = False
    by_probes: bool = False      # its -XX:+DTraceMonitorProbes probes name them instead
    parks_named: bool = False    # its parks (LockSupport.park) named by their blocker's class
    # how its waits' Java frames were walked: "java" (interpreted and compiled, from the
    # thread's last Java frame), "frame pointers" (compiled ones only with
    # -XX:+PreserveFramePointer), "none"; absent in records before them
    frames: Optional[str] = optional()
    reason: Optional[str] = optional()


@dataclass
class UsdtAttached:
    """One probe or function attached (usdt.toml's start, done or return)."""
    probe: str = ""              # start | done | return
    cookie: int = 0
    provider: str = ""           # "-": a function, not a USDT probe
    name: str = ""
    path: str = ""


@dataclass
class UsdtProbe:
    """What was attached: each start/done probe and the binary."""
    loaded: bool = False
    reason: Optional[str] = optional()
    attached: list[UsdtAttached] = field(default_factory=list)
    jvms: Optional[list[JvmProcess]] = optional()   # absent in records before them


@dataclass
class UsdtWait:
    """Waits of one (process, table entry, lock, mode), named at record time."""
    tgid: int
    entry: int = 0
    lock: str = ""               # e.g. "LWLock WALWrite", "heavyweight lock on transactionid"
    kind: str = ""
    component: str = ""
    mode: str = ""
    probe: str = ""              # provider:start
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    explain: Optional[str] = optional()
    # distinct objects behind it, where the probe tells them apart (a JVM's
    # monitors, by the ObjectMonitor's address: one deflated and inflated again counts again)
    instances: Optional[int] = optional()
    # where in the program it waited (a JVM's: its Java frames), heaviest first
    stacks: Optional[list[UsdtStack]] = optional()
