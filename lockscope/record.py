"""The run record: one JSON document per measured point, the single schema
every command reads and writes (documented in README.md, "Run record").

Records are dataclasses; `to_dict`/`from_dict` convert them to and from
JSON-ready dicts. A field whose JSON key differs from its Python name says so
in its metadata (`class` is a keyword). Files are written atomically.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from lockscope import atomicio

SCHEMA = "lockscope.run/1"


def _json_name(f: dataclasses.Field) -> str:
    return f.metadata.get("json", f.name)


def to_dict(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        # fields marked omit_empty (later optional additions) are left out
        # while empty, so that older records round-trip unchanged
        return {_json_name(f): to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.metadata.get("omit_empty") and not getattr(obj, f.name))}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [_convert(item, v) for v in value]
    if origin is dict and len(typing.get_args(tp)) == 2:
        item = typing.get_args(tp)[1]
        return {k: _convert(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value)
    return value


def from_dict(cls: type, data: dict) -> Any:
    """Build dataclass `cls` from a dict, ignoring unknown keys (newer minor
    additions) and using defaults for missing optional ones."""
    if not isinstance(data, dict):
        raise ValueError(f"expected an object for {cls.__name__}, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = _json_name(f)
        if key in data:
            kwargs[f.name] = _convert(hints[f.name], data[key])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{cls.__name__}: missing field '{key}'")
    return cls(**kwargs)


@dataclass
class StackSummary:
    """One calling context of a lock: frames innermost first, lock-internal
    frames removed. Stacks are sampled in the kernel: `sampled` waits had
    this stack walked; `count` and `wait_ns` include the lock's unsampled
    waits, spread over its sampled stacks in proportion to their wait."""
    frames: list[str]
    site: str
    syscall: Optional[str]
    count: int
    wait_ns: int
    sampled: int = 0


@dataclass
class Lock:
    name: str                    # e.g. "inode->i_rwsem of <scratch>/share (tmpfs, dir)"
    lock_class: str = field(metadata={"json": "class"})   # e.g. "inode->i_rwsem"
    tier: str = "site"           # verified | inferred | site
    kind: str = "unknown"        # mutex, rwsem, spinlock, rwlock, percpu-rwsem, rtmutex
    modes: dict = field(default_factory=dict)   # wait_ns by mode: read/write/spin/sleep
    instances: int = 1           # distinct lock addresses behind this name
    addresses: list[str] = field(default_factory=list)
    count: int = 0
    wait_ns: int = 0             # traced wait time, plus sampled_spin_ns
    max_wait_ns: int = 0
    wait_share: float = 0.0      # wait_ns / (workers * window)
    sampled_spin_ns: int = 0     # rwsem optimistic spinning (no tracepoint), estimated from CPU samples
    object: Optional[str] = None  # the object the lock belongs to, when known
    component: Optional[str] = None
    explain: Optional[str] = None
    rule: Optional[str] = None   # inferred: the rule that named it
    stacks: list[StackSummary] = field(default_factory=list)


@dataclass
class OffCpu:
    """Off-CPU time of the workload's tasks, by class and stack."""
    wait_class: str = field(metadata={"json": "class"})   # lock | preempted | a locks.toml [[offcpu]] class | sleep | blocked | other
    state: int = 0
    in_lock_wait: bool = False
    count: int = 0
    wait_ns: int = 0
    max_ns: int = 0
    wait_share: float = 0.0
    site: str = ""
    frames: list[str] = field(default_factory=list)


@dataclass
class CpuBreakdown:
    """Shares of the measured CPUs' time over the timed window (sum to ~1)."""
    user: float = 0.0
    sys: float = 0.0
    idle: float = 0.0
    iowait: float = 0.0
    irq: float = 0.0
    steal: float = 0.0
    cpus: list[int] = field(default_factory=list)


@dataclass
class WorkerResult:
    worker: int
    cpu: Optional[int] = None
    pid: Optional[int] = None
    ops: int = 0
    ran_out: bool = False


@dataclass
class Latency:
    """Latency of one operation type over the timed window (or one interval),
    from log2 histograms: buckets[i] counts operations that took
    [2**i, 2**(i+1)) ns (bucket 0: [0, 2) ns). Percentiles are estimated
    inside their bucket (within a factor of 2), max_ns is exact."""
    count: int = 0               # ops of this type
    timed: int = 0               # of which timed (cheap single-operation ops are sampled)
    mean_ns: int = 0
    p50_ns: int = 0
    p99_ns: int = 0
    max_ns: int = 0
    buckets: list[int] = field(default_factory=list)   # window only; empty per interval


@dataclass
class Interval:
    """One interval of the time series (`--interval`): t_s is its end, in
    seconds after the start of the timed window."""
    t_s: float
    interval_s: float
    ops: int
    ops_per_sec: float
    op_counts: dict[str, int] = field(default_factory=dict)
    latency: dict[str, Latency] = field(default_factory=dict)


@dataclass
class ProbeInfo:
    attached: bool = False
    reason: Optional[str] = None      # why not attached, when it is not
    window_s: float = 0.0
    counters: dict = field(default_factory=dict)
    programs: list = field(default_factory=list)
    maps: dict = field(default_factory=dict)
    # aggregated probe output with stacks symbolized, kept so that names can
    # be recomputed offline: contention, offcpu, stacks, objects, mounts
    raw: dict = field(default_factory=dict)


@dataclass
class RunRecord:
    id: str
    workload: str
    fs: str
    workers: int
    duration_s: float                 # the measured timed window
    ops: Optional[int]
    ops_per_sec: Optional[float]
    schema: str = SCHEMA
    created: str = ""
    lockscope_version: str = ""
    host: dict = field(default_factory=dict)
    kind: str = "builtin"             # builtin | command
    command: Optional[list[str]] = None
    throughput_unit: str = "ops/s"
    fs_detail: dict = field(default_factory=dict)
    cpus: list[int] = field(default_factory=list)
    oversubscribed: bool = False
    requested_duration_s: float = 0.0
    warmup_s: float = 0.0
    setup_s: float = 0.0
    per_worker: list[WorkerResult] = field(default_factory=list)
    cpu: CpuBreakdown = field(default_factory=CpuBreakdown)
    cpi: dict = field(default_factory=dict)
    locks: list[Lock] = field(default_factory=list)
    offcpu: list[OffCpu] = field(default_factory=list)
    probe: ProbeInfo = field(default_factory=ProbeInfo)
    warnings: list[str] = field(default_factory=list)
    # built-in workloads: parameters (--param, defaults filled in), ops of
    # each operation type and their latency over the timed window (empty
    # with --no-latency), and the time series (--interval; empty when off)
    params: dict = field(default_factory=dict, metadata={"omit_empty": True})
    op_counts: dict[str, int] = field(default_factory=dict, metadata={"omit_empty": True})
    latency: dict[str, Latency] = field(default_factory=dict, metadata={"omit_empty": True})
    interval_s: float = field(default=0.0, metadata={"omit_empty": True})
    timeseries: list[Interval] = field(default_factory=list, metadata={"omit_empty": True})


def save(record: RunRecord, path: Path) -> None:
    atomicio.write_json(path, to_dict(record))


def load(path: Path) -> RunRecord:
    with open(path) as f:
        data = json.load(f)
    schema = data.get("schema", "")
    if not schema.startswith("lockscope.run/"):
        raise ValueError(f"{path}: not a lockscope run record (schema {schema!r})")
    if schema.split("/")[1] != SCHEMA.split("/")[1]:
        raise ValueError(f"{path}: run record schema {schema} is not supported (this lockscope reads {SCHEMA})")
    return from_dict(RunRecord, data)
