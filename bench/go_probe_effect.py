#!/usr/bin/env python3
"""Does lockscope's Go probe change the program it measures? A channel-heavy
Go program (tests/programs/chanload.go) counts its own sends per second and
Go's own runtime-lock wait (runtime/metrics /sync/mutex/wait/total:seconds),
run alternately alone and under `lockscope run`, side by side.

    sudo python3 bench/go_probe_effect.py [--rounds 3] [--workers 4] [--seconds 3]

A uprobe that fires while a runtime lock is held (runtime.gopark is called
with the channel's lock held) lengthens that critical section and makes the
contention it then reports: the lockscope column's mutex wait grows and its
sends fall. Not a test: the figures go in bench/README.md.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build(out: Path) -> Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    src = out / "src"
    src.mkdir()
    shutil.copy(REPO / "tests" / "programs" / "chanload.go", src / "main.go")
    (src / "go.mod").write_text("module chanload\ngo 1.22\n")
    subprocess.run([go, "build", "-o", str(out / "chanload"), "."], cwd=src, check=True,
                   env={**os.environ, "GOFLAGS": "-mod=mod", "GOCACHE": str(out / "cache")})
    return out / "chanload"


def parse(text: str) -> tuple[float, float]:
    ops = float(re.search(r"ops/s: ([0-9.]+)", text).group(1))
    wait = float(re.search(r"mutex wait: ([0-9.]+) s", text).group(1))
    return ops, wait


def alone(exe: Path, workers: int, seconds: float) -> tuple[float, float]:
    p = subprocess.run([str(exe), str(workers), str(seconds)], capture_output=True, text=True, check=True)
    return parse(p.stderr)


def probed(exe: Path, workers: int, seconds: float, tmp: Path) -> tuple[float, float]:
    out, stats = tmp / "out", tmp / "stats.txt"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "lockscope", "run", "--out", str(out), "--workers", str(workers),
                    "--duration", str(seconds + 2), "--", str(exe), "{n}", str(seconds)],
                   cwd=REPO, env={**os.environ, "GOCHAN_OUT": str(stats)}, capture_output=True, check=True)
    return parse(stats.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        exe = build(tmp)
        rows = []
        for _ in range(a.rounds):
            rows.append((alone(exe, a.workers, a.seconds), probed(exe, a.workers, a.seconds, tmp)))
    print("round  alone: sends/s  mutex wait s   lockscope: sends/s  mutex wait s")
    for i, ((o0, w0), (o1, w1)) in enumerate(rows, 1):
        print(f"{i:5}  {o0:15,.0f}  {w0:12.3f}   {o1:18,.0f}  {w1:12.3f}")
    ratio = statistics.median(o1 / o0 for (o0, _), (o1, _) in rows)
    print(f"median sends ratio (lockscope / alone): {ratio:.3f}")


if __name__ == "__main__":
    main()
