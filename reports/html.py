"""The HTML report: one self-contained page (no network, no scripts) with an
index of experiments and, per experiment, the diagnosis, throughput against
ideal, CPU breakdown, lock wait shares, and the top locks of every point with
their stacks. Every string from the system is escaped (Jinja2 autoescape)."""
from __future__ import annotations

import datetime
from pathlib import Path

import jinja2

from lockscope import __version__, record
from lockscope.analyzer import scaling
from lockscope.analyzer.analyze import analyze, load_records
from lockscope.reports import figures

TIER_HELP = {
    "verified": "the address is a lock field of an object lockscope reached (file, directory, superblock, mm)",
    "inferred": "named by a rule of the lock knowledge base from the lock type and the stack",
    "site": "lock type and the first function outside the locking code",
}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("lockscope", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = lambda x, d=1: f"{(x or 0) * 100:.{d}f}%"
    env.filters["num"] = lambda x: "-" if x is None else f"{x:,.0f}"
    env.filters["ms"] = lambda ns: f"{(ns or 0) / 1e6:,.2f} ms"
    env.filters["us"] = lambda ns: f"{(ns or 0) / 1e3:,.1f} µs"
    return env


def render(results_dir: Path) -> str:
    exps = analyze(load_records(results_dir))
    views = []
    for i, e in enumerate(exps):
        views.append({
            "anchor": f"exp{i}",
            "exp": e,
            "small": figures.throughput(e, small=True),
            "throughput": figures.throughput(e),
            "cpu": figures.cpu_breakdown(e),
            "locks": figures.lock_share(e),
        })
    host = exps[0].records[0].host if exps and exps[0].records else {}
    first = exps[0].records[0] if exps and exps[0].records else None
    return _env().get_template("report.html.j2").render(
        title=f"lockscope report: {Path(results_dir).resolve().name}",
        views=views, host=host, cpi=first.cpi if first else {}, rule=scaling.RULE, tiers=TIER_HELP,
        version=__version__, schema=record.SCHEMA,
        generated=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def write_report(results_dir: Path, out_dir: Path | None = None) -> Path:
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir else results_dir / "report"
    html = render(results_dir)
    path = out_dir / "index.html"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(html)
    tmp.replace(path)
    return path
