"""Figures measured over repeated runs, with their interval, and the
decisions made from them.

A point of a sweep run K times (`sweep --repeat K`) has K values of each
figure. The figure shown is their median; its interval is Student's t
interval of their mean at 95% confidence (mean +- t(0.975, K-1) x s / sqrt K).
The t interval is used rather than a bootstrap: with the 3 to 5 repeats a
sweep affords, a percentile bootstrap can never be wider than the values
seen, which understates the spread of runs not yet made. Ratios between
points (speedup, a throughput drop) are formed per repeat first, between
runs of the same repeat, which the sweep interleaves so that they are
measured close together in time and the machine's drift hits both.

A decision against a threshold is made only when the interval lies on one
side of it (`side`); with one run there is no interval and the value
alone decides, as before repeats existed, and the outputs say that no
interval is available.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

CONFIDENCE = 0.95
SHARE = (0.0, 1.0)
METHOD = "Student's t interval of the mean over the repeats, 95%"
NO_INTERVAL = "one run per point: no interval (sweep --repeat K measures each point K times)"


@dataclass
class Estimate:
    value: float                 # the median of the repeats
    low: float | None = None     # the interval; None with one repeat
    high: float | None = None
    repeats: int = 1

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def fmt(self, spec: str = ".2f", unit: str = "") -> str:
        """"1.17 [1.05-1.30]" (or "1.17" without an interval)."""
        v = f"{format(self.value, spec)}{unit}"
        if not self.has_interval:
            return v
        return f"{v} [{format(self.low, spec)}{unit}-{format(self.high, spec)}{unit}]"

    def to_json(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "repeats": self.repeats}


def t_quantile(df: int) -> float:
    """Student's t quantile: scipy.special's inverse of the t distribution
    function (what scipy.stats.t.ppf calls), imported only where an interval
    is computed; scipy.stats itself takes 0.9 s to import, special 0.2 s."""
    from scipy.special import stdtrit
    return float(stdtrit(df, 0.5 + CONFIDENCE / 2))


def estimate(values: list[float], bounds: tuple[float, float] | None = None) -> Estimate:
    """The median of `values` and the t interval of their mean, clipped to
    `bounds` where the figure has them (a share lies in [0, 1])."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return Estimate(float("nan"), None, None, 0)
    med = float(statistics.median(xs))
    if len(xs) < 2:
        return Estimate(med, None, None, len(xs))
    mean, sd = statistics.fmean(xs), statistics.stdev(xs)
    half = t_quantile(len(xs) - 1) * sd / math.sqrt(len(xs))
    # the median lies inside for any sample of 2..n, but never print an
    # interval that leaves out the figure it stands beside
    low, high = min(mean - half, med), max(mean + half, med)
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Estimate(med, low, high, len(xs))


def side(e: Estimate, threshold: float, margin: float = 0.0) -> bool | None:
    """True: below `threshold`; False: at or above it; None: undecided, the
    interval holding values on both sides or within `margin` of it (an
    indifference band: a figure that moves between reruns by less than the
    margin gets one decision or none, never the two opposite ones). One
    repeat: the value decides."""
    if not e.has_interval:
        return e.value < threshold
    if e.high < threshold - margin:
        return True
    if e.low >= threshold + margin:
        return False
    return None
