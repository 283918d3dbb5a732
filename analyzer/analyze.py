"""Analysis of a results directory: run records grouped into experiments
(workload x file system), each with its scaling curve, collapse point, root
cause and a diagnosis sentence. `to_json` is what `lockscope analyze --json`
prints."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lockscope import record
from lockscope.analyzer import attribution, naming, scaling, timeview, usl
from lockscope.errors import UsageError
from lockscope.record import RunRecord

ANALYSIS_SCHEMA = "lockscope.analysis/1"
TOP_LOCKS = 8


@dataclass
class PointView:
    workers: int
    record_id: str
    ops_per_sec: float
    speedup: float
    efficiency: float
    ideal: float
    lost_capacity: float
    oversubscribed: bool
    cpu: dict
    waits: list[dict]                # top waits (locks and off-CPU classes) with worker-equivalents
    explained: float                 # worker-equivalents of all lock waits
    warnings: list[str] = field(default_factory=list)
    named_share: float | None = None  # lock wait with a verified or inferred name; None: no lock wait


@dataclass
class Experiment:
    workload: str
    fs: str
    kind: str
    unit: str
    points: list[PointView]
    collapse: dict | None
    root_cause: dict | None
    diagnosis: str
    records: list[RunRecord] = field(default_factory=list, repr=False)
    # issue 5: usl, attribution, whatif, timeview, cpi (CONTRACT.md)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "workload": self.workload, "fs": self.fs, "kind": self.kind, "unit": self.unit,
            "curve": [{"workers": p.workers, "ops_per_sec": p.ops_per_sec, "speedup": p.speedup,
                       "efficiency": p.efficiency, "ideal": p.ideal, "lost_capacity": p.lost_capacity}
                      for p in self.points],
            "points": [asdict(p) for p in self.points],
            "collapse": self.collapse,
            "root_cause": self.root_cause,
            "diagnosis": self.diagnosis,
        } | self.extra


def load_records(path: Path) -> list[RunRecord]:
    """Run records of a results directory (DIR/runs/*.json), of a directory
    of records, or one record file."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist", "give the --out directory of `lockscope run` or `sweep`")
    files = [path] if path.is_file() else sorted((path / "runs").glob("*.json")) or sorted(path.glob("*.json"))
    files = [f for f in files if f.name != "sweep.json"]
    if not files:
        raise UsageError(f"no run records in {path}", "run `lockscope run` or `lockscope sweep` with --out there")
    out = []
    for f in files:
        try:
            out.append(record.load(f))
        except (ValueError, json.JSONDecodeError) as e:
            raise UsageError(f"{f}: not a readable run record: {e}") from e
    return out


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"


def _curve(recs: list[RunRecord]) -> list[scaling.CurvePoint]:
    # ideal speedup is capped by the CPUs the workers ran on
    cpus = [len(r.cpus) or r.host.cpus_allowed or r.workers for r in recs]
    return scaling.curve([(r.workers, r.ops_per_sec or 0.0, c) for r, c in zip(recs, cpus)])


def _point_views(recs: list[RunRecord], pts: list[scaling.CurvePoint]) -> list[PointView]:
    views = []
    for r, p in zip(recs, pts):
        ws = sorted(attribution.waits(r).values(), key=lambda w: -w.worker_equivalents)
        views.append(PointView(
            workers=r.workers, record_id=r.id, ops_per_sec=p.ops_per_sec, speedup=p.speedup,
            efficiency=p.efficiency, ideal=p.ideal, lost_capacity=p.lost_capacity,
            oversubscribed=r.oversubscribed, cpu=asdict(r.cpu),
            waits=[asdict(w) for w in ws[:TOP_LOCKS]],
            explained=sum(w.worker_equivalents for w in ws if w.type == "lock"),
            warnings=list(r.warnings),
            named_share=naming.named_share(r.locks) if r.probe.attached else None))
    return views


def _diagnosis(workload: str, fs: str, pts: list[PointView], collapse: scaling.Collapse | None,
               root: attribution.RootCause | None, recs: list[RunRecord]) -> str:
    on = f"{workload} on {fs}" if fs != "none" else workload
    if not pts or any(p.ops_per_sec <= 0 for p in pts):
        return f"{on}: throughput was not measured at every point, so there is no scaling curve."
    last = pts[-1]
    top = recs[-1].locks[0] if recs[-1].locks else None
    top_txt = (f"the most contended lock is {top.name} ({top.kind}, {top.tier}): "
               f"{_pct(top.wait_share)} of worker time" if top else "no lock contention was recorded")
    if not recs[-1].probe.attached:
        top_txt = "lock waits were not measured (probes disabled)"
    if len(pts) == 1:
        return (f"{on} was measured at {last.workers} worker{'s' if last.workers != 1 else ''} only, so "
                f"there is no scaling curve; {top_txt}.")
    if collapse is None:
        return (f"{on} scales to {last.workers} workers (speedup {last.speedup:.2f}, "
                f"{last.efficiency:.0%} efficiency); {top_txt}.")
    at = next(p for p in pts if p.workers == collapse.workers)
    head = (f"{on} stops scaling at {collapse.workers} workers (speedup {at.speedup:.2f}, "
            f"efficiency {at.efficiency:.0%}: {collapse.reason})")
    if root is None:
        return head + ("; no wait grew across the collapse, so lockscope cannot name a cause "
                       "(look at the CPU breakdown: the loss may be on CPU, e.g. cache-line contention)."
                       if recs[-1].probe.attached else "; lock waits were not measured (probes disabled).")
    what = (f"waits on {root.name} ({root.kind}, {root.tier})" if root.type == "lock"
            else f"is {root.name.removeprefix('off-CPU: ')}")
    return (f"{head}: {_pct(root.wait_share)} of worker time {what}, which explains "
            f"{_pct(root.explained_share)} of the lost capacity ({at.lost_capacity:.2f} of "
            f"{at.ideal:g} workers).")


def _extra(recs: list[RunRecord], curve: list[scaling.CurvePoint], collapse: scaling.Collapse | None,
           root: attribution.RootCause | None) -> dict:
    """USL fit, attribution of lost capacity per point, what-if without the
    root cause, time view of the collapse point (or the last), CPI per point."""
    out: dict = {}
    out["usl"] = usl.fit_json([(p.workers, p.ops_per_sec, r.oversubscribed or p.workers > p.ideal)
                               for r, p in zip(recs, curve)])
    out["attribution"] = [attribution.attribute(r, p.ideal, p.speedup, p.lost_capacity) for r, p in zip(recs, curve)]
    if root is None:
        out["whatif"] = {"unavailable": "no collapse with a root cause, so there is no wait to remove"
                         if collapse is None or any(r.probe.attached for r in recs) else
                         "lock waits were not measured (probes disabled)"}
    else:
        x1 = curve[0].ops_per_sec / curve[0].speedup if curve and curve[0].speedup else 0.0
        pts = [(p.workers, p.ops_per_sec, float(r.workers),
                w.worker_equivalents if (w := attribution.waits(r).get(root.name)) else 0.0)
               for r, p in zip(recs, curve)]
        out["whatif"] = {"label": f"upper bound: {root.name} removed", "name": root.name,
                         "formula": "X'(N) = X(N) * N / (N - we(N)), capped at the ideal X(1) * ideal(N); "
                                    "we(N): worker-equivalents of the wait at N workers",
                         "curve": attribution.whatif(pts, root.name, [x1 * p.ideal for p in curve])}
    at = next((r for r in recs if collapse is not None and r.workers == collapse.workers), recs[-1] if recs else None)
    out["timeview"] = timeview.timeview(at) if at is not None else {"unavailable": "no points"}
    out["cpi"] = [({"workers": r.workers, "value": r.cpi.value} if r.cpi.available and r.cpi.value is not None
                   else {"workers": r.workers, "unavailable": r.cpi.reason or
                         "this record has no CPI (recorded before CPI was measured)"}) for r in recs]
    return out


def _named_share(pts: list[PointView]) -> list[dict] | dict:
    """Per point, the share of lock wait time with a verified or inferred name."""
    shares = [{"workers": p.workers, "share": p.named_share} for p in pts if p.named_share is not None]
    return shares or {"unavailable": "no lock wait was recorded (or probes were disabled)"}


def analyze(records: list[RunRecord]) -> list[Experiment]:
    groups: dict[tuple[str, str], dict[int, RunRecord]] = {}
    for r in records:
        # a worker count measured twice: the newer record wins
        slot = groups.setdefault((r.workload, r.fs), {})
        if r.workers not in slot or r.created >= slot[r.workers].created:
            slot[r.workers] = r
    out = []
    for (workload, fs), by_w in sorted(groups.items()):
        recs = [by_w[w] for w in sorted(by_w)]
        curve = _curve(recs)
        pts = _point_views(recs, curve)
        collapse = scaling.find_collapse(curve)
        root = None
        if collapse:
            i = next(i for i, p in enumerate(pts) if p.workers == collapse.workers)
            root = attribution.root_cause(recs[i - 1], recs[i], pts[i - 1].lost_capacity,
                                          pts[i].lost_capacity)
        out.append(Experiment(
            workload=workload, fs=fs, kind=recs[0].kind, unit=recs[0].throughput_unit, points=pts,
            collapse=asdict(collapse) if collapse else None, root_cause=asdict(root) if root else None,
            diagnosis=_diagnosis(workload, fs, pts, collapse, root, recs), records=recs,
            extra=_extra(recs, curve, collapse, root) | {"named_share": _named_share(pts)}))
    return out


def to_json(experiments: list[Experiment]) -> dict:
    return {"schema": ANALYSIS_SCHEMA, "experiments": [e.to_json() for e in experiments]}
