"""Analysis of a results directory: run records grouped into experiments
(workload x file system), each with its scaling curve, collapse point, root
cause, diagnosis sentence, USL fit, attribution of lost capacity per point,
what-if, time view, CPI and named share per point (analyzer/results.py).
analyzer/analysis_json.py turns the result into `lockscope analyze --json`."""
from __future__ import annotations

import sys
from pathlib import Path

from lockscope.model import confirmdata, record
from lockscope.model.confirmdata import ConfirmRecord
from . import attribution, confirmation, diagnosis, probeeffect, repeats, scaling, timeview, usl
from .kernel import naming
from .attribution import WhatIf
from .intervals import SHARE, estimate
from .results import Experiment, PointView, TimeView, Unavailable, title
from lockscope.errors import UsageError
from lockscope.model.record import RunRecord

TOP_LOCKS = 8
NO_CPI = "this record has no CPI (recorded before CPI was measured)"


# run records skipped as unreadable by load_records in this process, each
# "FILE: what is wrong"; the command line exits 2 when there are any
SKIPPED: list[str] = []


def load_records(path: Path) -> list[RunRecord]:
    """Run records of a results directory (DIR/runs/*.json), of a directory
    of records, or one record file."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist", "give the --out directory of `lockscope run` or `sweep`")
    files = [path] if path.is_file() else sorted((path / record.RUNS).glob("*.json")) or sorted(path.glob("*.json"))
    files = [f for f in files if f.name != "sweep.json"]
    if not files:
        raise UsageError(f"no run records in {path}", "run `lockscope run` or `lockscope sweep` with --out there")
    out, bad = [], []
    for f in files:
        try:
            out.append(record.load(f))
        except (ValueError, OSError) as e:
            why = str(e) if isinstance(e, ValueError) else f"{f}: cannot be read ({e.strerror})"
            bad.append(why)
    if bad and not out:
        raise UsageError(f"no readable run record in {path}: {bad[0]}" +
                         (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
                         "rerun the sweep with the same --out: it measures unreadable points again")
    for why in bad:
        # a bad record is skipped, not fatal: the command works with the
        # others, and the command line exits 2 at the end (SKIPPED)
        print(f"lockscope: warning: skipping run record {why}", file=sys.stderr)
        SKIPPED.append(why)
    return out


def load_confirmations(path: Path) -> dict[tuple[str, str], ConfirmRecord]:
    """The `lockscope confirm` records of results directory `path` (none
    for a record file); an unreadable one is skipped as a bad run record is."""
    path = Path(path)
    if not path.is_dir():
        return {}
    found = {}
    for f in sorted((path / confirmdata.CONFIRM).glob("*.json")):
        try:
            rec = confirmdata.load(f)
            found[(rec.workload, rec.fs)] = rec
        except ValueError as e:
            print(f"lockscope: warning: skipping confirmation record {e}", file=sys.stderr)
            SKIPPED.append(str(e))
    return found


Runs = dict[int, dict[int, RunRecord]]       # workers -> repeat -> run record


def _curve(runs: Runs) -> list[scaling.CurvePoint]:
    # ideal speedup is capped by the CPUs the workers ran on
    return scaling.curve_repeated([(w, {k: r.ops_per_sec or 0.0 for k, r in by_k.items()},
                                    attribution.cpus_of(next(iter(by_k.values()))))
                                   for w, by_k in sorted(runs.items())])


def _shown(by_k: dict[int, RunRecord]) -> RunRecord:
    """The run a point shows: the one of median throughput (the lower of
    the two middle ones for an even count)."""
    ranked = sorted(by_k.items(), key=lambda kr: (kr[1].ops_per_sec or 0.0, kr[0]))
    return ranked[(len(ranked) - 1) // 2][1]


def _cpi(rec: RunRecord) -> float | Unavailable:
    if rec.cpi.available and rec.cpi.value is not None:
        return rec.cpi.value
    return Unavailable(rec.cpi.reason or NO_CPI)


def _point_views(recs: list[RunRecord], pts: list[scaling.CurvePoint], runs: Runs | None = None) -> list[PointView]:
    views = []
    for r, p in zip(recs, pts):
        ws = sorted(attribution.waits(r).values(), key=lambda w: -w.worker_equivalents)
        by_k = (runs or {}).get(r.workers) or {1: r}
        v = PointView(
            workers=r.workers, record_id=r.id, ops_per_sec=p.ops_per_sec, speedup=p.speedup,
            efficiency=p.efficiency, ideal=p.ideal, lost_capacity=p.lost_capacity,
            oversubscribed=r.oversubscribed, cpu=r.cpu, waits=ws[:TOP_LOCKS],
            lock_waits=sum(w.worker_equivalents for w in ws if w.is_lock),
            attribution=attribution.attribute(r, p.lost_capacity), cpi=_cpi(r),
            warnings=_warnings(r),
            named_share=naming.named_share(r.locks) if r.probe.attached else None,
            time_sharing=attribution.time_sharing(r), background_preempted=attribution.background_preempted(r),
            cpus=attribution.cpus_of(r),
            repeats=len(by_k), record_ids=[by_k[k].id for k in sorted(by_k)], est=dict(p.est),
            background=r.background)
        if len(by_k) > 1:
            shares = {k: attribution.waits(x) for k, x in by_k.items()}
            v.wait_est = {w.name: estimate([shares[k][w.name].wait_share if w.name in shares[k] else 0.0
                                            for k in sorted(by_k)], SHARE) for w in v.waits}
        noise = [x.background.noise for x in by_k.values() if x.background is not None]
        v.noise = estimate(noise) if noise else None
        views.append(v)
    return views


def _warnings(r: RunRecord) -> list[str]:
    """The record's warnings, with the probe's effect (analyzer/probeeffect.py)
    judged again from its fields when the record does not say it already."""
    w = probeeffect.warning(r)
    return list(r.warnings) + ([w] if w and w not in r.warnings else [])


def _usl(recs: list[RunRecord], curve: list[scaling.CurvePoint]) -> usl.UslFit | Unavailable:
    """The USL fit of the points where every worker had a CPU."""
    try:
        return usl.fit_unsaturated([(p.workers, p.ops_per_sec, r.oversubscribed or p.workers > p.ideal)
                                    for r, p in zip(recs, curve)])
    except ValueError as e:
        return Unavailable(str(e))


def _whatif(recs: list[RunRecord], curve: list[scaling.CurvePoint], collapse: scaling.Collapse | None,
            root: attribution.RootCause | None, runs: Runs | None = None) -> attribution.WhatIf | Unavailable:
    """The curve without the root cause's wait; with repeats, each point's
    bound also computed from every repeat's run, for its interval."""
    if root is None:
        return Unavailable("no collapse with a root cause, so there is no wait to remove"
                           if collapse is None or any(r.probe.attached for r in recs) else
                           "lock waits were not measured (probes disabled)")
    name = root.wait.name
    x1 = curve[0].ops_per_sec / curve[0].speedup if curve and curve[0].speedup else 0.0
    pts = [(p.workers, p.ops_per_sec, float(r.workers),
            w.worker_equivalents if (w := attribution.waits(r).get(name)) else 0.0)
           for r, p in zip(recs, curve)]
    ideal = [x1 * p.ideal for p in curve]
    out = attribution.whatif(pts, name, ideal)
    for wp, p, cap in zip(out.curve, curve, ideal):
        by_k = (runs or {}).get(p.workers) or {}
        if len(by_k) < 2:
            continue
        bounds = [attribution.whatif([(r.workers, r.ops_per_sec or 0.0, float(r.workers),
                                       w.worker_equivalents if (w := attribution.waits(r).get(name)) else 0.0)],
                                     name, [cap]).curve[0].ops_per_sec for r in by_k.values()]
        e = estimate(bounds)
        wp.low, wp.high = e.low, e.high
    return out


def _timeview(recs: list[RunRecord], collapse: scaling.Collapse | None) -> TimeView | Unavailable:
    """The time view of the collapse point, else of the last point."""
    at = next((r for r in recs if collapse is not None and r.workers == collapse.workers),
              recs[-1] if recs else None)
    if at is None:
        return Unavailable("no points")
    return timeview.timeview(at)


def _confirmation(crec: ConfirmRecord | None, pts: list[PointView], whatif) -> confirmation.Confirmation | None:
    """The verdict; its predictions bounded by the ideal throughput at that
    point and by the what-if of the lock removed (as gains over the point)."""
    if crec is None:
        return None
    at = next((p for p in pts if p.workers == crec.workers), None)
    gains = []
    if at and at.speedup > 0:
        gains.append(at.ideal / at.speedup)
        wp = next((w for w in whatif.curve if w.workers == at.workers), None) \
            if isinstance(whatif, WhatIf) and whatif.name == crec.target.name else None
        if wp and at.ops_per_sec > 0:
            gains.append(wp.ops_per_sec / at.ops_per_sec)
    return confirmation.confirm(crec, min(gains) if gains else None)


def confirm_point(exps: list[Experiment], crec: ConfirmRecord) -> confirmation.Confirmation:
    """The verdict of a confirmation record, with the experiment it re-ran."""
    e = next((e for e in exps if (e.workload, e.fs) == (crec.workload, crec.fs)), None)
    return _confirmation(crec, e.points if e else [], e.whatif if e else None)


def _experiment(workload: str, fs: str, runs: Runs, crec: ConfirmRecord | None = None) -> Experiment:
    ws = sorted(runs)
    recs = [_shown(runs[w]) for w in ws]
    curve = _curve(runs)
    pts = _point_views(recs, curve, runs)
    collapse = scaling.find_collapse(curve)
    undecided = None if collapse else scaling.undecided(curve)
    root = None
    # an undecided point gets the wait that grew most across it too: the
    # answer if it did collapse, said as such
    at_w = collapse.workers if collapse else undecided.workers if undecided else None
    if at_w is not None:
        i = next(i for i, p in enumerate(pts) if p.workers == at_w)
        lost = [{k: max(0.0, c.ideal - s) for k, s in c.speedups.items()} for c in curve]
        root = repeats.root_cause(runs[ws[i - 1]], runs[ws[i]], recs[i - 1], recs[i], lost[i - 1], lost[i],
                                  pts[i - 1], pts[i])
    wi = _whatif(recs, curve, collapse, root if collapse else None, runs)
    confirmed = _confirmation(crec, pts, wi)
    return Experiment(workload=workload, fs=fs, kind=recs[0].kind, unit=recs[0].throughput_unit, points=pts,
                      collapse=collapse, root_cause=root,
                      diagnosis=diagnosis.sentence(title(workload, fs), pts, collapse, root, recs, confirmed,
                                                   undecided),
                      usl=_usl(recs, curve), whatif=wi,
                      timeview=_timeview(recs, collapse), records=recs, confirmation=confirmed,
                      undecided=undecided, repeats=max(len(by_k) for by_k in runs.values()),
                      all_records=[r for w in ws for _, r in sorted(runs[w].items())])


def analyze(records: list[RunRecord],
            confirmations: dict[tuple[str, str], ConfirmRecord] | None = None) -> list[Experiment]:
    """`confirmations`: `lockscope confirm`'s records by (workload, fs)
    (load_confirmations). The runs of a point (`sweep --repeat K`) are
    summarized with intervals; a run measured twice: the newer record wins."""
    groups: dict[tuple[str, str], Runs] = {}
    for r in records:
        slot = groups.setdefault((r.workload, r.fs), {}).setdefault(r.workers, {})
        k = r.repeat or 1
        if k not in slot or r.created >= slot[k].created:
            slot[k] = r
    return [_experiment(workload, fs, runs, (confirmations or {}).get((workload, fs)))
            for (workload, fs), runs in sorted(groups.items())]
