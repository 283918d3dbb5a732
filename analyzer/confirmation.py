"""The verdict of `lockscope confirm`: does the workload slow down when the
root-cause lock's critical sections get longer, as a serial resource would?

Each injected phase of the confirmation record (lockscope/model/confirmdata.py) is
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

The slopes are fitted through the origin over the injected phases; each
has Student's t interval at 95% (the slope's standard error through the
origin, n - 1 degrees of freedom, n the injected phases). The phases run
in ABBA order (lockscope/measure/confirm.py), so that a drift of the
machine falls on inside and control alike.

Verdicts, on the intervals (thresholds in RULES):
- confirmed: the inside interval lies wholly above the control's by at
  least 0.25, and reaches a serial resource's response (its high end >=
  0.75). A serial resource passes on all of a wait inside it and at most
  1/N of one outside it (N workers, N >= 2 on their own CPUs): at least
  half a wait more inside. Apart by less than 0.25, the workload passes on
  time about wherever it is added, limited by something every operation
  shares (its CPUs, taken by other work or by more workers than CPUs): a
  CPU-bound program beside a CPU hog read 1.07 [1.04-1.11] inside, 0.94
  [0.88-1.01] outside, apart by 0.03: inconclusive, with that reason;
- not confirmed: the inside interval overlaps the control's and lies wholly
  below a serial resource's response (high end < 0.75): waits cost about
  the same inside the lock and out; or it lies wholly below one half: the
  lock passes on less than half of an added wait, it is not what limits;
- inconclusive: anything else, with the widths and about how many more
  rounds would decide; also when no wait was added, when the waits added
  came to under 3% of the time per operation (too little to see a
  response: a kernel lock whose few contended acquisitions are long, e.g.
  mmap_lock held across a munmap, gets few waits; the plain phases'
  spread is in the intervals already), when one injected phase cannot give an
  interval, or when the machine's background changed between an injected
  phase and its plain neighbours by more than half the effect measured.
Confirmed needs the inside interval's high end >= 0.75, not confirmed
needs it < 0.75 (or wholly below 0.5): no rerun can turn one into the
other without its interval moving past the threshold, which a 95%
interval does about one time in twenty.

From a confirmed slope, the predicted throughput when the critical sections
are shortened by 10/25/50%, assuming the lock is held for the whole serial
time per operation (1/X): X / (1 - min(slope, 1) x shortening), bounded by
the gain the ideal throughput and the what-if (the lock removed) allow at
that point: an upper estimate, labelled as a prediction.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .intervals import t_quantile
from lockscope.model.confirmdata import INSIDE, NONE, OUTSIDE, ConfirmRecord

CONFIRMED, NOT_CONFIRMED, INCONCLUSIVE = "confirmed", "not confirmed", "inconclusive"
DECIDED = (CONFIRMED, NOT_CONFIRMED)
MANY_ROUNDS = 20      # more than this many more rounds: not a budget to suggest (a run said "about 2362")
RULES = {"serial": 0.75, "excess": 0.25, "not_below": 0.5, "min_added": 0.03, "background_vs_effect": 0.5}
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
    rounds: int = 0                    # inside phases per delay
    background_change: float | None = None   # median change of the background between paired phases
    more_rounds: int | None = None     # inconclusive: about how many more rounds would decide


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
    """The slope through the origin of time per operation gained against
    wait added, with its t interval (95%, n - 1 degrees of freedom)."""
    pts = [p for p in pts if p.added_per_op_ns > 0]
    if not pts:
        return Response(None, None, None, pts)
    x, y = [p.added_per_op_ns for p in pts], [p.delta_ns_per_op for p in pts]
    s = _slope(x, y)
    if len(pts) < 2:
        return Response(s, None, None, pts)
    sxx = sum(a * a for a in x)
    resid = sum((b - s * a) ** 2 for a, b in zip(x, y)) / (len(pts) - 1)
    half = t_quantile(len(pts) - 1) * math.sqrt(resid / sxx)
    return Response(s, s - half, s + half, pts)


def _control(outside: Response) -> tuple[float, float]:
    """The control's interval; a control that got no wait counts as 0."""
    if outside.slope is None:
        return 0.0, 0.0
    if outside.low is None:
        return outside.slope, outside.slope
    return outside.low, outside.high


def more_rounds(inside: Response, outside: Response, rounds: int) -> int | None:
    """About how many more rounds would narrow the intervals (as 1/sqrt of
    the phases) enough to decide; None when narrower ones would not: the
    responses sit where neither rule can be met."""
    if inside.low is None or rounds < 1:
        return None
    half_i = (inside.high - inside.low) / 2
    c_lo, c_hi = _control(outside)
    half_c = (c_hi - c_lo) / 2
    ctl = (c_lo + c_hi) / 2
    factors = []
    gap = inside.slope - ctl - RULES["excess"]
    if gap > 0 and inside.slope >= RULES["serial"] and half_i + half_c > 0:
        factors.append(((half_i + half_c) / gap) ** 2)          # to confirm
    if inside.slope < RULES["serial"] and half_i > 0:
        factors.append((half_i / (RULES["serial"] - inside.slope)) ** 2)   # to rule the lock out
    if not factors:
        return None
    return max(1, math.ceil(rounds * min(factors)) - rounds)


def verdict(inside: Response, outside: Response, space: str = "kernel", rounds: int = 0) -> tuple[str, str]:
    r = RULES
    if inside.slope is None:
        return INCONCLUSIVE, ("no wait was added inside the lock: " +
                              ("it was not acquired under contention" if space == "kernel" else
                               "no release reached the probed function (inlined into its callers? a Go program "
                               "needs -gcflags=all=-l)"))
    if inside.low is None:
        return INCONCLUSIVE, (f"one injected phase ({inside.slope:.2f} of each wait passed on) gives no interval: "
                              "run more rounds")
    c_lo, c_hi = _control(outside)
    ins = f"{inside.slope:.2f} [{inside.low:.2f}-{inside.high:.2f}]"
    ctl = f"{outside.slope if outside.slope is not None else 0.0:.2f} [{c_lo:.2f}-{c_hi:.2f}]"
    ctl_slope = outside.slope if outside.slope is not None else 0.0
    if inside.high >= r["serial"] and c_hi >= r["not_below"] and inside.slope - ctl_slope < r["excess"]:
        return INCONCLUSIVE, (f"a wait inside the lock cost {ins} of itself per operation, the same wait outside "
                              f"it {ctl}: less than the {r['excess']:g} of a wait apart that a serial resource "
                              "passes on beyond the code around it, and the workload passes on time wherever "
                              "it is added: something every operation shares (the CPUs: the machine busy, or "
                              "more workers than CPUs) limits it as much as the lock does, and more rounds "
                              "would likely not decide; rerun where the workers have CPUs to spare")
    if inside.low > c_hi + r["excess"] and inside.high >= r["serial"]:
        return CONFIRMED, (f"each wait added inside the lock cost {ins} of itself in time per operation, the same "
                           f"wait outside it {ctl} (95% intervals, apart): the lock is serial and limits throughput")
    if inside.high < r["serial"] and inside.low <= c_hi and inside.high >= c_lo:
        return NOT_CONFIRMED, (f"a wait inside the lock cost {ins} of itself, the same wait outside it {ctl}: the "
                               f"intervals overlap and stay below a serial resource's {r['serial']:g}: the time "
                               "costs about the same anywhere")
    if inside.high < r["not_below"]:
        return NOT_CONFIRMED, (f"the workload passed on {ins} of each wait added inside the lock (95% interval below "
                               f"{r['not_below']:g}): a lock that limits throughput passes on all of it")
    more = more_rounds(inside, outside, rounds)
    hint = (f"more than {MANY_ROUNDS} more rounds would be needed: rerun on a quieter machine"
            if more is not None and more > MANY_ROUNDS else
            f"about {more} more round{'s' if more != 1 else ''} would likely decide (--budget)" if more is not None
            else "more rounds would likely not decide: the lock passes on part of each wait, more than elsewhere "
                 "but less than a serial resource (its holders may also wait for something else)")
    return INCONCLUSIVE, (f"a wait inside the lock cost {ins} of itself per operation, outside it {ctl}: the "
                          f"intervals (widths {inside.high - inside.low:.2f} and {c_hi - c_lo:.2f}) decide neither "
                          f"way; {hint}")


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


def rounds_of(rec: ConfirmRecord) -> int:
    """Rounds the phases made: inside phases per delay."""
    delays = {p.delay_ns for p in rec.phases if p.where == INSIDE}
    return sum(p.where == INSIDE for p in rec.phases) // max(1, len(delays))


def _background_change(rec: ConfirmRecord) -> float | None:
    """The median change of the machine's background (share of its CPUs)
    between an injected phase and the plain phases beside it."""
    ph, out = rec.phases, []
    for i, p in enumerate(ph):
        if p.where == NONE or p.background is None:
            continue
        near = [q.background for q in (_plain(ph, i, -1), _plain(ph, i, 1)) if q and q.background is not None]
        if near:
            out.append(abs(p.background - sum(near) / len(near)))
    return float(statistics.median(out)) if out else None


def confirm(rec: ConfirmRecord, max_gain: float | None = None) -> Confirmation:
    """max_gain: the most the point's throughput could grow (ideal, what-if)."""
    inside, outside = response(points(rec, INSIDE)), response(points(rec, OUTSIDE))
    v, why = verdict(inside, outside, rec.target.space, rounds_of(rec))
    plain = [p.ops_per_sec for p in rec.phases if p.where == NONE and p.ops_per_sec > 0]
    base = float(statistics.median(plain)) if plain else 0.0
    noise = _noise(rec)
    warnings = list(rec.warnings)
    if rec.alone_ops_per_sec and base < PROBE_EFFECT * rec.alone_ops_per_sec:
        warnings.append(f"with the injector attached ({rec.target.how.split(', and for the control')[0]}) and no wait set, the workload ran "
                        f"at {base / rec.alone_ops_per_sec:.0%} of its rate alone ({rec.alone_ops_per_sec:,.0f}): "
                        "the responses are those of a slower program")
    bg = _background_change(rec)
    if inside.points:
        added = float(statistics.median([p.added_per_op_ns * p.plain_ops_per_sec / 1e9 for p in inside.points]))
        if added < RULES["min_added"]:
            v, why = INCONCLUSIVE, (f"the waits added inside the lock came to {added:.1%} of the time per operation "
                                    f"(the plain phases differ by {noise:.1%}): too little to see a response"
                                    + ("; only its contended acquisitions get a wait" if rec.target.site == "contended"
                                       else ""))
        elif bg is not None and bg > RULES["background_vs_effect"] * added:
            v, why = INCONCLUSIVE, (f"the machine's background changed by {bg:.0%} of its CPUs between an injected "
                                    f"phase and the plain ones beside it, against waits of {added:.0%} of the time per "
                                    "operation: other work swamps the effect; rerun on a quieter machine")
    return Confirmation(lock=rec.target.name, verdict=v, why=why, inside=inside, outside=outside, workers=rec.workers,
                        base_ops_per_sec=base, delays_us=sorted({p.delay_ns / 1000 for p in rec.phases if p.delay_ns}),
                        runs=sum(1 for p in rec.phases if p.where != NONE), noise=noise,
                        predicted=predict(base, inside.slope, max_gain) if v == CONFIRMED else {},
                        space=rec.target.space, how=rec.target.how, warnings=warnings,
                        rounds=rounds_of(rec), background_change=bg,
                        more_rounds=more_rounds(inside, outside, rounds_of(rec)) if v == INCONCLUSIVE else None)
