"""The figure of `lockscope confirm`: the workload's throughput against the
wait added per operation, inside the lock's critical sections and just
outside them (the control), with what a serial lock would give. Style and
palette from figures.py."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import EngFormatter

from lockscope.analyzer.confirmation import Confirmation
from .figures import BLUE, RED, REPORT_RC, label, styled, svg

GRAY = "#888888"


@styled(REPORT_RC)
def confirmation(c: Confirmation | None, unit: str = "ops/s") -> str | None:
    pts = (c.inside.points + c.outside.points) if c else []
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    most = max(p.added_per_op_ns for p in pts) / 1000
    xs = [most * i / 40 for i in range(41)]
    ax.plot(xs, [1 / (1 / c.base_ops_per_sec + x / 1e6) for x in xs], ls="--", color=GRAY, lw=1,
            label="a serial lock: 1/X grows by the wait")
    ax.axhline(c.base_ops_per_sec, color=GRAY, lw=0.8, ls=":", label="no wait added (median)")
    for pp, color, fill, text in ((c.inside.points, RED, RED, "inside the critical sections"),
                                  (c.outside.points, BLUE, "none", "just outside them (control)")):
        ax.scatter([p.added_per_op_ns / 1000 for p in pp], [p.ops_per_sec for p in pp], s=28, color=color,
                   facecolors=fill, label=text, zorder=3)
    ax.set_xlabel("wait added per operation (µs)")
    ax.set_ylabel(f"throughput ({unit})")
    ax.yaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_ylim(bottom=0)
    ax.set_title(label(f"{c.verdict}: {c.lock}", 70), fontsize=9)
    ax.legend(loc="lower left", fontsize=7, frameon=False)
    return svg(fig)
