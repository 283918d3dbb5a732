"""The scaling curve of one experiment: speedup, efficiency and lost capacity
per point, and the collapse point with the rule that found it."""
from __future__ import annotations

from dataclasses import dataclass

# the rule, stated in every report
EFFICIENCY_THRESHOLD = 0.75      # a point below 75% efficiency has collapsed
THROUGHPUT_DROP = 0.05           # ... as has one whose throughput fell >5% from the point before
RULE = (f"efficiency (speedup over ideal) below {EFFICIENCY_THRESHOLD:.0%}, or throughput more than "
        f"{THROUGHPUT_DROP:.0%} below the previous worker count")


@dataclass
class CurvePoint:
    workers: int
    ops_per_sec: float
    ideal: float          # ideal speedup: workers, capped at the CPUs they could run on
    speedup: float        # throughput relative to the smallest point, scaled by its worker count
    efficiency: float     # speedup / ideal
    lost_capacity: float  # ideal - speedup, in workers (never negative)


@dataclass
class Collapse:
    workers: int
    efficiency: float
    speedup: float
    reason: str
    rule: str = RULE


def curve(points: list[tuple[int, float, int]]) -> list[CurvePoint]:
    """points: (workers, ops_per_sec, cpus available) sorted by workers."""
    if not points:
        return []
    w0, t0, c0 = points[0]
    base = min(w0, c0) if c0 else w0
    out = []
    for w, t, cpus in points:
        ideal = float(min(w, cpus)) if cpus else float(w)
        speedup = (t / t0) * base if t0 > 0 else 0.0
        eff = speedup / ideal if ideal else 0.0
        out.append(CurvePoint(w, t, ideal, speedup, eff, max(0.0, ideal - speedup)))
    return out


def find_collapse(pts: list[CurvePoint]) -> Collapse | None:
    for prev, p in zip(pts, pts[1:]):
        if p.efficiency < EFFICIENCY_THRESHOLD:
            return Collapse(p.workers, p.efficiency, p.speedup, f"below {EFFICIENCY_THRESHOLD:.0%}")
        if prev.ops_per_sec > 0 and p.ops_per_sec < (1 - THROUGHPUT_DROP) * prev.ops_per_sec:
            drop = 1 - p.ops_per_sec / prev.ops_per_sec
            return Collapse(p.workers, p.efficiency, p.speedup,
                            f"throughput {drop:.0%} below {prev.workers} worker{'s' if prev.workers != 1 else ''}")
    return None
