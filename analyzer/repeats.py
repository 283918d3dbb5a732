"""The root cause of a collapse over repeated runs (`sweep --repeat K`):
the root cause of each repeat (attribution.root_cause on that repeat's runs
before and at the collapse), how many repeats each candidate came first
in, and whether the first two can be told apart: the paired differences of
their growths across repeats, with their t interval (analyzer/intervals.py),
must exclude 0. One repeat decides as before repeats existed.

Then, with any number of repeats: a wait that explains under
attribution.CONTRIBUTOR_BELOW of the lost capacity gained is a contributor,
not the cause, and the larger part is named (another wait, the worker
roles' idle time, or time in no wait)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from . import attribution
from .attribution import CONTRIBUTOR_BELOW, RootCause
from .intervals import SHARE, Estimate, estimate
from .results import PointView
from lockscope.model.record import RunRecord


@dataclass
class HolderCount:
    """The top release site of the root-cause lock over the repeats."""
    site: str
    first_in: int                 # repeats whose top holder it was
    repeats: int                  # repeats with holders recorded for the lock
    share: Estimate               # its share of the lock's released waits, over the repeats (0 where absent)


def holders(name: str, at: dict[int, RunRecord]) -> HolderCount | None:
    """The lock `name`'s top holder (release site) in each repeat, counted;
    None where no repeat recorded holders for it."""
    tops: Counter[str] = Counter()
    shares: dict[int, dict[str, float]] = {}
    for k, rec in at.items():
        lk = next((lk for lk in rec.locks if lk.name == name), None)
        if lk is None or not lk.holders:
            continue
        shares[k] = {}
        for h in lk.holders:
            shares[k][h.site] = shares[k].get(h.site, 0.0) + h.share
        tops[max(shares[k], key=lambda s: shares[k][s])] += 1
    if not tops:
        return None
    site = sorted(tops, key=lambda s: (-tops[s], s))[0]
    return HolderCount(site, tops[site], len(shares), estimate([sh.get(site, 0.0) for sh in shares.values()], SHARE))


def root_cause(before: dict[int, RunRecord], at: dict[int, RunRecord], rep_before: RunRecord, rep_at: RunRecord,
               lost_before: dict[int, float], lost_at: dict[int, float], point_before: PointView,
               point_at: PointView) -> RootCause | None:
    """before/at: the repeats' runs by repeat number; rep_*: the runs shown
    for the two points (the median ones); lost_*: lost capacity by repeat."""
    rc = attribution.root_cause(rep_before, rep_at, point_before.lost_capacity, point_at.lost_capacity)
    if len(at) > 1:
        rc = _over_repeats(rc, before, at, rep_before, lost_before, lost_at)
    if rc is not None:
        _contributor(rc, point_at, rep_at)
        if rc.wait.is_lock and len(at) > 1:
            rc.holder = holders(rc.wait.name, at)
    return rc


def _over_repeats(rc: RootCause | None, before, at, rep_before, lost_before, lost_at) -> RootCause | None:
    firsts: Counter[str] = Counter()
    grown: dict[int, dict[str, float]] = {}
    per: dict[str, RootCause] = {}
    for k, a in sorted(at.items()):
        b = before.get(k, rep_before)
        grown[k] = {name: g for name, (_, g) in attribution.growths(b, a).items()}
        r = attribution.root_cause(b, a, lost_before.get(k, 0.0), lost_at.get(k, 0.0))
        if r is not None:
            firsts[r.wait.name] += 1
            per.setdefault(r.wait.name, r)
    if not firsts:
        return rc
    top = max(firsts.values())
    leaders = sorted(n for n, c in firsts.items() if c == top)
    name = rc.wait.name if rc is not None and rc.wait.name in leaders else leaders[0]
    out = rc if rc is not None and rc.wait.name == name else per[name]
    out.first_in, out.repeats = firsts[name], len(at)
    # the runner-up: the other wait with the largest median growth
    others: dict[str, list[float]] = {}
    for g in grown.values():
        for n in g:
            if n != name:
                others.setdefault(n, [])
    if others:
        med = {n: estimate([g.get(n, 0.0) for g in grown.values()]).value for n in others}
        second = max(med, key=lambda n: med[n])
        diff = estimate([g.get(name, 0.0) - g.get(second, 0.0) for g in grown.values()])
        if med[second] > 0 and diff.has_interval and diff.low <= 0:
            out.tied_with = second
    return out


def _contributor(rc: RootCause, at: PointView, rec: RunRecord) -> None:
    if rc.explained_share >= CONTRIBUTOR_BELOW or at.lost_capacity <= 0:
        return
    rc.contributor = True
    parts: list[tuple[float, str]] = []
    for item in (at.attribution.items if at.attribution else []):
        if item.wait.name != rc.wait.name:
            parts.append((item.attributed, item.wait.name.removeprefix("off-CPU: ")))
    window_ns = rec.probe.window_s * 1e9
    if rec.roles and window_ns > 0:
        idle = sum(r.idle_ns for r in rec.roles if r.worker) / window_ns
        if idle > 0:
            parts.append((min(idle, at.lost_capacity), "the workers idle, waiting for work (the program's own "
                                                       "pacing or its input)"))
    if at.attribution and at.attribution.unexplained > 0:
        parts.append((at.attribution.unexplained, "time in no wait (on CPU, or idle outside the traced waits)"))
    if parts:
        share, what = max(parts)
        if share > rc.growth:
            rc.larger_part = f"{what} ({min(1.0, share / at.lost_capacity):.0%} of the lost capacity)"
