"""The scaling curve of one experiment: speedup, efficiency and lost capacity
per point, and the collapse point with the rule that found it.

A point measured K times (`sweep --repeat K`) has each figure as the median
of its repeats with an interval (analyzer/intervals.py). Speedups and drops
are formed per repeat, between runs of the same repeat (interleaved by the
sweep), then summarized. The rule is decided on the intervals: a point has
collapsed when the interval of its efficiency lies below the threshold, or
the interval of its throughput over the previous point's lies below
1 - THROUGHPUT_DROP; it has not when both lie at or above; each clear of its
threshold by a margin (an indifference band); otherwise it is undecided, and
the analysis says so rather than guess."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .intervals import Estimate, estimate, side

# the rule, stated in every report
EFFICIENCY_THRESHOLD = 0.75      # a point below 75% efficiency has collapsed
THROUGHPUT_DROP = 0.05           # ... as has one whose throughput fell >5% from the point before
# With repeats, a point is decided only when its interval lies clear of the rule by a margin: the
# repeats of one sweep run close together, and a figure moves more between reruns than their
# interval says (MWRM's 2-worker efficiency on 2 CPUs: 80% [68%-91%] and 75% [46%-96%] in two
# reruns, intervals wholly below 75% and wholly above it in others: collapse and "scales" for one
# program). Inside the band the point is undecided, so that reruns differ between a decision and
# undecided, not between collapse and scaling. 5 points: wide enough for MWRM's reruns here, narrow
# enough that a clear collapse stays decided (DWOM on ext4, 64% [62%-66%]).
EFFICIENCY_MARGIN = 0.05
DROP_MARGIN = 0.03
RULE = (f"efficiency (speedup over ideal) below {EFFICIENCY_THRESHOLD:.0%}, or throughput more than "
        f"{THROUGHPUT_DROP:.0%} below the previous worker count; with repeats, decided only when the "
        f"95% interval lies on one side, clear of the rule by {EFFICIENCY_MARGIN * 100:.0f} points "
        f"(efficiency) or {DROP_MARGIN * 100:.0f} points (throughput)")


@dataclass
class CurvePoint:
    workers: int
    ops_per_sec: float
    ideal: float          # ideal speedup: workers, capped at the CPUs they could run on
    speedup: float        # throughput relative to the smallest point, scaled by its worker count
    efficiency: float     # speedup / ideal
    lost_capacity: float  # ideal - speedup, in workers (never negative)
    repeats: int = 1
    # with their intervals: ops_per_sec, speedup, efficiency, lost_capacity and
    # vs_previous (throughput over the previous point's, absent at the first)
    est: dict[str, Estimate] = field(default_factory=dict)
    speedups: dict[int, float] = field(default_factory=dict)   # by repeat


@dataclass
class Collapse:
    workers: int
    efficiency: float
    speedup: float
    reason: str
    rule: str = RULE
    repeats: int = 1
    # earlier points whose collapse the intervals could not decide: "2 workers: ..."
    undecided_before: list[str] = field(default_factory=list)


@dataclass
class Undecided:
    """No collapse decided, and at least one point the intervals leave open."""
    workers: int
    why: str              # the figure and its interval against the rule


def _scaled(e: Estimate, by: float) -> Estimate:
    if not by:
        return Estimate(0.0, None if e.low is None else 0.0, None if e.high is None else 0.0, e.repeats)
    return Estimate(e.value / by, None if e.low is None else e.low / by, None if e.high is None else e.high / by,
                    e.repeats)


def _per_repeat(xs: dict[int, float], ref: dict[int, float]) -> list[float]:
    """xs[r] / ref[r] for every repeat of xs, a repeat missing from ref
    compared with ref's median."""
    ref_med = statistics.median(ref.values()) if ref else 0.0
    out = []
    for r, x in sorted(xs.items()):
        base = ref.get(r) or ref_med
        out.append(x / base if base > 0 else 0.0)
    return out


def curve_repeated(points: list[tuple[int, dict[int, float], int]]) -> list[CurvePoint]:
    """points: (workers, {repeat: ops_per_sec}, cpus available) sorted by workers."""
    if not points:
        return []
    w0, x0, c0 = points[0]
    base = min(w0, c0) if c0 else w0
    out: list[CurvePoint] = []
    prev: dict[int, float] | None = None
    for w, xs, cpus in points:
        ideal = float(min(w, cpus)) if cpus else float(w)
        ops = estimate(list(xs.values()))
        by_k = dict(zip(sorted(xs), (s * base for s in _per_repeat(xs, x0))))
        sp = estimate(list(by_k.values()))
        eff = _scaled(sp, ideal)
        lost = Estimate(max(0.0, ideal - sp.value),
                        None if sp.high is None else max(0.0, ideal - sp.high),
                        None if sp.low is None else max(0.0, ideal - sp.low), sp.repeats)
        est = {"ops_per_sec": ops, "speedup": sp, "efficiency": eff, "lost_capacity": lost}
        if prev is not None:
            est["vs_previous"] = estimate(_per_repeat(xs, prev))
        out.append(CurvePoint(w, ops.value, ideal, sp.value, eff.value, lost.value, len(xs), est, by_k))
        prev = xs
    return out


def curve(points: list[tuple[int, float, int]]) -> list[CurvePoint]:
    """points: (workers, ops_per_sec, cpus available) sorted by workers: one run each."""
    return curve_repeated([(w, {1: t}, c) for w, t, c in points])


def _checks(prev: CurvePoint, p: CurvePoint) -> tuple[bool | None, str, bool | None, str]:
    """(below the efficiency threshold?, in words, dropped from prev?, in words)"""
    eff = p.est.get("efficiency") or Estimate(p.efficiency)
    low = side(eff, EFFICIENCY_THRESHOLD, EFFICIENCY_MARGIN)
    eff_text = f"efficiency {eff.fmt('.0%')}"
    vs = p.est.get("vs_previous") or Estimate(p.ops_per_sec / prev.ops_per_sec if prev.ops_per_sec > 0 else 1.0)
    drop = side(vs, 1 - THROUGHPUT_DROP, DROP_MARGIN) if prev.ops_per_sec > 0 else False
    drop_text = (f"throughput {1 - vs.value:.0%} below {prev.workers} worker{'s' if prev.workers != 1 else ''}"
                 + (f" (ratio {vs.fmt('.2f')})" if vs.has_interval else ""))
    return low, eff_text, drop, drop_text


def find_collapse(pts: list[CurvePoint]) -> Collapse | None:
    """The first point the rule decides has collapsed; points before it the
    intervals left open are listed in `undecided_before`."""
    open_: list[str] = []
    for prev, p in zip(pts, pts[1:]):
        low, eff_text, drop, drop_text = _checks(prev, p)
        if low or drop:
            reason = f"below {EFFICIENCY_THRESHOLD:.0%}" if low else drop_text
            return Collapse(p.workers, p.efficiency, p.speedup, reason, repeats=p.repeats, undecided_before=open_)
        if low is None or drop is None:
            open_.append(f"{p.workers} workers: " + (eff_text if low is None else drop_text))
    return None


def undecided(pts: list[CurvePoint]) -> Undecided | None:
    """Where no collapse is decided: the first point the intervals leave open."""
    for prev, p in zip(pts, pts[1:]):
        low, eff_text, drop, drop_text = _checks(prev, p)
        if low or drop:
            return None
        if low is None:
            return Undecided(p.workers, f"{eff_text} reaches within {EFFICIENCY_MARGIN * 100:.0f} points of the "
                                        f"{EFFICIENCY_THRESHOLD:.0%} rule")
        if drop is None:
            return Undecided(p.workers, f"{drop_text}: its interval reaches within {DROP_MARGIN * 100:.0f} points "
                                        f"of the {THROUGHPUT_DROP:.0%} drop rule")
    return None
