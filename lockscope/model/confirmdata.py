"""The confirmation record: what `lockscope confirm` measured for one
experiment, one JSON document in `DIR/confirm/<workload>-<fs>.json`, written
atomically. The verdict is not stored: analyzer/confirmation.py computes it
from the phases, so that a better rule reads old measurements anew.

Phases alternate: none (nothing added), inside (a busy wait inside the
lock's critical sections), outside (the same wait just outside them), in
ABBA order. Each phase keeps the workload's own operation count, what the
injector added, and the machine's background over it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from lockscope import atomicio
from lockscope.model.jsondata import from_dict, optional, to_dict

SCHEMA = "lockscope.confirm/1"
CONFIRM = "confirm"                      # the folder of a results directory that holds these
NONE, INSIDE, OUTSIDE = "none", "inside", "outside"


@dataclass
class Phase:
    where: str                   # none | inside | outside
    delay_ns: int                # the busy wait set for each acquisition (0 for none)
    t_s: float                   # start, seconds from the first phase
    seconds: float
    ops: int                     # the workload's own operations in the phase
    ops_per_sec: float
    added: int = 0               # busy waits the injector ran
    added_ns: int = 0            # their time, summed over threads
    # the machine's CPUs' share taken by processes outside the workload (record.Background.noise)
    background: Optional[float] = optional()


@dataclass
class Target:
    name: str                    # as the diagnosis names it
    lock_class: str = field(metadata={"json": "class"})
    kind: str                    # mutex, rwsem, spinlock, pthread_mutex, ...
    space: str                   # kernel | user
    addresses: list[str] = field(default_factory=list)   # this run's (found by name in the discovery window)
    how: str = ""                # where the waits were added, in words
    # and as a word (lockscope/measure/confirm.py): contended, mmap, tick
    # (kernel); calls, go, contended-paths (user)
    site: str = ""
    acquire: Optional[str] = optional()   # user locks: the functions probed
    release: Optional[str] = optional()


@dataclass
class ConfirmRecord:
    workload: str
    fs: str
    workers: int
    target: Target
    phases: list[Phase]
    schema: str = SCHEMA
    created: str = ""
    lockscope_version: str = ""
    record_id: str = ""          # the point of the sweep this re-ran
    t0_monotonic_ns: int = 0     # CLOCK_MONOTONIC at t_s 0: to line phases up with other tools' clocks
    discovery_s: float = 0.0     # the probe window that found the lock's addresses
    alone_ops_per_sec: Optional[float] = optional()   # the workload with nothing attached, after discovery
    lock_wait_share: float = 0.0  # the lock's wait share in that window
    contended_per_op: Optional[float] = optional()   # kernel locks: contended acquisitions per operation
    warnings: list[str] = field(default_factory=list)


def path_for(out: Path, workload: str, fs: str) -> Path:
    return Path(out) / CONFIRM / f"{workload}-{fs}.json"


def save(rec: ConfirmRecord, path: Path) -> None:
    atomicio.write_json(path, to_dict(rec))


def load(path: Path) -> ConfirmRecord:
    """A confirmation record; ValueError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a lockscope confirmation record (schema "
                         f"{data.get('schema') if isinstance(data, dict) else None!r}, this lockscope reads {SCHEMA})")
    try:
        return from_dict(ConfirmRecord, data)
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        raise ValueError(f"{path}: {e}") from None


def load_all(out: Path) -> dict[tuple[str, str], ConfirmRecord]:
    """The confirmation records of results directory `out`, by (workload, fs)."""
    found = {}
    for p in sorted((Path(out) / CONFIRM).glob("*.json")):
        rec = load(p)
        found[(rec.workload, rec.fs)] = rec
    return found
