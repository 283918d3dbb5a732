"""`lockscope compare A B`: two results directories (before/after a kernel
patch, two file systems, two machines), experiment by experiment: the change
in throughput at each worker count both measured, in speedup and collapse,
and in each wait's share of worker time. Experiments are matched by workload
and file system, or (--fs-a X --fs-b Y) file system X of A against Y of B.
Output as text, JSON (`lockscope.compare/1`) or one offline HTML page."""
from __future__ import annotations

import re
from pathlib import Path

import jinja2

from lockscope import __version__
from lockscope.model.record import NO_FS
from lockscope.analyzer import attribution
from lockscope.analyzer.analyze import analyze, load_records
from lockscope.analyzer.results import Experiment
from lockscope.errors import UsageError
from . import templating

COMPARE_SCHEMA = "lockscope.compare/1"
TOP_WAITS = 10
MIN_SHARE = 0.0005      # waits below 0.05% of worker time on both sides at every point are left out


def _norm(name: str, fs: str) -> str:
    """A wait's name with its file system's name taken out, so that the same
    lock of two file systems matches."""
    return re.sub(rf"\b{re.escape(fs)}\b", "<fs>", name) if fs and fs != NO_FS else name


def pair(exps_a: list[Experiment], exps_b: list[Experiment], fs_a: str | None = None, fs_b: str | None = None,
         workload: str | None = None) -> tuple[list[tuple[Experiment, Experiment]], list[str], list[str]]:
    """Matched (a, b) experiments, and the keys left unmatched on each side."""
    def key(e: Experiment, side_fs: str | None) -> tuple | None:
        if workload and e.workload != workload:
            return None
        if side_fs is not None:
            return (e.workload,) if e.fs == side_fs else None
        return (e.workload, e.fs)

    ka = {k: e for e in exps_a if (k := key(e, fs_a if (fs_a or fs_b) else None)) is not None}
    kb = {k: e for e in exps_b if (k := key(e, fs_b if (fs_a or fs_b) else None)) is not None}
    pairs = [(ka[k], kb[k]) for k in sorted(ka) if k in kb]
    name = lambda e: f"{e.workload} on {e.fs}"  # noqa: E731
    return pairs, [name(ka[k]) for k in sorted(ka) if k not in kb], [name(kb[k]) for k in sorted(kb) if k not in ka]


def compare_pair(a: Experiment, b: Experiment) -> dict:
    pa = {p.workers: p for p in a.points}
    pb = {p.workers: p for p in b.points}
    ra = {r.workers: r for r in a.records}
    rb = {r.workers: r for r in b.records}
    common = sorted(set(pa) & set(pb))
    curve = []
    for w in common:
        xa, xb = pa[w].ops_per_sec, pb[w].ops_per_sec
        curve.append({"workers": w, "a": xa, "b": xb, "ratio": xb / xa if xa else None,
                      "change": xb / xa - 1 if xa else None,
                      "speedup_a": pa[w].speedup, "speedup_b": pb[w].speedup,
                      "efficiency_a": pa[w].efficiency, "efficiency_b": pb[w].efficiency})
    waits: dict[str, dict] = {}
    for w in common:
        for side, rec, fs in (("a", ra[w], a.fs), ("b", rb[w], b.fs)):
            for name, wt in attribution.waits(rec).items():
                k = _norm(name, fs)
                entry = waits.setdefault(k, {"name": name, "type": wt.type, "points": {}})
                entry["points"].setdefault(w, {"workers": w, "a": 0.0, "b": 0.0})[side] = wt.wait_share
    rows = []
    for k, entry in waits.items():
        pts = [entry["points"][w] for w in common if w in entry["points"]]
        for p in pts:
            p["delta"] = p["b"] - p["a"]
        if max(max(p["a"], p["b"]) for p in pts) < MIN_SHARE:
            continue
        name = entry["name"] if a.fs == b.fs or "<fs>" not in k else k.replace("<fs>", f"{a.fs}/{b.fs}")
        rows.append({"name": name, "key": k, "type": entry["type"], "points": pts,
                     "max_abs_delta": max(abs(p["delta"]) for p in pts)})
    rows.sort(key=lambda r: -r["max_abs_delta"])
    def cause(e):
        rc = e.root_cause
        return None if not rc else {"name": rc.wait.name, "wait_share": rc.wait.wait_share,
                                    "explained_share": rc.explained_share}
    return {"workload": a.workload, "fs_a": a.fs, "fs_b": b.fs, "unit": a.unit, "unit_b": b.unit,
            "workers": common,
            "only_a": sorted(set(pa) - set(pb)), "only_b": sorted(set(pb) - set(pa)),
            "curve": curve,
            "collapse_a": a.collapse.workers if a.collapse else None,
            "collapse_b": b.collapse.workers if b.collapse else None,
            "root_cause_a": cause(a), "root_cause_b": cause(b),
            "waits": rows[:TOP_WAITS]}


def compare(dir_a: Path, dir_b: Path, fs_a: str | None = None, fs_b: str | None = None,
            workload: str | None = None) -> dict:
    if (fs_a is None) != (fs_b is None):
        raise UsageError("--fs-a and --fs-b go together", "give both, e.g. --fs-a tmpfs --fs-b ext4")
    ea, eb = analyze(load_records(dir_a)), analyze(load_records(dir_b))
    pairs, only_a, only_b = pair(ea, eb, fs_a, fs_b, workload)
    if not pairs:
        raise UsageError(f"no experiment of {dir_a} matches one of {dir_b}",
                         "experiments match by workload and file system; use --fs-a/--fs-b to compare two "
                         "file systems, --workload to choose one")
    return {"schema": COMPARE_SCHEMA, "a": str(dir_a), "b": str(dir_b),
            "experiments": [compare_pair(a, b) for a, b in pairs], "unmatched_a": only_a, "unmatched_b": only_b}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def render_text(doc: dict) -> str:
    out = [f"A: {doc['a']}", f"B: {doc['b']}", ""]
    for e in doc["experiments"]:
        same = e["fs_a"] == e["fs_b"]
        out.append(f"{e['workload']} on {e['fs_a']}" + ("" if same else f" (A) vs {e['fs_b']} (B)"))
        out.append(f"  {'workers':>7}  {'A ' + e['unit']:>18}  {'B ' + e['unit_b']:>18}  {'change':>8}  speedup A -> B")
        for c in e["curve"]:
            out.append(f"  {c['workers']:>7}  {c['a']:>18,.0f}  {c['b']:>18,.0f}  {_pct(c['change']):>8}  "
                       f"{c['speedup_a']:.2f} -> {c['speedup_b']:.2f}")
        if e["only_a"] or e["only_b"]:
            out.append(f"  measured only in A: {e['only_a'] or '-'}; only in B: {e['only_b'] or '-'}")
        col = lambda w: f"at {w} workers" if w else "none"  # noqa: E731
        out.append(f"  collapse: A {col(e['collapse_a'])}, B {col(e['collapse_b'])}")
        for side in ("a", "b"):
            rc = e[f"root_cause_{side}"]
            if rc:
                out.append(f"  root cause {side.upper()}: {rc['name']} ({rc['wait_share']:.1%} of worker time, "
                           f"explains {rc['explained_share']:.0%} of the lost capacity)")
        if e["waits"]:
            out.append("  wait share of worker time, A -> B (change in points):")
            for r in e["waits"]:
                per = "; ".join(f"{p['workers']}: {p['a']:.1%} -> {p['b']:.1%} ({100 * p['delta']:+.1f})"
                                for p in r["points"])
                out.append(f"    {r['name']}  {per}")
        out.append("")
    for side in ("a", "b"):
        if doc[f"unmatched_{side}"]:
            out.append(f"only in {side.upper()}: " + ", ".join(doc[f"unmatched_{side}"]))
    return "\n".join(out).rstrip() + "\n"


def render_html(doc: dict) -> str:
    env = templating.environment()
    env.filters["spct"] = _pct
    from . import figures      # matplotlib: only for the page

    figs = [jinja2.utils.markupsafe.Markup(figures.compare_curves(e)) for e in doc["experiments"]]
    return env.get_template("compare.html.j2").render(doc=doc, figs=figs, version=__version__)
