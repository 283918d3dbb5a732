"""Figures of an experiment as inline SVG (matplotlib): throughput against
ideal scaling, CPU breakdown per point, lock wait share per point."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lockscope.analyzer.analyze import Experiment  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                     "axes.spines.right": False, "svg.hashsalt": "lockscope"})

CPU_PARTS = [("user", "#4c78a8"), ("sys", "#e45756"), ("irq", "#b279a2"), ("iowait", "#f58518"),
             ("steal", "#9d755d"), ("idle", "#dddddd")]
PALETTE = ["#e45756", "#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#bab0ac"]


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def throughput(exp: Experiment, small: bool = False) -> str:
    pts = exp.points
    w = [p.workers for p in pts]
    fig, ax = plt.subplots(figsize=(2.6, 1.6) if small else (4.6, 2.8))
    if pts and pts[0].ops_per_sec > 0:
        per_worker = pts[0].ops_per_sec / pts[0].ideal if pts[0].ideal else 0
        ax.plot(w, [per_worker * p.ideal for p in pts], "--", color="#999999", label="ideal")
    ax.plot(w, [p.ops_per_sec for p in pts], "o-", color="#4c78a8", label="measured")
    if exp.collapse:
        ax.axvline(exp.collapse["workers"], color="#e45756", lw=1, ls=":")
        if not small:
            ax.annotate("collapse", (exp.collapse["workers"], ax.get_ylim()[1]), color="#e45756",
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(w)
    ax.set_ylim(bottom=0)
    if not small:
        ax.set_xlabel("workers")
        ax.set_ylabel(exp.unit)
        ax.legend(frameon=False, loc="lower right")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    return _svg(fig)


def cpu_breakdown(exp: Experiment) -> str:
    pts = exp.points
    fig, ax = plt.subplots(figsize=(3.4, 2.4))
    labels = [str(p.workers) for p in pts]
    bottom = [0.0] * len(pts)
    for part, color in CPU_PARTS:
        vals = [p.cpu.get(part, 0.0) * 100 for p in pts]
        ax.bar(labels, vals, bottom=bottom, color=color, label=part, width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("workers")
    ax.set_ylabel("% of the workers' CPUs")
    ax.set_ylim(0, 100)
    ax.legend(frameon=False, fontsize=7, bbox_to_anchor=(1.0, 1.0), loc="upper left")
    return _svg(fig)


def lock_share(exp: Experiment, top: int = 5) -> str:
    """Share of worker time waiting, per point, for the heaviest waits."""
    pts = exp.points
    totals: dict[str, float] = {}
    for p in pts:
        for wt in p.waits:
            totals[wt["name"]] = totals.get(wt["name"], 0.0) + wt["wait_share"]
    names = sorted(totals, key=lambda n: -totals[n])[:top]
    fig, ax = plt.subplots(figsize=(3.4, 2.4))
    labels = [str(p.workers) for p in pts]
    bottom = [0.0] * len(pts)
    for i, name in enumerate(names):
        vals = [100 * next((wt["wait_share"] for wt in p.waits if wt["name"] == name), 0.0) for p in pts]
        short = name if len(name) <= 48 else name[:45] + "..."
        ax.bar(labels, vals, bottom=bottom, color=PALETTE[i % len(PALETTE)], label=short, width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("workers")
    ax.set_ylabel("% of worker time waiting")
    ax.set_ylim(0, max(5.0, max(bottom, default=0) * 1.15))
    if names:
        ax.legend(frameon=False, fontsize=6, bbox_to_anchor=(0.0, -0.3), loc="upper left")
    return _svg(fig)
