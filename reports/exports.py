"""Exports for papers (`lockscope export DIR`): per experiment, figures as
PDF and SVG (throughput against ideal with the USL fit; lock wait share per
point, stacked); the bottleneck table (workload, fs, collapse point,
root-cause lock, explained share; in the spirit of FxMark's Table 3) as CSV
and LaTeX (booktabs); the analysis JSON; the raw run records, copied; and
per point with probe data its pprof profiles (mutex, off-CPU and CPU:
reports/pprof.py) in pprof/.
Every file is written atomically."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from lockscope import atomicio, validate
from lockscope.model import record
from lockscope.model.record import RUNS
from lockscope.analyzer.analysis_json import to_json
from lockscope.analyzer.analyze import analyze, load_confirmations, load_records
from lockscope.analyzer.results import Experiment
from . import figures, filenames, pprof

_LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                   "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                   "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


# ---- the bottleneck table ----------------------------------------------------

@dataclass
class BottleneckRow:
    """One experiment; the collapse columns are empty (None) when it scales."""
    workload: str
    fs: str
    collapse_workers: int | None = None
    speedup: float | None = None
    efficiency: float | None = None
    root_cause: str | None = None
    kind: str | None = None
    tier: str | None = None
    wait_share: float | None = None
    explained_share: float | None = None
    confirmed: str | None = None       # `lockscope confirm`'s verdict on the root-cause lock; None: not tested
    # sweep --repeat K: the runs per point, the 95% intervals of the collapse point's
    # speedup and efficiency (empty with one run), the repeats the root cause came first in
    repeats: int = 1
    speedup_low: float | None = None
    speedup_high: float | None = None
    efficiency_low: float | None = None
    efficiency_high: float | None = None
    root_cause_first_in: int | None = None


TABLE_COLUMNS = [f.name for f in fields(BottleneckRow)]
TEX_VERDICT = {"confirmed": "yes", "not confirmed": "no", "inconclusive": "?"}


def bottleneck_row(e: Experiment) -> BottleneckRow:
    row = BottleneckRow(e.workload, e.fs, repeats=e.repeats)
    if e.collapse:
        at = e.point(e.collapse.workers)
        row.collapse_workers, row.speedup, row.efficiency = e.collapse.workers, at.speedup, at.efficiency
        sp, ef = at.est.get("speedup"), at.est.get("efficiency")
        if sp is not None and sp.has_interval:
            row.speedup_low, row.speedup_high = sp.low, sp.high
        if ef is not None and ef.has_interval:
            row.efficiency_low, row.efficiency_high = ef.low, ef.high
    if e.root_cause and e.collapse:       # an undecided point's top wait is no root cause in the table
        w = e.root_cause.wait
        row.root_cause, row.kind, row.tier, row.wait_share = w.name, w.kind, w.tier, w.wait_share
        row.explained_share = e.root_cause.explained_share
        row.root_cause_first_in = e.root_cause.first_in if e.root_cause.repeats > 1 else None
        if e.confirmation and e.confirmation.lock == w.name:
            row.confirmed = e.confirmation.verdict
    return row


def to_csv(rows: list[BottleneckRow]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=TABLE_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else (f"{v:.4f}" if isinstance(v, float) else v))
                    for k, v in asdict(r).items()})
    return buf.getvalue()


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in str(text))


def to_latex(rows: list[BottleneckRow], caption: str = "Scalability bottlenecks found by lockscope.",
             label: str = "tab:lockscope-bottlenecks") -> str:
    """A booktabs table (\\usepackage{booktabs}); every string escaped. The
    root-cause column wraps (ragged right) at a third of the line width, so
    that the table fits the text width of a one-column article."""
    def pct(x):
        return "--" if x is None else latex_escape(f"{x:.0%}")

    lines = [r"\begin{table}[t]", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}",
             r"\begin{tabular}{llrrp{0.26\linewidth}rl}", r"\toprule",
             r"Workload & FS & Collapse & Speedup & Root-cause lock & Explained & Conf.\textsuperscript{a} \\", r"\midrule"]
    for r in rows:
        collapse = "--" if r.collapse_workers is None else f"{r.collapse_workers}"
        speed = "--" if r.speedup is None else f"{r.speedup:.2f}" + (
            f" [{r.speedup_low:.2f}--{r.speedup_high:.2f}]" if r.speedup_low is not None else "")
        cause = "--" if r.root_cause is None else r"\raggedright " + (
            latex_escape(r.root_cause) + (f" ({latex_escape(r.kind)}, {latex_escape(r.tier)})"
                                          if r.kind and r.tier else ""))
        lines.append(f"{latex_escape(r.workload)} & {latex_escape(r.fs)} & {collapse} & {speed} & "
                     f"{cause} & {pct(r.explained_share)} & {TEX_VERDICT.get(r.confirmed, '--')} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}",
              r"\par\footnotesize\textsuperscript{a}\,by delay injection (\texttt{lockscope confirm}): "
              r"yes, no, or ? (inconclusive); -- not tested. Speedups in brackets: 95\,\% intervals over repeated runs", f"\\caption{{{latex_escape(caption)}}}",
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
    validate.check_writable_dir(out_dir, "exports directory")
    exps = analyze(records, load_confirmations(results_dir))
    written: list[Path] = []
    for e in exps:
        written += _write_figures(e, out_dir)
    for rec in records:
        if rec.probe.attached and rec.probe.raw is not None:
            written += pprof.write(rec, out_dir)
    rows = [bottleneck_row(e) for e in exps]
    for name, text in (("bottlenecks.csv", to_csv(rows)), ("bottlenecks.tex", to_latex(rows)),
                       ("analysis.json", json.dumps(to_json(exps), indent=1) + "\n")):
        atomicio.write_bytes(out_dir / name, text.encode())
        written.append(out_dir / name)
    src = results_dir / RUNS if (results_dir / RUNS).is_dir() else results_dir
    for f in sorted(src.glob("*.json")) if results_dir.is_dir() else [results_dir]:
        if f.name == "sweep.json":
            continue
        try:
            record.load(f)
        except (ValueError, OSError):
            continue              # skipped with a warning by load_records
        dest = out_dir / RUNS / f.name
        atomicio.write_bytes(dest, f.read_bytes())
        written.append(dest)
    return written
