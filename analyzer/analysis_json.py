"""The analysis as JSON: the `lockscope.analysis/2` document that `lockscope
analyze --json` prints and `lockscope export` writes (README.md, "Run record"
section, last paragraph). The one place that knows its keys.

/2 differs from /1 in one word: a wait that is not a lock has `type`
"nonlock" everywhere (attribution.NONLOCK), where /1 said "wait" in
`points[].waits` and `root_cause` and "nonlock" in `attribution` and
`timeview`."""
from __future__ import annotations

from dataclasses import asdict

from .attribution import Attribution, RootCause, Wait, WhatIf
from .confirmation import Confirmation
from .intervals import METHOD, NO_INTERVAL
from .results import Experiment, PointView, Unavailable
from .usl import UslFit

SCHEMA = "lockscope.analysis/2"


def _unavailable(part, convert) -> dict:
    return {"unavailable": part.reason} if isinstance(part, Unavailable) else convert(part)


def _wait(w: Wait) -> dict:
    return asdict(w)


def _root_cause(rc: RootCause) -> dict:
    w = rc.wait
    return {"name": w.name, "type": w.type, "tier": w.tier, "kind": w.kind,
            "lock_class": w.lock_class, "instances": w.instances, "wait_share": w.wait_share,
            "worker_equivalents": w.worker_equivalents} | {k: v for k, v in asdict(rc).items() if k != "wait"}


def confirmation_json(c: Confirmation) -> dict:
    """`lockscope confirm`'s verdict: root_cause.confirmation (and the
    experiment's confirmation when the lock confirmed is another)."""
    def resp(r) -> dict:
        return {"slope": r.slope, "low": r.low, "high": r.high,
                "points": [asdict(p) | {"response": p.response} for p in r.points]}
    return {"lock": c.lock, "verdict": c.verdict, "why": c.why, "slope": c.inside.slope,
            "interval": [c.inside.low, c.inside.high], "control_slope": c.outside.slope,
            "control_interval": [c.outside.low, c.outside.high], "delays_us": c.delays_us, "runs": c.runs,
            "workers": c.workers, "base_ops_per_sec": c.base_ops_per_sec, "noise": c.noise,
            "predicted": c.predicted, "space": c.space, "how": c.how, "inside": resp(c.inside),
            "outside": resp(c.outside), "warnings": c.warnings, "rounds": c.rounds,
            "background_change": c.background_change, "more_rounds": c.more_rounds}


def _point(p: PointView) -> dict:
    return {"workers": p.workers, "record_id": p.record_id, "ops_per_sec": p.ops_per_sec, "speedup": p.speedup,
            "efficiency": p.efficiency, "ideal": p.ideal, "lost_capacity": p.lost_capacity,
            "oversubscribed": p.oversubscribed, "cpu": asdict(p.cpu), "waits": [_wait(w) for w in p.waits],
            "explained": p.lock_waits, "warnings": p.warnings, "named_share": p.named_share,
            "time_sharing": p.time_sharing, "background_preempted": p.background_preempted, "cpus": p.cpus,
            "repeats": p.repeats, "record_ids": p.record_ids,
            "intervals": _intervals(p),
            "wait_intervals": {n: _interval(e) for n, e in p.wait_est.items()},
            "background": asdict(p.background) if p.background else None,
            "noise": _interval(p.noise) | {"value": p.noise.value} if p.noise else None}


def _interval(e) -> dict:
    return {"low": e.low, "high": e.high, "repeats": e.repeats}


def _intervals(p: PointView) -> dict:
    """{figure: {low, high, repeats}} beside the point's figures (low and
    high None with one run)."""
    return {k: _interval(e) for k, e in p.est.items()}


def _curve_point(p: PointView) -> dict:
    return {"workers": p.workers, "ops_per_sec": p.ops_per_sec, "speedup": p.speedup,
            "efficiency": p.efficiency, "ideal": p.ideal, "lost_capacity": p.lost_capacity,
            "repeats": p.repeats, "intervals": _intervals(p)}


def _attribution(p: PointView) -> dict:
    a: Attribution = p.attribution
    items = [{"name": it.wait.name, "type": it.wait.type, "class": it.wait.category, "tier": it.wait.tier,
              "worker_equivalents": it.wait.worker_equivalents, "attributed": it.attributed,
              "share_of_loss": it.share_of_loss}
             for it in a.items]
    return {"workers": p.workers, "ideal": p.ideal, "speedup": p.speedup, "lost_capacity": p.lost_capacity,
            "items": items, "explained": a.explained, "unexplained": a.unexplained,
            "waits_exceed_loss": a.waits_exceed_loss, "measured": a.measured,
            "measured_total": a.measured_total, "scale": a.scale}


def _usl(u: UslFit) -> dict:
    return {"alpha": u.alpha, "beta": u.beta, "lambda": u.lam, "r2": u.r2, "points_used": u.points_used,
            "peak_workers": u.peak_workers, "peak_throughput": u.peak_throughput, "peak": u.peak_text(),
            "peak_extrapolated": u.peak_extrapolated, "curve": [asdict(c) for c in u.curve()]}


def _whatif(w: WhatIf) -> dict:
    return {"label": w.label, "name": w.name, "formula": w.FORMULA, "curve": [asdict(c) for c in w.curve]}


def _cpi(p: PointView) -> dict:
    return {"workers": p.workers} | _unavailable(p.cpi, lambda v: {"value": v})


def experiment(e: Experiment) -> dict:
    named = [{"workers": p.workers, "share": p.named_share} for p in e.points if p.named_share is not None]
    return {
        "workload": e.workload, "fs": e.fs, "kind": e.kind, "unit": e.unit,
        "curve": [_curve_point(p) for p in e.points],
        "points": [_point(p) for p in e.points],
        "repeats": e.repeats,
        "interval_method": METHOD if e.repeats > 1 else {"unavailable": NO_INTERVAL},
        "collapse": asdict(e.collapse) if e.collapse else None,
        "undecided": asdict(e.undecided) if e.undecided else None,
        "root_cause": _root_cause(e.root_cause) | (
            {"confirmation": confirmation_json(e.confirmation)}
            if e.confirmation and e.confirmation.lock == e.root_cause.wait.name else {}) if e.root_cause else None,
        "confirmation": confirmation_json(e.confirmation) if e.confirmation else None,
        "diagnosis": e.diagnosis,
        "usl": _unavailable(e.usl, _usl),
        "attribution": [_attribution(p) for p in e.points],
        "whatif": _unavailable(e.whatif, _whatif),
        "timeview": _unavailable(e.timeview, asdict),
        "cpi": [_cpi(p) for p in e.points],
        "named_share": named or {"unavailable": e.named_share_missing},
        # per point: the roles, which were counted as the work and why, and
        # who woke whom (records of schema /2; absent in older ones)
        "roles": [{"workers": r.workers, "roles": [asdict(ro) for ro in r.roles],
                   "wait_for": [asdict(ed) for ed in r.wait_for]} for r in e.records if r.roles],
    }


def to_json(experiments: list[Experiment]) -> dict:
    return {"schema": SCHEMA, "experiments": [experiment(e) for e in experiments]}
