"""Flame graphs of an experiment: folded stacks (analyzer/folded.py) written
as `.folded` files next to the report, rendered to interactive SVG (zoom,
search) by inferno (`cargo install inferno`: `inferno-flamegraph`).

Graphs are made for the collapse point (or the last point when the curve
does not collapse) and for the 1-worker point. Without the renderer the
`.folded` files are still written and the page says why there is no SVG."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from lockscope import atomicio

from lockscope.analyzer import folded
from lockscope.analyzer.results import Experiment
from lockscope.model.record import RunRecord

RENDERER = "inferno-flamegraph"
MISSING = f"{RENDERER} not found (run make deps / cargo install inferno)"
COLORS = {"cpu": "hot", "offcpu": "io", "lockwait": "red", "holders": "orange"}
TIMEOUT_S = 120


def renderer() -> Path | None:
    """inferno-flamegraph on PATH, or where `cargo install` puts it."""
    found = shutil.which(RENDERER)
    if found:
        return Path(found)
    homes = [os.environ.get("CARGO_HOME"), Path.home() / ".cargo",
             os.path.expanduser(f"~{os.environ.get('SUDO_USER', '')}/.cargo") if os.environ.get("SUDO_USER") else None]
    for home in homes:
        if home:
            p = Path(home) / "bin" / RENDERER
            if p.is_file() and os.access(p, os.X_OK):
                return p
    return None


@dataclass
class Graph:
    kind: str                    # cpu | offcpu | lockwait | holders
    title: str
    unit: str                    # samples | us
    total: int                   # sum of the folded counts
    stacks: int                  # folded lines
    folded: str                  # file name, relative to the report directory
    svg: str | None = None       # file name, or None with the reason
    height: int = 0              # of the SVG, for the embedding frame
    reason: str | None = None
    rate_hz: int | None = None   # cpu: samples per second per CPU (`--sample-hz`), when recorded


@dataclass
class PointGraphs:
    workers: int
    role: str                    # "collapse point", "last point", "1 worker"
    record_id: str
    graphs: list[Graph] = field(default_factory=list)


def points_for(exp: Experiment) -> list[tuple[str, RunRecord]]:
    """(role, record): the collapse point (or the last point), and the
    1-worker point when it was measured and is a different point."""
    recs = exp.records
    if not recs:
        return []
    out = []
    if exp.collapse:
        main = next((r for r in recs if r.workers == exp.collapse.workers), recs[-1])
        out.append(("collapse point", main))
    else:
        main = recs[-1]
        out.append(("last point", main))
    one = next((r for r in recs if r.workers == 1), None)
    if one is not None and one is not main:
        out.append(("1 worker", one))
    return out


def sample_rate_hz(rec: RunRecord) -> int | None:
    """The point's CPU samples per second per CPU, from its sample period;
    None without samples (`--sample-hz 0`, no probe, an older record)."""
    raw = rec.probe.raw
    period = raw.sample_period_ns if raw else 0
    return round(1e9 / period) if period else None


def _svg_height(svg: bytes) -> int:
    m = re.search(rb'<svg[^>]*\sheight="(\d+)', svg[:4096])
    return int(m.group(1)) if m else 600


def render_svg(folded_text: str, title: str, unit: str, colors: str, exe: Path) -> tuple[bytes | None, str | None]:
    """Run inferno on folded stacks: (svg, None) or (None, reason)."""
    cmd = [str(exe), "--title", title, "--countname", unit, "--colors", colors, "--hash", "--minwidth", "0.1"]
    try:
        p = subprocess.run(cmd, input=folded_text.encode(), capture_output=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{RENDERER} failed: {e}"
    if p.returncode != 0 or b"<svg" not in p.stdout:
        err = p.stderr.decode(errors="replace").strip().splitlines()
        return None, f"{RENDERER} failed (exit {p.returncode}): {err[-1] if err else 'no output'}"
    return p.stdout, None


def write(exp: Experiment, out_dir: Path, prefix: str, exe: Path | None = None,
          find: bool = True) -> list[PointGraphs]:
    """Write the folded stacks and flame graphs of an experiment into
    out_dir/flame/ and return what the page shows."""
    exe = exe or (renderer() if find else None)
    fdir = Path(out_dir) / "flame"
    fdir.mkdir(parents=True, exist_ok=True)
    on = exp.title
    result = []
    for role, rec in points_for(exp):
        pg = PointGraphs(rec.workers, role, rec.id)
        for kind, (what, unit) in folded.KINDS.items():
            if kind == "holders" and not any(lk.holders for lk in rec.locks):
                continue                  # a record before holders, or no release ended a wait
            stacks = folded.fold(rec, kind)
            base = f"{prefix}-w{rec.workers}-{kind}"
            text = folded.text(stacks)
            atomicio.write_bytes(fdir / f"{base}.folded", text.encode())
            g = Graph(kind, what, unit, sum(stacks.values()), len(stacks), f"flame/{base}.folded")
            if kind == "cpu":
                g.rate_hz = sample_rate_hz(rec)
            svg_path = fdir / f"{base}.svg"
            if not rec.probe.attached:
                g.reason = f"not measured: {rec.probe.reason or 'probes were not attached'}"
            elif not stacks:
                g.reason = f"no {what} recorded at this point"
            elif exe is None:
                g.reason = MISSING
            else:
                title = f"{what}: {on}, {rec.workers} worker{'s' if rec.workers != 1 else ''}"
                svg, why = render_svg(text, title, unit, COLORS[kind], exe)
                if svg is not None:
                    atomicio.write_bytes(svg_path, svg)
                    g.svg, g.height = f"flame/{base}.svg", _svg_height(svg)
                g.reason = why
            if g.svg is None and svg_path.exists():
                svg_path.unlink()            # never show a graph of an older report
            pg.graphs.append(g)
        result.append(pg)
    return result
