"""Every figure lockscope draws (matplotlib), in one module with one palette:

- the report's inline SVGs: throughput against ideal scaling (with the USL
  fit when there is one; small for the index), the what-if curve, CPU
  breakdown per point, lock wait share per point, attribution of lost
  capacity, and the time view of one run; each returns an SVG string, or
  None when the data for it is missing (the page then says why);
- the exports' figures for papers (`paper_throughput`, `paper_lock_share`),
  as PDF and SVG bytes;
- the throughput curves of `lockscope compare --html`.

The throughput figure is drawn by one function (`_throughput_lines`) with the
look of where it is shown. Each figure is drawn and saved under its own
matplotlib settings (`rc_context`): the global rcParams are never changed.
Labels from the system are escaped by matplotlib's SVG writer; `$` is
escaped here so that names are never read as mathtext."""
from __future__ import annotations

import functools
import io
from collections.abc import Iterable
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator  # noqa: E402

from lockscope.analyzer.attribution import WhatIf  # noqa: E402
from lockscope.analyzer.results import Experiment, TimeView, Unavailable  # noqa: E402
from lockscope.analyzer.usl import UslFit  # noqa: E402

REPORT_RC = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
             "svg.hashsalt": "lockscope", "axes.titlesize": 9, "legend.fontsize": 7.5, "axes.grid": True,
             "grid.color": "#ececec", "grid.linewidth": 0.6, "axes.axisbelow": True}
PAPER_RC = {"svg.fonttype": "none", "pdf.fonttype": 42, "font.size": 8, "axes.spines.top": False,
            "axes.spines.right": False, "svg.hashsalt": "lockscope"}
COMPARE_RC = {"svg.fonttype": "none", "font.size": 8, "svg.hashsalt": "lockscope"}

RED, BLUE, ORANGE, GREEN = "#e45756", "#4c78a8", "#f58518", "#54a24b"
PURPLE, BROWN = "#b279a2", "#9d755d"
PALETTE = [RED, BLUE, ORANGE, GREEN, PURPLE, BROWN, "#72b7b2", "#bab0ac"]
OTHER = "#c9c9c9"
CPU_PARTS = [("user", BLUE), ("sys", RED), ("irq", PURPLE), ("iowait", ORANGE), ("steal", BROWN),
             ("idle", "#dddddd")]
TOP = 5          # locks / attribution items shown by name; the rest is "other"
LABEL_MAX = 60
INLINE_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}


def label(s: str, n: int = LABEL_MAX) -> str:
    """A system string as a matplotlib label: no mathtext, bounded length."""
    s = str(s)
    s = s if len(s) <= n else s[:n - 1] + "…"
    return s.replace("$", r"\$")


def styled(rc: dict):
    """Draw and save the figure of the decorated function under the
    matplotlib settings `rc`."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with matplotlib.rc_context(rc):
                return fn(*args, **kwargs)
        return inner
    return wrap


def svg(fig, metadata: dict = INLINE_METADATA) -> str:
    """The figure as an SVG element to put inline in a page."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata=metadata)
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _files(fig) -> dict[str, bytes]:
    """The figure as PDF and SVG documents."""
    out = {}
    for fmt in ("pdf", "svg"):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, bbox_inches="tight",
                    metadata={"CreationDate": None} if fmt == "pdf" else {"Date": None})
        out[fmt] = buf.getvalue()
    plt.close(fig)
    return out


def _si(x: float, _pos=None) -> str:
    """A throughput tick with a unit prefix: 850, 12k, 1.5M (never an offset
    or scientific notation)."""
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            v = x / div
            return f"{v:.0f}{suf}" if v == int(v) or abs(v) >= 100 else f"{v:.3g}{suf}"
    return f"{x:.0f}" if x == int(x) else f"{x:.3g}"


def _count(x: float, _pos=None) -> str:
    return f"{x:.0f}"


MAX_FIXED_TICKS = 12


def _workers_axis(ax, workers: Iterable[float], xlabel: bool = True) -> None:
    """Integer ticks only on an axis of worker counts: the measured counts
    when there are few, else integers chosen by matplotlib."""
    if xlabel:
        ax.set_xlabel("workers")
    counts = sorted({int(w) for w in workers if w == int(w)})
    if 0 < len(counts) <= MAX_FIXED_TICKS:
        ax.xaxis.set_major_locator(FixedLocator(counts))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(_count))
    ax.xaxis.set_minor_locator(NullLocator())


def _throughput_axis(ax, unit: str | None, n: int = 30) -> None:
    """A throughput axis: unit prefixes on the ticks (850, 12k, 1.5M), the
    experiment's unit in the label."""
    unit = label(unit or "", n)
    ax.set_ylabel(f"throughput, {unit}" if "(" in unit else f"throughput ({unit})" if unit else "throughput")
    ax.yaxis.set_major_formatter(FuncFormatter(_si))


def _ideal(exp: Experiment) -> list[float]:
    p0 = exp.points[0]
    per_worker = p0.ops_per_sec / p0.ideal if p0.ideal else 0.0
    return [per_worker * p.ideal for p in exp.points]


# ---- throughput against ideal scaling ------------------------------------------

@dataclass(frozen=True)
class ThroughputLook:
    """How the throughput lines look where the figure is shown."""
    ideal: dict                   # line style and label of ideal scaling
    measured: dict                # line style of the measured points
    measured_first: bool          # drawn (and listed) before the USL fit
    usl_lw: float
    usl_label: str                # with {r2}
    extrapolated_label: str | None
    join_extrapolated: bool       # the dotted part starts where the measured range ends
    peak: bool                    # mark the USL's predicted peak
    whatif: bool                  # the upper bound without the root cause
    collapse_lw: float
    annotate_collapse: bool


REPORT_LOOK = ThroughputLook(
    ideal={"color": "#8a8a8a", "lw": 1, "label": "ideal (linear to the CPU count)"},
    measured={"ms": 5, "lw": 1.5, "zorder": 3}, measured_first=False, usl_lw=1.2,
    usl_label="USL fit (R² {r2:.3f})", extrapolated_label="USL extrapolated", join_extrapolated=True,
    peak=True, whatif=False, collapse_lw=1, annotate_collapse=True)
SMALL_LOOK = ThroughputLook(
    ideal=REPORT_LOOK.ideal, measured={"ms": 4, "lw": 1.5, "zorder": 3}, measured_first=False, usl_lw=1.2,
    usl_label=REPORT_LOOK.usl_label, extrapolated_label=None, join_extrapolated=True, peak=False,
    whatif=False, collapse_lw=1, annotate_collapse=False)
PAPER_LOOK = ThroughputLook(
    ideal={"color": "#999999", "lw": 1, "label": "ideal"}, measured={"ms": 3, "lw": 1.2}, measured_first=True,
    usl_lw=1, usl_label="USL fit (R$^2$ {r2:.2f})", extrapolated_label="USL extrapolated",
    join_extrapolated=False, peak=False, whatif=True, collapse_lw=0.8, annotate_collapse=False)


def _usl_lines(ax, fit: UslFit, look: ThroughputLook) -> list[float]:
    """The fitted curve, dotted where it extrapolates; its workers."""
    curve = fit.curve()
    inside = [c for c in curve if not c.extrapolated]
    outside = [c for c in curve if c.extrapolated]
    ax.plot([c.workers for c in inside], [c.ops_per_sec for c in inside], "-", color=GREEN, lw=look.usl_lw,
            label=look.usl_label.format(r2=fit.r2))
    if outside:
        joined = inside[-1:] + outside if look.join_extrapolated else outside
        ax.plot([c.workers for c in joined], [c.ops_per_sec for c in joined], ":", color=GREEN, lw=look.usl_lw,
                label=look.extrapolated_label)
    if look.peak and fit.peak_workers is not None:
        ax.plot([fit.peak_workers], [fit.peak_throughput], "^", color=GREEN, ms=5,
                label="USL peak" + (" (extrapolated)" if fit.peak_extrapolated else ""))
    return [c.workers for c in curve]


def _error(values: list[float], lows: list[float | None], highs: list[float | None]):
    """yerr for errorbar from intervals; None where no value has one."""
    if all(lo is None for lo in lows):
        return None
    return [[v - lo if lo is not None else 0.0 for v, lo in zip(values, lows)],
            [hi - v if hi is not None else 0.0 for v, hi in zip(values, highs)]]


def _measured(ax, pts, **style) -> None:
    """The measured throughput: medians with their 95% intervals as error
    bars where points were repeated."""
    w, y = [p.workers for p in pts], [p.ops_per_sec for p in pts]
    est = [p.est.get("ops_per_sec") for p in pts]
    yerr = _error(y, [e.low if e else None for e in est], [e.high if e else None for e in est])
    if yerr is None:
        ax.plot(w, y, "o-", color=BLUE, label="measured", **style)
        return
    n = max(p.repeats for p in pts)
    ax.errorbar(w, y, yerr=yerr, fmt="o-", color=BLUE, capsize=3, elinewidth=1,
                label=f"measured (median of {n}, 95% interval)", **style)


def _throughput_lines(ax, exp: Experiment, look: ThroughputLook) -> list[float]:
    """Ideal scaling, the measured points, the USL fit, the what-if bound
    and the collapse; returns the workers the lines cover."""
    pts = exp.points
    w = [p.workers for p in pts]
    xs = list(w)
    if pts and pts[0].ops_per_sec > 0:
        ax.plot(w, _ideal(exp), "--", **look.ideal)

    def measured():
        _measured(ax, pts, **look.measured)

    if look.measured_first:
        measured()
    if isinstance(exp.usl, UslFit):
        xs += _usl_lines(ax, exp.usl, look)
    if not look.measured_first:
        measured()
    if look.whatif and isinstance(exp.whatif, WhatIf) and exp.whatif.curve:
        c = exp.whatif.curve
        ax.plot([x.workers for x in c], [x.ops_per_sec for x in c], "^:", ms=3, color=ORANGE, lw=1,
                label="upper bound without the root cause")
    if exp.collapse:
        ax.axvline(exp.collapse.workers, color=RED, lw=look.collapse_lw, ls=":")
        if look.annotate_collapse:
            ax.annotate(f"collapse at {exp.collapse.workers}", (exp.collapse.workers, 0),
                        xytext=(3, 3), textcoords="offset points", color=RED, fontsize=7.5, ha="left",
                        va="bottom")
    return xs


@styled(REPORT_RC)
def throughput(exp: Experiment, small: bool = False) -> str:
    """The report's figure (small: the index's)."""
    w = [p.workers for p in exp.points]
    fig, ax = plt.subplots(figsize=(2.6, 1.5) if small else (4.8, 3.0))
    xs = _throughput_lines(ax, exp, SMALL_LOOK if small else REPORT_LOOK)
    _workers_axis(ax, w, xlabel=not small)
    if small:
        ax.grid(False)
        ax.tick_params(labelsize=7.5)
        ax.yaxis.set_major_locator(MaxNLocator(3))
    else:
        _throughput_axis(ax, exp.unit, 20)
        ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(0, -0.18), ncol=2)
    ax.set_xlim(min(xs + [0.5]) - 0.3, max(xs) + 0.3)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    return svg(fig)


@styled(PAPER_RC)
def paper_throughput(exp: Experiment) -> dict[str, bytes]:
    """Measured throughput, ideal scaling, the USL fit (dotted where it
    extrapolates), the what-if bound, the collapse point: PDF and SVG."""
    fig, ax = plt.subplots(figsize=(3.3, 2.2))
    _throughput_lines(ax, exp, PAPER_LOOK)
    _workers_axis(ax, [p.workers for p in exp.points])
    _throughput_axis(ax, exp.unit)
    ax.set_ylim(bottom=0)
    ax.set_title(label(exp.title), fontsize=8)
    ax.legend(frameon=False, fontsize=6)
    return _files(fig)


@styled(COMPARE_RC)
def compare_curves(e: dict) -> str:
    """Throughput of A and B at each worker count both measured (an
    experiment of the `lockscope.compare/1` document)."""
    fig, ax = plt.subplots(figsize=(3.6, 2.2))
    w = [c["workers"] for c in e["curve"]]
    ax.plot(w, [c["a"] for c in e["curve"]], "o-", color=BLUE, ms=3, label="A")
    ax.plot(w, [c["b"] for c in e["curve"]], "s-", color=RED, ms=3, label="B")
    _workers_axis(ax, w)
    units = dict.fromkeys(u for u in (e.get("unit"), e.get("unit_b")) if u)
    _throughput_axis(ax, " / ".join(units))
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False)
    return svg(fig, {"Date": None})


# ---- the rest of the report ------------------------------------------------------

@styled(REPORT_RC)
def whatif(exp: Experiment) -> str | None:
    data = exp.whatif
    if isinstance(data, Unavailable) or not data.curve:
        return None
    pts = exp.points
    w = [p.workers for p in pts]
    fig, ax = plt.subplots(figsize=(4.8, 3.0))
    ax.plot(w, _ideal(exp), "--", color="#8a8a8a", lw=1, label="ideal")
    c = data.curve
    yerr = _error([x.ops_per_sec for x in c], [x.low for x in c], [x.high for x in c])
    ax.errorbar([x.workers for x in c], [x.ops_per_sec for x in c], yerr=yerr, fmt="s--", color=ORANGE, ms=4,
                lw=1.2, capsize=3, label=label(data.label, 70))
    _measured(ax, pts, ms=5, lw=1.5, zorder=3)
    _workers_axis(ax, w + [x.workers for x in c])
    _throughput_axis(ax, exp.unit, 20)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(0, -0.18))
    return svg(fig)


@styled(REPORT_RC)
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
    return svg(fig)


def _heaviest(values: Iterable[tuple[str, float]], top: int | None = None) -> tuple[list[str], dict[str, float]]:
    """The `top` names of the largest sums of (name, value) pairs, and every
    name's sum."""
    totals: dict[str, float] = {}
    for name, v in values:
        totals[name] = totals.get(name, 0.0) + v
    return sorted(totals, key=lambda n: -totals[n])[:top], totals


def _stacked_legend(ax, n: int) -> None:
    h, lab = ax.get_legend_handles_labels()
    if h:
        ax.legend(h[::-1], lab[::-1], frameon=False, loc="upper left", bbox_to_anchor=(0, -0.2 if n else -0.1),
                  fontsize=7.5)


@styled(REPORT_RC)
def lock_share(exp: Experiment, top: int = TOP) -> str:
    """Share of worker time waiting on each lock, per point: the heaviest
    locks of the experiment by name, the rest as 'other locks'."""
    recs = exp.records
    names, totals = _heaviest(((lk.name, lk.wait_share) for r in recs for lk in r.locks), top)
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
    return svg(fig)


@styled(REPORT_RC)
def attribution(exp: Experiment, top: int = TOP) -> str | None:
    """Lost capacity per point (worker-equivalents), stacked by the waits
    that explain it, and the unexplained remainder."""
    data = exp.points
    if not data:
        return None
    ranked, totals = _heaviest(((it.wait.name, it.attributed)
                                for pt in data for it in pt.attribution.items))
    big = max(totals.values(), default=0.0)
    # named when it matters (>= 1% of the heaviest); the rest is "other waits"
    names = [n for n in ranked if totals[n] >= 0.01 * big][:top]
    fig, ax = plt.subplots(figsize=(4.8, 2.9))
    labels = [str(pt.workers) for pt in data]
    bottom = [0.0] * len(data)

    def we(pt, pred):
        return sum(it.attributed for it in pt.attribution.items if pred(it.wait.name))

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
    return svg(fig)


@styled(REPORT_RC)
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
    return svg(fig)


@styled(PAPER_RC)
def paper_lock_share(exp: Experiment, top: int = TOP) -> dict[str, bytes]:
    """Share of worker time in each of the heaviest waits, per point,
    stacked: PDF and SVG."""
    pts = exp.points
    names, _ = _heaviest(((wt.name, wt.wait_share) for p in pts for wt in p.waits), top)
    fig, ax = plt.subplots(figsize=(3.3, 2.4))
    labels = [str(p.workers) for p in pts]
    bottom = [0.0] * len(pts)
    for i, name in enumerate(names):
        vals = [100 * next((wt.wait_share for wt in p.waits if wt.name == name), 0.0) for p in pts]
        short = name if len(name) <= 52 else name[:49] + "..."
        ax.bar(labels, vals, bottom=bottom, color=PALETTE[i % len(PALETTE)], label=short, width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("workers")
    ax.set_ylabel("% of worker time waiting")
    ax.set_ylim(0, max(5.0, max(bottom, default=0) * 1.15))
    if names:
        ax.legend(frameon=False, fontsize=5.5, bbox_to_anchor=(0.0, -0.28), loc="upper left")
    return _files(fig)
