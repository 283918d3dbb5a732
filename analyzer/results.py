"""The analysis of an experiment (one workload on one file system) as
dataclasses: what `lockscope analyze` computes (analyzer/analyze.py) and
every output reads by attribute: the CLI's text (lockscope/textout.py), the
HTML report, exports, compare and flame graphs (reports/). One place turns it
into JSON: analyzer/analysis_json.py (`lockscope.analysis/2`).

A part that cannot be computed is `Unavailable`, with the reason. The parts
made elsewhere: curve points and the collapse (scaling.py), the USL fit
(usl.py), waits, root cause, attribution and what-if (attribution.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .attribution import Attribution, RootCause, Wait, WhatIf
from .confirmation import Confirmation
from .intervals import Estimate
from .scaling import Collapse, Undecided
from .usl import UslFit
from lockscope.model.record import NO_FS, Background, CpuBreakdown, RunRecord

NO_NAMED_SHARE = "no lock wait was recorded (or probes were disabled)"


def title(workload: str, fs: str) -> str:
    """An experiment as people read it: "MWRM on tmpfs", "mmap"."""
    return workload + (f" on {fs}" if fs != NO_FS else "")


@dataclass
class Unavailable:
    reason: str


def missing(part) -> str | None:
    """Why a part of the analysis is unavailable, or None when it is there."""
    return part.reason if isinstance(part, Unavailable) else None


@dataclass
class TimeSeries:
    name: str
    type: str                     # attribution.LOCK | attribution.NONLOCK
    wait_share: list[float]       # per interval


@dataclass
class TimeView:
    """Wait share per interval of one run (analyzer/timeview.py)."""
    workers: int
    interval_s: float
    t_s: list[float]              # the end of each interval, after the window's start
    series: list[TimeSeries]
    truncated: bool


@dataclass
class PointView:
    """One point of the curve (a run record) with what was measured there."""
    workers: int
    record_id: str
    ops_per_sec: float
    speedup: float
    efficiency: float
    ideal: float
    lost_capacity: float
    oversubscribed: bool
    cpu: CpuBreakdown
    waits: list[Wait]                # the heaviest waits (locks and off-CPU classes)
    lock_waits: float                # worker-equivalents of all lock waits
    attribution: Attribution         # the lost capacity split into waits
    cpi: float | Unavailable
    warnings: list[str] = field(default_factory=list)
    named_share: float | None = None  # lock wait with a verified or inferred name; None: no lock wait
    time_sharing: float = 0.0        # share of worker time preempted by more runnable workers than CPUs
    background_preempted: float = 0.0  # share of worker time preempted by the machine's other work
    cpus: int = 0                    # the CPUs the workers could run on
    # sweep --repeat K: the point's runs; the figures above are their medians
    # (the record shown is the run of median throughput), `est` their intervals
    # (ops_per_sec, speedup, efficiency, lost_capacity, vs_previous), `wait_est`
    # the wait shares of the heaviest waits over the repeats
    repeats: int = 1
    record_ids: list[str] = field(default_factory=list)
    est: dict[str, Estimate] = field(default_factory=dict)
    wait_est: dict[str, Estimate] = field(default_factory=dict)
    background: Background | None = None     # of the run shown
    noise: Estimate | None = None            # the CPUs' share taken by others (Background.noise) over the repeats


@dataclass
class Experiment:
    workload: str
    fs: str
    kind: str
    unit: str
    points: list[PointView]
    collapse: Collapse | None
    root_cause: RootCause | None
    diagnosis: str
    usl: UslFit | Unavailable
    whatif: WhatIf | Unavailable
    timeview: TimeView | Unavailable
    records: list[RunRecord] = field(default_factory=list, repr=False)
    confirmation: Confirmation | None = None   # `lockscope confirm` (analyzer/confirmation.py)
    undecided: Undecided | None = None   # no collapse decided, and a point the intervals leave open
    repeats: int = 1                     # the most runs of any point
    all_records: list[RunRecord] = field(default_factory=list, repr=False)   # every repeat

    @property
    def title(self) -> str:
        return title(self.workload, self.fs)

    @property
    def named_share_missing(self) -> str | None:
        """Why no point has a named share, or None when one has."""
        return None if any(p.named_share is not None for p in self.points) else NO_NAMED_SHARE

    def point(self, workers: int) -> PointView | None:
        return next((p for p in self.points if p.workers == workers), None)

    def focus(self) -> PointView:
        """The point to look at: the collapse point, else the last one."""
        return (self.point(self.collapse.workers) if self.collapse else None) or self.points[-1]
