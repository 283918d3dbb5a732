"""Go sync.Mutex / sync.RWMutex waits (probes/gomutex.bpf.c) as named locks.

- `resolve(data)`, at record time: each wait's user stack symbolized with the
  Go executable's ELF symbol table, and its lock (sema address less the
  semaphore's offset in the lock, gosync.toml) resolved to a global object
  of the executable when it is one.
- `name_go_waits(raw, workers, window_ns)`, offline: one Lock per lock
  object, tier `verified` for a global (`sync.Mutex main.mu in prog`), else
  `site`, named by the goroutine's innermost program frame outside the Go
  runtime and sync packages (`sync.Mutex @ main.(*Account).Deposit (heap)`:
  Go's heap, goroutine stacks included, is its own anonymous arenas).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from . import addrspace, userlocks
from ..lockacc import MAX_FRAMES, LockAcc, heaviest_first
from lockscope import tables
from lockscope.model.jsondata import format_addr, from_dict, from_list, parse_addr
from lockscope.model.loaderrows import GoProcess
from lockscope.model.probedata import GoProbe, GoWait, RawProbe, heaviest
from lockscope.model.record import Lock

TABLE = Path(__file__).with_name("gosync.toml")


@dataclass(frozen=True)
class Semacquire:
    """A semacquire of the Go runtime the probe enters (`via`): the kind of
    lock that waits there, and where its semaphore word lies in the lock."""
    via: str
    kind: str
    offset: int


@dataclass(frozen=True)
class RwMutex:
    frames: tuple[str, ...]      # a sync.Mutex wait under one of these is an RWMutex's writer mutex


@dataclass(frozen=True)
class GoSync:
    """gosync.toml."""
    semacquire: list[Semacquire]
    rwmutex: RwMutex


@functools.lru_cache(maxsize=1)
def table() -> GoSync:
    return tables.load(TABLE, GoSync)


def _kind_offset(via: str, frames: list[str]) -> tuple[str, int]:
    t = table()
    row = next((r for r in t.semacquire if r.via == via), Semacquire(via, via, 0))
    kind = row.kind
    if kind == "sync.Mutex" and any(userlocks.frame_function(f) in t.rwmutex.frames for f in frames):
        kind = "sync.RWMutex"
    return kind, row.offset


def resolve(data: dict) -> dict:
    """The Go part of the probe's data event as kept in the record's raw
    section (RawProbe.go_probe, go_waits)."""
    if data.get("go_probe") is None:
        return {}
    probe = from_dict(GoProbe, data["go_probe"])
    out: dict = {"go_probe": probe}
    if "go_mutex" not in data:
        return out
    procs = {p.tgid: (p.exe, p.bias) for p in from_list(GoProcess, data["go_probe"].get("processes", []))}
    stacks = data.get("go_stacks", {})
    out["go_waits"] = _resolve_rows(heaviest(from_list(GoWait, data["go_mutex"]), "total_ns"), procs, stacks)
    if "go_releases" in data:
        out["go_releases"] = _resolve_rows(heaviest(from_list(GoWait, data["go_releases"]), "total_ns"),
                                           procs, stacks)
    return out


def _resolve_rows(waits: list[GoWait], procs: dict, stacks: dict) -> list[GoWait]:
    """Each row's stack symbolized, its kind and lock object (and a global's
    symbol) resolved."""
    for w in waits:
        exe, bias = procs.get(w.tgid, (None, 0))
        syms = addrspace.elf_symbols(exe) if exe else None
        base = os.path.basename(exe) if exe else "?"
        frames = []
        ips = [parse_addr(x) for x in stacks.get(str(w.stack), [])]
        if ips and w.ret:
            ips.insert(1, w.ret)    # the caller the frame-pointer walk skips at entry
        for a in ips:
            hit = syms and (syms.function_at(a - bias) or syms.function_at(a - bias - 1))
            frames.append(f"{hit[0]}+0x{hit[1]:x} [{base}]" if hit else f"[{base}+0x{a - bias:x}]")
        w.frames = frames
        w.kind, off = _kind_offset(w.via, frames)
        w.lock = w.sema - off
        hit = syms.object_at(w.lock - bias) if syms else None
        if hit:
            w.symbol = hit[0] + (f"+0x{hit[1]:x}" if hit[1] else "")
            w.exe = exe
    return waits


def _object_sites(waits: list[GoWait]) -> dict[tuple[int, int], str]:
    """The site naming each heap lock object (tgid, lock address): the
    program frame of its heaviest waits, so that one object is one entry
    however many functions wait for it (an RWMutex's writers and readers)."""
    per: dict[tuple[int, int], dict[str, int]] = {}
    for w in waits:
        s = userlocks.site(w.frames) if w.frames else "[no stack]"
        d = per.setdefault((w.tgid, w.lock), {})
        d[s] = d.get(s, 0) + w.total_ns
    return {k: max(d, key=lambda s: (d[s], s)) for k, d in per.items()}


def name_go_waits(raw: RawProbe, workers: int, window_ns: int) -> list[Lock]:
    """The Go waits of the record's raw section as named locks, heaviest first."""
    groups: dict[str, LockAcc] = {}
    sites = _object_sites(raw.go_waits or [])
    for w in raw.go_waits or []:
        frames = w.frames or []
        if w.symbol:
            name, cls, tier = f"{w.kind} {w.symbol} in {os.path.basename(w.exe or '')}", f"{w.kind} {w.symbol}", \
                "verified"
            obj = f"{w.symbol} ({w.exe})"
        else:
            s = sites[(w.tgid, w.lock)]
            name, cls, tier, obj = f"{w.kind} @ {s} (heap)", f"{w.kind} @ {s}", "site", None
        acc = groups.get(name)
        if acc is None:
            acc = groups[name] = LockAcc(name, cls, tier, w.kind, object=obj, component=userlocks.COMPONENT,
                                         explain="Go lock: time goroutines were parked waiting for it "
                                                 "(uprobes on the Go runtime's semaphore)")
        acc.addresses.add(f"{w.tgid}:{format_addr(w.lock)}")
        acc.add(w.count, w.total_ns, w.max_ns, w.via)
        acc.add_stack(tuple(frames[:MAX_FRAMES]), None, w.count, w.total_ns, w.count)
    return heaviest_first([acc.to_lock(workers, window_ns, lambda k: userlocks.site(list(k)) if k else "[no stack]")
                           for acc in groups.values()])


def go_warnings(raw: RawProbe | None) -> list[str]:
    probe = raw.go_probe if raw else None
    if not probe:
        return []
    out = [f"Go locks not measured: {probe.reason}"] if not probe.attached and probe.reason else []
    out += [f"Go locks of {x.path} not measured: {x.reason}" for x in probe.executables if not x.attached]
    return out
