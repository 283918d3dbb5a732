"""The figures of who did what in one point: each role's time split
(roles) and the wait-for graph between roles (wait_for). Style and palette
from figures.py."""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch

from .figures import BLUE, BROWN, ORANGE, OTHER, PURPLE, RED, REPORT_RC, label, styled, svg


ROLE_KINDS = [("on_cpu_ns", "on CPU", BLUE), ("lock_ns", "lock waits", RED), ("preempted_ns", "preempted", BROWN),
              ("io_ns", "block I/O", ORANGE), ("storage_ns", "page/journal", PURPLE),
              ("other_ns", "other waits", "#72b7b2"), ("idle_ns", "idle", "#dddddd")]


@styled(REPORT_RC)
def roles(rec, top: int = 8) -> str | None:
    """The time of each role of one point, in worker-equivalents (time over
    the window), split by what its threads did; worker roles first."""
    if not rec.roles or rec.probe.window_s <= 0:
        return None
    rs = rec.roles[:top]
    window = rec.probe.window_s * 1e9
    fig, ax = plt.subplots(figsize=(5.6, 0.45 + 0.34 * len(rs)))
    names = [label(("● " if r.worker else "") + r.name, 32) for r in rs][::-1]
    left = [0.0] * len(rs)
    for attr, text, color in ROLE_KINDS:
        vals = [getattr(r, attr) / window for r in rs][::-1]
        ax.barh(names, vals, left=left, color=color, label=text, height=0.6, edgecolor="white", lw=0.5)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlabel("worker-equivalents (● counted as the measured work)")
    ax.grid(axis="y", visible=False)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 - 0.5 / len(rs)), ncol=4, frameon=False)
    return svg(fig)


@styled(REPORT_RC)
def wait_for(rec, top: int = 10) -> str | None:
    """The wait-for graph of one point: roles as nodes on a circle, an arrow
    from the role that woke to the role it woke, as wide as the sleep time
    those wake-ups ended (a loop: threads of one role waking each other).
    None with fewer than two roles: one role waking itself is no graph (the
    wake-ups table says it)."""
    edges = [e for e in rec.wait_for if e.wait_ns > 0][:top]
    if not edges:
        return None
    nodes: list[str] = []
    for e in edges:
        for n in (e.waker, e.wakee):
            if n not in nodes:
                nodes.append(n)
    if len(nodes) < 2:
        return None
    workers = rec.worker_roles
    pos = {n: (math.cos(2 * math.pi * i / len(nodes) + math.pi / 2), math.sin(2 * math.pi * i / len(nodes) + math.pi / 2))
           for i, n in enumerate(nodes)} if len(nodes) > 1 else {nodes[0]: (0.0, 0.0)}
    heaviest = max(e.wait_ns for e in edges)
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    for e in edges:
        w = 0.6 + 5.0 * e.wait_ns / heaviest
        a, b = pos[e.waker], pos[e.wakee]
        text = f"{e.wait_ns / 1e9 / rec.probe.window_s:.2f}" if rec.probe.window_s else ""
        if e.waker == e.wakee:
            ax.add_patch(plt.Circle((a[0] * 1.22, a[1] * 1.22), 0.12, fill=False, lw=w, color=RED, alpha=0.6))
            ax.annotate(text, (a[0] * 1.42, a[1] * 1.42), ha="center", va="center", fontsize=7)
            continue
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=10 + w * 2, lw=w,
                                     connectionstyle="arc3,rad=0.15", color=BLUE, alpha=0.6,
                                     shrinkA=18, shrinkB=18))
        mid = ((a[0] + b[0]) / 2 + 0.08 * (b[1] - a[1]), (a[1] + b[1]) / 2 - 0.08 * (b[0] - a[0]))
        ax.annotate(text, mid, ha="center", va="center", fontsize=7)
    for n, (x, y) in pos.items():
        ax.scatter([x], [y], s=260, color=RED if n in workers else OTHER, zorder=3, edgecolor="white")
        ax.annotate(label(n, 28), (x, y - 0.2), ha="center", va="top", fontsize=7.5)
    ax.set_xlim(-1.7, 1.7)
    ax.set_ylim(-1.7, 1.7)
    ax.set_aspect("equal")
    ax.axis("off")
    return svg(fig)
