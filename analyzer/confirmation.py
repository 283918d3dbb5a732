"""The verdict of `lockscope confirm`: does the workload slow down when the
root-cause lock's critical sections get longer, as a serial resource would?

Each injected phase of the confirmation record (lockscope/confirmdata.py) is
compared with the plain phases on either side of it:

    response = change in time per operation (1/X - 1/X_plain)
               / wait added per operation (the injector's busy-wait time / ops)

A lock that limits throughput passes an added wait on in full: every
operation's serial time grows by it, response 1 (more where the longer
hold makes more acquisitions contended). Time added in parallel code costs
1/N of itself with N workers on N CPUs, and nothing where the workers wait
for something else. The control adds the same wait just outside the
critical sections, on the same path, so the two responses differ only by
where the wait falls. The slopes are fitted through the origin over the
injected phases, with a 95% bootstrap interval (phases resampled).

Verdicts (thresholds in RULES):
- confirmed: inside response >= 0.75, above the control by >= 0.25, and the
  interval's low end above the control's response;
- not confirmed: inside response < 0.5 (the lock passes on at most half of
  an added wait: it is not what limits), or within 0.1 of the control
  (waits cost the same inside the lock and out);
- mixed: anything between;
- inconclusive: no wait was added at all, or the waits added came to less than 3% of the time per
  operation, or less than twice the plain phases' own spread: too little
  to see a response (a kernel lock whose few contended acquisitions are
  long, e.g. mmap_lock held across a munmap, gets few waits).
Then, whatever the slopes: not confirmed when enough was added but no
injected phase moved the throughput beyond twice the plain phases' spread.

From a confirmed slope, the predicted throughput when the critical sections
are shortened by 10/25/50%, assuming the lock is held for the whole serial
time per operation (1/X): X / (1 - min(slope, 1) x shortening), bounded by
the gain the ideal throughput and the what-if (the lock removed) allow at
that point: an upper estimate, labelled as a prediction.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from lockscope.confirmdata import INSIDE, NONE, OUTSIDE, ConfirmRecord

CONFIRMED, NOT_CONFIRMED, MIXED, INCONCLUSIVE = "confirmed", "not confirmed", "mixed", "inconclusive"
RULES = {"confirmed_min": 0.75, "above_control": 0.25, "not_below": 0.5, "same_as_control": 0.1,
         "min_added": 0.03}
SHORTER = (0.10, 0.25, 0.50)
PROBE_EFFECT = 0.8      # below this share of its rate alone, the plain phases are said to be slowed


@dataclass
class Point:
    where: str
    delay_ns: int
    added_per_op_ns: float       # the busy-wait time per operation
    delta_ns_per_op: float       # 1/X - 1/X_plain, in ns per operation
    ops_per_sec: float
    plain_ops_per_sec: float

    @property
    def response(self) -> float | None:
        return self.delta_ns_per_op / self.added_per_op_ns if self.added_per_op_ns > 0 else None


@dataclass
class Response:
    slope: float | None          # fitted through the origin; None without added waits
    low: float | None
    high: float | None
    points: list[Point] = field(default_factory=list)


@dataclass
class Confirmation:
    lock: str
    verdict: str
    why: str
    inside: Response
    outside: Response
    workers: int
    base_ops_per_sec: float      # median of the plain phases
    delays_us: list[float]
    runs: int                    # injected phases
    noise: float                 # relative spread of the plain phases' throughput (median |step|)
    predicted: dict[str, float] = field(default_factory=dict)   # "10%" -> ops/s
    space: str = "kernel"
    how: str = ""
    warnings: list[str] = field(default_factory=list)


def points(rec: ConfirmRecord, where: str) -> list[Point]:
    """Each `where` phase against the mean of the plain phases next to it."""
    out = []
    ph = rec.phases
    for i, p in enumerate(ph):
        if p.where != where or not p.ops:
            continue
        plain = [q.ops_per_sec for q in (_plain(ph, i, -1), _plain(ph, i, 1)) if q]
        if not plain or p.ops_per_sec <= 0:
            continue
        base = sum(plain) / len(plain)
        out.append(Point(where, p.delay_ns, p.added_ns / p.ops, 1e9 / p.ops_per_sec - 1e9 / base,
                         p.ops_per_sec, base))
    return out


def _plain(phases, i: int, step: int):
    j = i + step
    while 0 <= j < len(phases):
        if phases[j].where == NONE and phases[j].ops_per_sec > 0:
            return phases[j]
        j += step
    return None


def _slope(x, y) -> float:
    """least squares through the origin"""
    den = sum(a * a for a in x)
    return float(sum(a * b for a, b in zip(x, y)) / den) if den > 0 else float("nan")


def response(pts: list[Point]) -> Response:
    pts = [p for p in pts if p.added_per_op_ns > 0]
    if not pts:
        return Response(None, None, None, pts)
    x, y = [p.added_per_op_ns for p in pts], [p.delta_ns_per_op for p in pts]
    s = _slope(x, y)
    if len(pts) < 3:
        return Response(s, None, None, pts)
    import numpy                    # scipy and numpy only where an interval is computed
    from scipy.stats import bootstrap
    ci = bootstrap((numpy.array(x), numpy.array(y)), _slope, paired=True, vectorized=False, n_resamples=2000,
                   method="percentile", random_state=numpy.random.default_rng(1)).confidence_interval
    return Response(s, float(ci.low), float(ci.high), pts)


def verdict(inside: Response, outside: Response, space: str = "kernel") -> tuple[str, str]:
    r = RULES
    if inside.slope is None:
        return INCONCLUSIVE, ("no wait was added inside the lock: " +
                              ("it was not acquired under contention" if space == "kernel" else
                               "no release reached the probed function (inlined into its callers? a Go program "
                               "needs -gcflags=all=-l)"))
    ctl = outside.slope if outside.slope is not None else 0.0
    gap = inside.slope - ctl
    if inside.slope < r["not_below"]:
        return NOT_CONFIRMED, (f"the workload passed on {inside.slope:.2f} of each wait added inside the lock: "
                               "a lock that limits throughput passes on all of it")
    if gap < r["same_as_control"]:
        return NOT_CONFIRMED, (f"a wait inside the lock cost as much as the same wait outside it "
                               f"({inside.slope:.2f} vs {ctl:.2f} of it): the time costs the same anywhere")
    low_ok = inside.low is None or inside.low > ctl
    if inside.slope >= r["confirmed_min"] and gap >= r["above_control"] and low_ok:
        return CONFIRMED, (f"each wait added inside the lock cost {inside.slope:.2f} of itself in time per "
                           f"operation, the same wait outside it {ctl:.2f}: the lock is serial and limits throughput")
    return MIXED, (f"a wait inside the lock cost {inside.slope:.2f} of itself per operation, outside it {ctl:.2f}: "
                   "between a serial resource's response (1) and no more than elsewhere")


def _noise(rec: ConfirmRecord) -> float:
    xs = [p.ops_per_sec for p in rec.phases if p.where == NONE and p.ops_per_sec > 0]
    if len(xs) < 2:
        return 0.0
    return float(statistics.median([abs(b - a) / ((a + b) / 2) for a, b in zip(xs, xs[1:])]))


def predict(base: float, slope: float, max_gain: float | None) -> dict[str, float]:
    """Throughput with the critical sections shorter by each of SHORTER,
    the lock taken as held for the whole serial time per operation, at most
    base x max_gain."""
    rho = min(slope, 1.0)
    out = {}
    for s in SHORTER:
        gain = 1 / max(1e-9, 1 - rho * s)
        out[f"{s:.0%}"] = base * (min(gain, max_gain) if max_gain else gain)
    return out


def confirm(rec: ConfirmRecord, max_gain: float | None = None) -> Confirmation:
    """max_gain: the most the point's throughput could grow (ideal, what-if)."""
    inside, outside = response(points(rec, INSIDE)), response(points(rec, OUTSIDE))
    v, why = verdict(inside, outside, rec.target.space)
    plain = [p.ops_per_sec for p in rec.phases if p.where == NONE and p.ops_per_sec > 0]
    base = float(statistics.median(plain)) if plain else 0.0
    noise = _noise(rec)
    warnings = list(rec.warnings)
    if rec.alone_ops_per_sec and base < PROBE_EFFECT * rec.alone_ops_per_sec:
        warnings.append(f"with the injector attached ({rec.target.how.split(', and for the control')[0]}) and no wait set, the workload ran "
                        f"at {base / rec.alone_ops_per_sec:.0%} of its rate alone ({rec.alone_ops_per_sec:,.0f}): "
                        "the responses are those of a slower program")
    if inside.points:
        added = float(statistics.median([p.added_per_op_ns * p.plain_ops_per_sec / 1e9 for p in inside.points]))
        moved = max(abs(p.delta_ns_per_op) * p.plain_ops_per_sec / 1e9 for p in inside.points)
        if added < max(RULES["min_added"], 2 * noise):
            v, why = INCONCLUSIVE, (f"the waits added inside the lock came to {added:.1%} of the time per operation "
                                    f"(the plain phases differ by {noise:.1%}): too little to see a response"
                                    + ("; only its contended acquisitions get a wait" if rec.target.site == "contended"
                                       else ""))
        elif moved < 2 * noise:
            v, why = NOT_CONFIRMED, (f"no injected phase moved the throughput beyond twice the plain phases' own "
                                     f"spread ({noise:.1%})")
    return Confirmation(lock=rec.target.name, verdict=v, why=why, inside=inside, outside=outside, workers=rec.workers,
                        base_ops_per_sec=base, delays_us=sorted({p.delay_ns / 1000 for p in rec.phases if p.delay_ns}),
                        runs=sum(1 for p in rec.phases if p.where != NONE), noise=noise,
                        predicted=predict(base, inside.slope, max_gain) if v == CONFIRMED else {},
                        space=rec.target.space, how=rec.target.how, warnings=warnings)
