"""The HTML report of a results directory, written to DIR/report/:

- index.html: every experiment of the sweep (workload x fs) with a small
  scaling plot, its collapse, root cause and diagnosis, linking to
- <workload>-<fs>.html: one page per experiment: throughput against ideal
  (with the USL fit), what-if, CPU breakdown, lock wait share, attribution of
  lost capacity, time view, the points with CPI and named share, the top
  locks of every point with their stacks, flame graphs, and the diagnosis
  with its evidence;
- flame/: folded stacks and their flame graphs (reports/flamegraph.py).

Offline: figures are inline SVG, no scripts or styles from elsewhere (flame
graphs carry their own script in their own SVG document). Every string from
the system is escaped (Jinja2 autoescape; matplotlib and inferno escape the
text of their SVGs). A part of the analysis that could not be computed is
shown as "not available: <reason>"."""
from __future__ import annotations

import datetime
import shlex
from pathlib import Path

from lockscope import __version__, atomicio, validate
from lockscope.model import record
from lockscope.analyzer import intervals, scaling
from lockscope.analyzer.analyze import analyze, load_confirmations, load_records
from lockscope.analyzer.results import Experiment
from . import confirmfigure, figures, filenames, flamegraph, rolefigures, templating

TIER_HELP = {
    "verified": "the address is a lock field of an object lockscope reached (file, directory, superblock, mm)",
    "inferred": "named by a rule of the lock knowledge base from the lock type and the stack",
    "site": "lock type and the first function outside the locking code",
}
TOP_LOCKS = 10


def page_name(exp: Experiment) -> str:
    return filenames.experiment(exp.workload, exp.fs, filenames.PAGE)


def command_line(exp: Experiment) -> str | None:
    """The command of a command experiment as a shell would read it, at its
    last point ({n} already replaced by that point's worker count)."""
    last = exp.records[-1] if exp.records else None
    if exp.kind != "command" or last is None or not last.command:
        return None
    return f"{shlex.join(last.command)}  (at {last.workers} worker{'s' if last.workers != 1 else ''})"


def roles_view(exp: Experiment) -> dict:
    """The roles of the point in focus (the collapse point, else the last):
    their time split, which were counted as the work and why, and the
    wait-for graph between them."""
    none = {"roles_rec": None, "roles_fig": None, "wait_for_fig": None, "worker_roles": []}
    if not exp.points:
        return none
    rec = next((r for r in exp.records if r.workers == exp.focus().workers), exp.records[-1])
    if not rec.roles:
        return none
    return {"roles_rec": rec, "roles_fig": rolefigures.roles(rec), "wait_for_fig": rolefigures.wait_for(rec),
            "worker_roles": [r.name for r in rec.roles if r.worker]}


def _view(exp: Experiment, out_dir: Path, renderer, name: str) -> dict:
    return {
        "exp": exp, "page": f"{name}.html", "name": name, "title": exp.title, "command": command_line(exp),
        "small": figures.throughput(exp, small=True),
        "throughput": figures.throughput(exp),
        "cpu": figures.cpu_breakdown(exp),
        "locks": figures.lock_share(exp),
        "whatif": figures.whatif(exp),
        "attribution": figures.attribution(exp),
        "attribution_at": exp.focus() if exp.points else None,
        "attribution_missing": None if exp.points else "no points",
        "timeview": figures.timeview(exp.timeview),
        "confirmation": confirmfigure.confirmation(exp.confirmation, exp.unit),
        **roles_view(exp),
        "flames": flamegraph.write(exp, out_dir, name, exe=renderer, find=False),
    }


def _common() -> dict:
    return {"rule": scaling.RULE, "tiers": TIER_HELP, "version": __version__, "schema": record.SCHEMA,
            "top_locks": TOP_LOCKS, "renderer": flamegraph.RENDERER,
            "interval_method": intervals.METHOD, "no_interval": intervals.NO_INTERVAL,
            "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def write_report(results_dir: Path, out_dir: Path | None = None) -> Path:
    """Write the index, one page per experiment and the flame graphs; return
    the path of index.html."""
    results_dir = Path(results_dir)
    exps = analyze(load_records(results_dir), load_confirmations(results_dir))
    out_dir = Path(out_dir) if out_dir else results_dir / "report"
    validate.check_writable_dir(out_dir, "report directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    renderer = flamegraph.renderer()
    names: list[str] = []
    for e in exps:                       # distinct file names even when two names make one slug
        n = page_name(e)
        names.append(n if n not in names else f"{n}-{len(names)}")
    views = [_view(e, out_dir, renderer, n) for e, n in zip(exps, names)]
    first = exps[0].records[0] if exps and exps[0].records else None
    common = {**_common(), "host": first.host if first else record.Host(),
              "sweep": Path(results_dir).resolve().name, "views": views,
              "renderer_missing": None if renderer else flamegraph.MISSING}
    env = templating.environment()
    for v in views:
        atomicio.write_text(out_dir / v["page"], env.get_template("experiment.html.j2").render(
            **common, v=v, title=f"{v['title']}: lockscope report {common['sweep']}"))
    path = out_dir / "index.html"
    atomicio.write_text(path, env.get_template("index.html.j2").render(**common, title=f"lockscope report: {common['sweep']}"))
    return path
