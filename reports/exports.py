"""Exports for papers (`lockscope export DIR`): per experiment, figures as
PDF and SVG (throughput against ideal with the USL fit; lock wait share per
point, stacked); the bottleneck table (workload, fs, collapse point,
root-cause lock, explained share; in the spirit of FxMark's Table 3) as CSV
and LaTeX (booktabs); the analysis JSON; and the raw run records, copied.
Every file is written atomically."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lockscope import atomicio  # noqa: E402

from lockscope.analyzer.analysis_json import to_json  # noqa: E402
from lockscope.analyzer.analyze import analyze, load_records  # noqa: E402
from lockscope.analyzer.attribution import WhatIf  # noqa: E402
from lockscope.analyzer.results import Experiment  # noqa: E402
from lockscope.analyzer.usl import UslFit  # noqa: E402

PALETTE = ["#e45756", "#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#bab0ac"]
TABLE_COLUMNS = ["workload", "fs", "collapse_workers", "speedup", "efficiency", "root_cause", "kind", "tier",
                 "wait_share", "explained_share"]
_LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                   "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                   "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


# ---- the bottleneck table ----------------------------------------------------

def bottleneck_rows(exps: list[Experiment]) -> list[dict]:
    """One row per experiment; the collapse columns are empty when it scales."""
    rows = []
    for e in exps:
        c, rc = e.collapse, e.root_cause
        at = e.point(c.workers) if c else None
        w = rc.wait if rc else None
        rows.append({
            "workload": e.workload, "fs": e.fs,
            "collapse_workers": c.workers if c else None,
            "speedup": at.speedup if at else None,
            "efficiency": at.efficiency if at else None,
            "root_cause": w.name if w else None,
            "kind": w.kind if w else None,
            "tier": w.tier if w else None,
            "wait_share": w.wait_share if w else None,
            "explained_share": rc.explained_share if rc else None,
        })
    return rows


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=TABLE_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r[k] is None else (f"{r[k]:.4f}" if isinstance(r[k], float) else r[k]))
                    for k in TABLE_COLUMNS})
    return buf.getvalue()


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in str(text))


def to_latex(rows: list[dict], caption: str = "Scalability bottlenecks found by lockscope.",
             label: str = "tab:lockscope-bottlenecks") -> str:
    """A booktabs table (\\usepackage{booktabs}); every string escaped."""
    def pct(x):
        return "--" if x is None else latex_escape(f"{x:.0%}")

    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             r"\begin{tabular}{llrrlr}", r"\toprule",
             r"Workload & FS & Collapse & Speedup & Root-cause lock & Explained \\", r"\midrule"]
    for r in rows:
        collapse = "--" if r["collapse_workers"] is None else f"{r['collapse_workers']}"
        speed = "--" if r["speedup"] is None else f"{r['speedup']:.2f}"
        cause = "--" if r["root_cause"] is None else (
            latex_escape(r["root_cause"]) + (f" ({latex_escape(r['kind'])}, {latex_escape(r['tier'])})"
                                             if r["kind"] and r["tier"] else ""))
        lines.append(f"{latex_escape(r['workload'])} & {latex_escape(r['fs'])} & {collapse} & {speed} & "
                     f"{cause} & {pct(r['explained_share'])} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}", f"\\caption{{{latex_escape(caption)}}}",
              f"\\label{{{latex_escape(label)}}}", r"\end{table}", ""]
    return "\n".join(lines)


# ---- figures -----------------------------------------------------------------

def _style() -> None:
    plt.rcParams.update({"svg.fonttype": "none", "pdf.fonttype": 42, "font.size": 8,
                         "axes.spines.top": False, "axes.spines.right": False, "svg.hashsalt": "lockscope"})


def throughput_figure(exp: Experiment):
    """Measured throughput, ideal scaling, the USL fit (dotted where it
    extrapolates), the collapse point."""
    _style()
    pts = exp.points
    w = [p.workers for p in pts]
    fig, ax = plt.subplots(figsize=(3.3, 2.2))
    if pts and pts[0].ops_per_sec > 0 and pts[0].ideal:
        per = pts[0].ops_per_sec / pts[0].ideal
        ax.plot(w, [per * p.ideal for p in pts], "--", color="#999999", lw=1, label="ideal")
    ax.plot(w, [p.ops_per_sec for p in pts], "o-", color="#4c78a8", ms=3, lw=1.2, label="measured")
    u = exp.usl
    if isinstance(u, UslFit):
        inside = [c for c in u.curve() if not c.extrapolated]
        beyond = [c for c in u.curve() if c.extrapolated]
        ax.plot([c.workers for c in inside], [c.ops_per_sec for c in inside], "-", color="#54a24b", lw=1,
                label=f"USL fit (R$^2$ {u.r2:.2f})")
        if beyond:
            ax.plot([c.workers for c in beyond], [c.ops_per_sec for c in beyond], ":", color="#54a24b", lw=1,
                    label="USL extrapolated")
    wi = exp.whatif
    if isinstance(wi, WhatIf) and wi.curve:
        ax.plot([c.workers for c in wi.curve], [c.ops_per_sec for c in wi.curve], "^:", ms=3,
                color="#f58518", lw=1, label="upper bound without the root cause")
    if exp.collapse:
        ax.axvline(exp.collapse.workers, color="#e45756", lw=0.8, ls=":")
    ax.set_xlabel("workers")
    ax.set_ylabel(exp.unit)
    ax.set_ylim(bottom=0)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    ax.set_title(exp.title, fontsize=8)
    ax.legend(frameon=False, fontsize=6)
    return fig


def lock_share_figure(exp: Experiment, top: int = 5):
    """Share of worker time in each of the heaviest waits, per point, stacked."""
    _style()
    pts = exp.points
    totals: dict[str, float] = {}
    for p in pts:
        for wt in p.waits:
            totals[wt.name] = totals.get(wt.name, 0.0) + wt.wait_share
    names = sorted(totals, key=lambda n: -totals[n])[:top]
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
    return fig


# ---- writing -----------------------------------------------------------------

def _save_figure(fig, base: Path) -> list[Path]:
    out = []
    for fmt in ("pdf", "svg"):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, bbox_inches="tight",
                    metadata={"CreationDate": None} if fmt == "pdf" else {"Date": None})
        path = base.with_suffix("." + fmt)
        atomicio.write_bytes(path, buf.getvalue())
        out.append(path)
    plt.close(fig)
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60] or "x"


def write_exports(results_dir: Path, out_dir: Path | None = None) -> list[Path]:
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir else results_dir / "exports"
    records = load_records(results_dir)
    exps = analyze(records)
    written: list[Path] = []
    for e in exps:
        base = out_dir / "figures" / f"{_slug(e.workload)}-{_slug(e.fs)}"
        written += _save_figure(throughput_figure(e), base.with_name(base.name + "-throughput"))
        written += _save_figure(lock_share_figure(e), base.with_name(base.name + "-lockshare"))
    rows = bottleneck_rows(exps)
    for name, text in (("bottlenecks.csv", to_csv(rows)), ("bottlenecks.tex", to_latex(rows)),
                       ("analysis.json", json.dumps(to_json(exps), indent=1) + "\n")):
        atomicio.write_bytes(out_dir / name, text.encode())
        written.append(out_dir / name)
    src = results_dir / "runs" if (results_dir / "runs").is_dir() else results_dir
    for f in sorted(src.glob("*.json")) if results_dir.is_dir() else [results_dir]:
        if f.name == "sweep.json":
            continue
        dest = out_dir / "runs" / f.name
        atomicio.write_bytes(dest, f.read_bytes())
        written.append(dest)
    return written
