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
from pathlib import Path

from lockscope import atomicio
from lockscope.analyzer.analysis_json import to_json
from lockscope.analyzer.analyze import analyze, load_records
from lockscope.analyzer.results import Experiment
from lockscope.reports import figures, filenames

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


# ---- writing -----------------------------------------------------------------

def _write_figures(e: Experiment, out_dir: Path) -> list[Path]:
    """The experiment's throughput and lock-share figures, PDF and SVG each."""
    base = filenames.experiment(e.workload, e.fs, filenames.EXPORT)
    out = []
    for what, files in (("throughput", figures.paper_throughput(e)), ("lockshare", figures.paper_lock_share(e))):
        for fmt, data in files.items():
            path = out_dir / "figures" / f"{base}-{what}.{fmt}"
            atomicio.write_bytes(path, data)
            out.append(path)
    return out


def write_exports(results_dir: Path, out_dir: Path | None = None) -> list[Path]:
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir else results_dir / "exports"
    records = load_records(results_dir)
    exps = analyze(records)
    written: list[Path] = []
    for e in exps:
        written += _write_figures(e, out_dir)
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
