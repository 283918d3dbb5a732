"""Figures of an experiment as inline SVG (matplotlib): throughput against
ideal scaling (with the USL fit when the analysis has one), the what-if
curve, CPU breakdown per point, lock wait share per point, attribution of
lost capacity, and the time view of one run. Every function returns an SVG
string, or None when the data for it is missing (the page then says why).

Labels from the system are escaped by matplotlib's SVG writer; `$` is
escaped here so that names are never read as mathtext."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from lockscope.analyzer.results import Experiment, TimeView, Unavailable  # noqa: E402
from lockscope.analyzer.usl import UslFit  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                     "axes.spines.right": False, "svg.hashsalt": "lockscope", "axes.titlesize": 9,
                     "legend.fontsize": 7.5, "axes.grid": True, "grid.color": "#ececec",
                     "grid.linewidth": 0.6, "axes.axisbelow": True})

CPU_PARTS = [("user", "#4c78a8"), ("sys", "#e45756"), ("irq", "#b279a2"), ("iowait", "#f58518"),
             ("steal", "#9d755d"), ("idle", "#dddddd")]
PALETTE = ["#e45756", "#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#bab0ac"]
OTHER = "#c9c9c9"
TOP = 5          # locks / attribution items shown by name; the rest is "other"
LABEL_MAX = 60


def label(s: str, n: int = LABEL_MAX) -> str:
    """A system string as a matplotlib label: no mathtext, bounded length."""
    s = str(s)
    s = s if len(s) <= n else s[:n - 1] + "…"
    return s.replace("$", r"\$")


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def _si(x: float, _pos=None) -> str:
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            v = x / div
            return f"{v:.0f}{suf}" if v == int(v) or abs(v) >= 100 else f"{v:.3g}{suf}"
    return f"{x:g}"


def _workers_axis(ax, workers: list[float]) -> None:
    ax.set_xlabel("workers")
    if len(workers) <= 12:
        ax.set_xticks(sorted(set(workers)))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _ideal(exp: Experiment) -> list[float]:
    p0 = exp.points[0]
    per_worker = p0.ops_per_sec / p0.ideal if p0.ideal else 0.0
    return [per_worker * p.ideal for p in exp.points]


def throughput(exp: Experiment, small: bool = False) -> str:
    pts = exp.points
    usl = exp.usl if isinstance(exp.usl, UslFit) else None
    w = [p.workers for p in pts]
    fig, ax = plt.subplots(figsize=(2.6, 1.5) if small else (4.8, 3.0))
    if pts and pts[0].ops_per_sec > 0:
        ax.plot(w, _ideal(exp), "--", color="#8a8a8a", lw=1, label="ideal (linear to the CPU count)")
    curve = usl.curve() if usl else None
    if curve:
        inside = [c for c in curve if not c.extrapolated]
        outside = [c for c in curve if c.extrapolated]
        fit = f"USL fit (R² {usl.r2:.3f})"
        if inside:
            ax.plot([c.workers for c in inside], [c.ops_per_sec for c in inside], "-", color="#54a24b",
                    lw=1.2, label=fit)
        if outside:
            # start the dotted part where the measured range ends, so the two parts join
            joined = inside[-1:] + outside
            ax.plot([c.workers for c in joined], [c.ops_per_sec for c in joined], ":", color="#54a24b",
                    lw=1.2, label=None if small else "USL extrapolated")
        if not small and usl.peak_workers is not None:
            ax.plot([usl.peak_workers], [usl.peak_throughput], "^", color="#54a24b", ms=5,
                    label="USL peak" + (" (extrapolated)" if usl.peak_extrapolated else ""))
    ax.plot(w, [p.ops_per_sec for p in pts], "o-", color="#4c78a8", ms=4 if small else 5, lw=1.5,
            label="measured", zorder=3)
    if exp.collapse:
        ax.axvline(exp.collapse.workers, color="#e45756", lw=1, ls=":")
        if not small:
            ax.annotate(f"collapse at {exp.collapse.workers}", (exp.collapse.workers, 0),
                        xytext=(3, 3), textcoords="offset points", color="#e45756", fontsize=7.5, ha="left",
                        va="bottom")
    xs = w + ([c.workers for c in curve] if curve else [])
    if small:
        ax.set_xticks(sorted(set(w)))
        ax.grid(False)
        ax.tick_params(labelsize=7.5)
        ax.yaxis.set_major_locator(MaxNLocator(3))
    else:
        _workers_axis(ax, w)
        ax.set_ylabel(f"throughput ({label(exp.unit, 20)})")
        ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(0, -0.18), ncol=2)
    ax.set_xlim(min(xs + [0.5]) - 0.3, max(xs) + 0.3)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    return _svg(fig)


def whatif(exp: Experiment) -> str | None:
    data = exp.whatif
    if isinstance(data, Unavailable) or not data.curve:
        return None
    pts = exp.points
    w = [p.workers for p in pts]
    fig, ax = plt.subplots(figsize=(4.8, 3.0))
    ax.plot(w, _ideal(exp), "--", color="#8a8a8a", lw=1, label="ideal")
    c = data.curve
    ax.plot([x.workers for x in c], [x.ops_per_sec for x in c], "s--", color="#f58518", ms=4, lw=1.2,
            label=label(data.label, 70))
    ax.plot(w, [p.ops_per_sec for p in pts], "o-", color="#4c78a8", ms=5, lw=1.5, label="measured", zorder=3)
    _workers_axis(ax, w + [x.workers for x in c])
    ax.set_ylabel(f"throughput ({label(exp.unit, 20)})")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(0, -0.18))
    return _svg(fig)


def cpu_breakdown(exp: Experiment) -> str:
    pts = exp.points
    fig, ax = plt.subplots(figsize=(3.6, 2.6))
    labels = [str(p.workers) for p in pts]
    bottom = [0.0] * len(pts)
    for part, color in CPU_PARTS:
        vals = [(getattr(p.cpu, part) or 0.0) * 100 for p in pts]
        if part in ("irq", "steal") and not any(v >= 0.05 for v in vals):
            continue                      # keep the legend to what is there
        ax.bar(labels, vals, bottom=bottom, color=color, label=part, width=0.6, edgecolor="white", lw=0.4)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("workers")
    ax.set_ylabel("% of the workers' CPU time")
    ax.set_ylim(0, 100)
    ax.grid(axis="x", visible=False)
    h, lab = ax.get_legend_handles_labels()
    ax.legend(h[::-1], lab[::-1], frameon=False, bbox_to_anchor=(1.0, 1.0), loc="upper left")
    return _svg(fig)


def _stacked_legend(ax, n: int) -> None:
    h, lab = ax.get_legend_handles_labels()
    if h:
        ax.legend(h[::-1], lab[::-1], frameon=False, loc="upper left", bbox_to_anchor=(0, -0.2 if n else -0.1),
                  fontsize=7.5)


def lock_share(exp: Experiment, top: int = TOP) -> str:
    """Share of worker time waiting on each lock, per point: the heaviest
    locks of the experiment by name, the rest as 'other locks'."""
    recs = exp.records
    totals: dict[str, float] = {}
    for r in recs:
        for lk in r.locks:
            totals[lk.name] = totals.get(lk.name, 0.0) + lk.wait_share
    names = sorted(totals, key=lambda n: -totals[n])[:top]
    fig, ax = plt.subplots(figsize=(3.6, 2.6))
    labels = [str(r.workers) for r in recs]
    bottom = [0.0] * len(recs)
    series = [(n, PALETTE[i % len(PALETTE)],
               [100 * sum(lk.wait_share for lk in r.locks if lk.name == n) for r in recs])
              for i, n in enumerate(names)]
    rest = [100 * sum(lk.wait_share for lk in r.locks if lk.name not in names) for r in recs]
    if any(v > 0 for v in rest):
        series.append((f"other locks ({len(totals) - len(names)})", OTHER, rest))
    for name, color, vals in series:
        ax.bar(labels, vals, bottom=bottom, color=color, label=label(name), width=0.6, edgecolor="white", lw=0.4)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("workers")
    ax.set_ylabel("% of worker time waiting on locks")
    ax.set_ylim(0, max(5.0, min(100.0, max(bottom, default=0) * 1.15)))
    ax.grid(axis="x", visible=False)
    if not series:
        ax.text(0.5, 0.5, "no lock waits recorded", transform=ax.transAxes, ha="center", color="#777")
    _stacked_legend(ax, len(series))
    return _svg(fig)


def attribution(exp: Experiment, top: int = TOP) -> str | None:
    """Lost capacity per point (worker-equivalents), stacked by the waits
    that explain it, and the unexplained remainder."""
    data = exp.points
    if not data:
        return None
    totals: dict[str, float] = {}
    for pt in data:
        for it in pt.attribution.items:
            totals[it.wait.name] = totals.get(it.wait.name, 0.0) + it.wait.worker_equivalents
    big = max(totals.values(), default=0.0)
    # named when it matters (>= 1% of the heaviest); the rest is "other waits"
    names = [n for n in sorted(totals, key=lambda n: -totals[n]) if totals[n] >= 0.01 * big][:top]
    fig, ax = plt.subplots(figsize=(4.8, 2.9))
    labels = [str(pt.workers) for pt in data]
    bottom = [0.0] * len(data)

    def we(pt, pred):
        return sum(it.wait.worker_equivalents for it in pt.attribution.items if pred(it.wait.name))

    series = [(n, PALETTE[i % len(PALETTE)], [we(pt, lambda x, n=n: x == n) for pt in data])
              for i, n in enumerate(names)]
    rest = [we(pt, lambda x: x not in names) for pt in data]
    if any(v > 0 for v in rest):
        series.append(("other waits", OTHER, rest))
    series.append(("unexplained", "#ffffff", [max(0.0, pt.attribution.unexplained or 0.0) for pt in data]))
    for name, color, vals in series:
        ax.bar(labels, vals, bottom=bottom, color=color, label=label(name), width=0.6,
               edgecolor="#999999" if name == "unexplained" else "white", lw=0.6,
               hatch="///" if name == "unexplained" else None)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.plot(labels, [pt.lost_capacity for pt in data], "_", color="black", ms=22, mew=1.5,
            label="lost capacity (ideal − speedup)")
    ax.set_xlabel("workers")
    ax.set_ylabel("worker-equivalents")
    top_y = max(bottom + [pt.lost_capacity for pt in data] + [0.1])
    ax.set_ylim(0, top_y * 1.15)
    ax.grid(axis="x", visible=False)
    _stacked_legend(ax, len(series))
    return _svg(fig)


def timeview(data: TimeView | Unavailable, top: int = TOP) -> str | None:
    if isinstance(data, Unavailable) or not data.t_s or not data.series:
        return None
    t = data.t_s
    series = sorted(data.series, key=lambda s: -sum(s.wait_share))
    shown, rest = series[:top], series[top:]
    fig, ax = plt.subplots(figsize=(7.2, 2.6))
    ys = [[100 * v for v in s.wait_share] for s in shown]
    labels = [label(s.name) for s in shown]
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(shown))]
    if rest:
        ys.append([100 * sum(s.wait_share[i] for s in rest) for i in range(len(t))])
        labels.append(f"other ({len(rest)})")
        colors.append(OTHER)
    # t_s are the ends of the intervals (analyzer/timeview.py): each value holds from the
    # previous end (0 for the first) to its own, so draw steps that end at each t
    end = t[-1]
    ax.stackplot([0.0] + list(t), *[y[:1] + y for y in ys], labels=labels, colors=colors, step="pre", lw=0)
    ax.set_xlabel("time in the timed window (s)")
    ax.set_ylabel("% of worker time waiting")
    ax.set_xlim(0.0, end)
    total = [sum(v) for v in zip(*ys)] if ys else [0]
    ax.set_ylim(0, max(5.0, min(100.0, max(total) * 1.15)))
    h, lab = ax.get_legend_handles_labels()
    ax.legend(h[::-1], lab[::-1], frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return _svg(fig)
