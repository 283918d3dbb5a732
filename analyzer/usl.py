"""Universal Scalability Law fit of a throughput curve (Gunther):

    X(N) = lambda * N / (1 + alpha * (N - 1) + beta * N * (N - 1))

alpha is contention (serialization), beta coherency (crosstalk), lambda the
throughput of one worker without either. Fitted by least squares
(scipy.optimize.curve_fit) with alpha, beta >= 0. The predicted peak is at
N* = sqrt((1 - alpha) / beta), or 1 when alpha + beta >= 1 (no gain from a
second worker); past the largest measured worker count it is an
extrapolation and says so. Only points where every worker has a CPU are
fitted: oversubscribed points measure the CPU limit, not the law."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

MIN_POINTS = 3
CURVE_SAMPLES = 60


def usl(n, lam: float, alpha: float, beta: float):
    return lam * n / (1 + alpha * (n - 1) + beta * n * (n - 1))


@dataclass
class UslPoint:
    workers: float
    ops_per_sec: float
    extrapolated: bool            # beyond the largest measured worker count


@dataclass
class UslFit:
    alpha: float
    beta: float
    lam: float
    r2: float
    points_used: int
    max_measured: float
    peak_workers: float | None       # None: no peak (beta = 0, alpha < 1); 1.0 when alpha >= 1
    peak_throughput: float | None

    def peak_text(self, unit: str = "ops/s") -> str:
        """The predicted peak in words (the figures, the text and the HTML say the same)."""
        if self.peak_workers is None:
            if self.alpha > 0:
                return f"no peak: with coherency beta = 0 the throughput rises toward lambda/alpha = {self.lam / self.alpha:,.0f} {unit}"
            return "no peak: linear scaling (alpha = beta = 0)"
        if self.alpha >= 1 or self.peak_workers <= 1.0:
            return ("peak at 1 worker: contention alpha + beta >= 1, so every added worker costs more "
                    "than it adds")
        return (f"peak {self.peak_throughput:,.0f} {unit} at {self.peak_workers:.1f} workers"
                + (" (extrapolated beyond the measured points)" if self.peak_extrapolated else ""))

    @property
    def peak_extrapolated(self) -> bool:
        return self.peak_workers is not None and self.peak_workers > self.max_measured

    def predict(self, n: float) -> float:
        return float(usl(n, self.lam, self.alpha, self.beta))

    def curve(self) -> list[UslPoint]:
        """The fitted curve, sampled from 1 to twice the largest measured
        worker count (or past the peak), for figures and the JSON."""
        hi = max(2 * self.max_measured, 1.25 * self.peak_workers if self.peak_workers else 0.0)
        xs = [1 + (hi - 1) * i / (CURVE_SAMPLES - 1) for i in range(CURVE_SAMPLES)]
        return [UslPoint(x, self.predict(x), x > self.max_measured) for x in xs]


def fit(points: list[tuple[float, float]]) -> UslFit:
    """points: (workers, throughput). Raises ValueError with the reason when
    there is no fit."""
    import numpy as np
    from scipy.optimize import OptimizeWarning, curve_fit

    pts = sorted((float(n), float(x)) for n, x in points if x and x > 0)
    if len(pts) < MIN_POINTS or len({n for n, _ in pts}) < MIN_POINTS:
        raise ValueError(f"the USL has 3 parameters and needs at least {MIN_POINTS} worker counts "
                         f"(with a CPU each); {len(pts)} measured")
    n = np.array([p[0] for p in pts])
    x = np.array([p[1] for p in pts])
    # Fitted on throughput / its largest value, lambda scaled back: the
    # solver's gradient tolerance is absolute, so on raw values in small
    # units (a few ops per hour counted per second) it stopped early and the
    # coefficients depended on the unit (specsdm91 scaled by 1e-6: alpha
    # 0.027720 instead of 0.027728).
    scale = float(x.max())
    lam0 = x[0] / n[0] / scale
    try:
        with warnings.catch_warnings():   # 3 points, 3 parameters: no covariance, the fit is still exact
            warnings.simplefilter("ignore", OptimizeWarning)
            (lam, alpha, beta), _ = curve_fit(usl, n, x / scale, p0=[lam0, 0.01, 0.0001],
                                              bounds=([0.0, 0.0, 0.0], [np.inf, np.inf, np.inf]),
                                              x_scale=[lam0, 0.1, 0.01], maxfev=20000)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"the least-squares fit did not converge: {e}") from e
    lam *= scale
    pred = usl(n, lam, alpha, beta)
    ss_res = float(np.sum((x - pred) ** 2))
    ss_tot = float(np.sum((x - x.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    peak_n = peak_x = None
    if alpha >= 1 or alpha + beta >= 1:
        # X(N) is highest at N = 1 over N >= 1 (its slope there is lambda * (1 - alpha - beta))
        peak_n, peak_x = 1.0, float(lam)
    elif beta > 1e-12:
        peak_n = max(1.0, math.sqrt((1 - alpha) / beta))
        peak_x = float(usl(peak_n, lam, alpha, beta))
    return UslFit(float(alpha), float(beta), float(lam), r2, len(pts), float(n.max()), peak_n, peak_x)


def fit_unsaturated(points: list[tuple[float, float, bool]]) -> UslFit:
    """fit() over the points where every worker had a CPU; points: (workers,
    throughput, oversubscribed)."""
    return fit([(n, x) for n, x, over in points if not over])
