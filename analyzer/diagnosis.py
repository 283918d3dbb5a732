"""The diagnosis sentence of an experiment: where it stops scaling, and the
wait that explains it (or why lockscope cannot say)."""
from __future__ import annotations

from . import holders, owners, probeeffect
from .kernel import sharing
from .attribution import RootCause
from .confirmation import CONFIRMED, INCONCLUSIVE, MIXED, NOT_CONFIRMED, Confirmation
from .results import PointView
from .scaling import Collapse
from lockscope.record import RunRecord


def pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"


def _top_lock(rec: RunRecord) -> str:
    """The most contended lock of the last point, as a clause."""
    if not rec.probe.attached:
        return "lock waits were not measured (probes disabled)"
    top = rec.locks[0] if rec.locks else None
    if not top:
        return "no lock contention was recorded"
    how = sharing.clause(top, rec.workers)
    slowed = probeeffect.clause(rec)
    behind = holders.cause_clause(holders.chain(top, {lk.name: lk for lk in rec.locks})) or owners.clause(top)
    return (f"the most contended lock is {top.name} ({top.kind}, {top.tier}{'; ' + how if how else ''}): "
            f"{pct(top.wait_share)} of worker time" + (f", {behind}" if behind else "") +
            (f", {slowed}" if slowed else ""))


def _collapse(on: str, pts: list[PointView], collapse: Collapse, root: RootCause | None,
              rec: RunRecord) -> str:
    attached = rec.probe.attached
    at = next(p for p in pts if p.workers == collapse.workers)
    head = (f"{on} stops scaling at {collapse.workers} workers (speedup {at.speedup:.2f}, "
            f"efficiency {at.efficiency:.0%}: {collapse.reason})")
    if root is None:
        return head + ("; no wait grew across the collapse, so lockscope cannot name a cause "
                       "(look at the CPU breakdown: the loss may be on CPU, e.g. cache-line contention)."
                       if attached else "; lock waits were not measured (probes disabled).")
    w = root.wait
    lk = next((lk for lk in rec.locks if lk.name == w.name), None) if w.is_lock else None
    how = sharing.clause(lk, rec.workers) if lk else None
    what = (f"waits on {w.name} ({w.kind}, {w.tier}{'; ' + how if how else ''})" if w.is_lock
            else f"is {w.name.removeprefix('off-CPU: ')}")
    # a point the probes slowed (analyzer/probeeffect.py): its waits are partly the probe's
    slowed = probeeffect.clause(rec)
    out = (f"{head}: {pct(w.wait_share)} of worker time {what}, which explains "
           f"{pct(root.explained_share)} of the lost capacity ({at.lost_capacity:.2f} of "
           f"{at.ideal:g} workers)" + (f", {slowed}." if slowed else "."))
    behind = holders.cause_clause(root.chain)
    if behind:
        # the lock is where the time is lost; the chain says what makes it so
        out += f" Behind it: {w.name}, {behind}; the root cause is {root.cause}."
    elif lk is not None and owners.clause(lk):
        out += f" Behind it: {owners.clause(lk)}."
    a = at.attribution
    if a is not None and at.lost_capacity > 0 and a.unexplained / at.lost_capacity > 0.5:
        out += (f" Most of the loss ({pct(a.unexplained / at.lost_capacity)}) is in no wait: the workers were "
                f"on CPU then (spinning or yielding before they block, cache-line contention, or more work "
                f"per operation; the CPU samples have kernel stacks only, so time spent in user space "
                f"shows there as one frame).")
    return out


def sentence(on: str, pts: list[PointView], collapse: Collapse | None, root: RootCause | None,
             recs: list[RunRecord], confirmed: Confirmation | None = None) -> str:
    """on: the experiment's title ("MWRM on tmpfs"); confirmed: `lockscope
    confirm`'s verdict, said after the diagnosis."""
    text = _sentence(on, pts, collapse, root, recs)
    return text + (" " + confirmation_clause(confirmed) if confirmed else "")


def confirmation_clause(c: Confirmation) -> str:
    """"Confirmed by experiment: ..." and why."""
    head = {CONFIRMED: "Confirmed by experiment", NOT_CONFIRMED: "Not confirmed by experiment",
            MIXED: "Experiment mixed", INCONCLUSIVE: "Experiment inconclusive"}[c.verdict]
    return f"{head} ({c.lock}, {c.workers} workers): {c.why}."


def _sentence(on: str, pts: list[PointView], collapse: Collapse | None, root: RootCause | None,
              recs: list[RunRecord]) -> str:
    if not pts or any(p.ops_per_sec <= 0 for p in pts):
        return f"{on}: throughput was not measured at every point, so there is no scaling curve."
    last = pts[-1]
    if len(pts) == 1:
        return (f"{on} was measured at {last.workers} worker{'s' if last.workers != 1 else ''} only, so "
                f"there is no scaling curve; {_top_lock(recs[-1])}.")
    if collapse is None:
        return (f"{on} scales to {last.workers} workers (speedup {last.speedup:.2f}, "
                f"{last.efficiency:.0%} efficiency); {_top_lock(recs[-1])}.")
    rec = next((r for r in recs if r.workers == collapse.workers), recs[-1])
    return _collapse(on, pts, collapse, root, rec)
