"""Locks of managed runtimes by the names their users know (runtimes.toml):
CPython's GIL is one entry, "GIL (CPython)", whatever futex word of it a
thread sleeps on, and always a lock wait.

`lock_at(where)`: the runtime lock a futex address (probedata.FutexAddress:
region, file, symbol) lies in, or None. A data table: another runtime's lock
found by its symbol is one more [[lock]] there.

`python_stacks(locks, raw)`: the GIL's stacks by where its waiters were in
their Python code (RawProbe.py_waits), in place of the interpreter's C
frames (take_gil under _PyEval_EvalFrameDefault)."""
from __future__ import annotations

import fnmatch
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lockscope import tables
from lockscope.model.probedata import FutexAddress, RawProbe
from lockscope.model.record import Lock, StackSummary

TABLE_FILE = Path(__file__).with_name("runtimes.toml")


@dataclass(frozen=True)
class RuntimeLock:
    name: str
    kind: str
    component: str = ""                  # the name where not given
    files: tuple[str, ...] = ()          # globs of the file's base name
    symbols: tuple[str, ...] = ()
    explain: str = ""

    def __post_init__(self):
        empty = [k for k in ("name", "kind", "files", "symbols") if not getattr(self, k)]
        if empty:
            raise ValueError(f"no {', '.join(empty)}")
        if not self.component:
            object.__setattr__(self, "component", self.name)

    def holds(self, where: FutexAddress) -> bool:
        return (where.region == "object" and where.symbol in self.symbols and where.file is not None
                and any(fnmatch.fnmatchcase(os.path.basename(where.file), g) for g in self.files))


@dataclass
class Table:
    locks: list[RuntimeLock]

    @classmethod
    def load(cls, path: Path = TABLE_FILE) -> "Table":
        return cls(tables.load(path, RuntimeLock, "lock"))

    def lock_at(self, where: FutexAddress) -> Optional[RuntimeLock]:
        return next((lk for lk in self.locks if lk.holds(where)), None)

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(lk.kind for lk in self.locks)


@functools.lru_cache(maxsize=1)
def default() -> Table:
    return Table.load()


def lock_at(where: FutexAddress) -> Optional[RuntimeLock]:
    return default().lock_at(where)


MAX_PY_STACKS = 20


def python_stacks(locks: list[Lock], raw: RawProbe | None) -> None:
    """Each GIL entry's stacks from its process's Python waits, where the
    probe read them: the waits a release ended (the waiters' frames are read
    then), scaled to the entry's wait like the unwalked waits of any lock."""
    waits = (raw.py_waits if raw else None) or []
    for lk in locks:
        if lk.kind != "GIL":
            continue
        pids = {int(a.split(":", 1)[0]) for a in lk.addresses if ":" in a}
        mine = sorted((w for w in waits if w.tgid in pids and w.frames), key=lambda w: -w.wait_ns)
        total = sum(w.wait_ns for w in mine)
        if not total:
            continue
        lk.stacks = [StackSummary(frames=w.frames, site=w.frames[0], syscall=None, count=w.count,
                                  wait_ns=round(w.wait_ns * lk.wait_ns / total), sampled=w.count)
                     for w in mine[:MAX_PY_STACKS]]

