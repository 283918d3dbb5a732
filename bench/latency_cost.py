#!/usr/bin/env python3
"""What timing every operation costs the workload driver, measured side by side.

Runs a built-in workload with per-operation latency timing (the default) and
with `--no-latency` (operations counted, not timed), alternating the two, each
run on the same fresh tmpfs, and prints the median ops/s ratio timed/untimed
per workload. Not a test: the figures go in bench/README.md.

    sudo python3 bench/latency_cost.py [--workloads DWOL,MRPH,MWRL] [--rounds 7] [--workers 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lockscope import paths  # noqa: E402
from lockscope.machine import scratch  # noqa: E402


def one_run(driver: Path, workload: str, workers: int, d: str, timed: bool, duration: float) -> float:
    argv = [str(driver), "run", "--workload", workload, "--workers", str(workers), "--dir", d,
            "--duration", str(duration), "--warmup", "0.3"] + ([] if timed else ["--no-latency"])
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    result = next(json.loads(line) for line in out.splitlines() if '"event":"result"' in line)
    return result["ops_per_sec"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="DWOL,MRPH,MWRL")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--duration", type=float, default=1.0)
    args = ap.parse_args()
    driver = paths.workload_binary()
    print(f"{'workload':10} {'timed ops/s':>13} {'untimed ops/s':>14} {'ratio':>6}  (median of {args.rounds}, "
          f"{args.workers} worker(s), tmpfs)")
    with tempfile.TemporaryDirectory(prefix="lockscope-latcost-") as root:
        for wl in args.workloads.split(","):
            ratios, timed, untimed = [], [], []
            for r in range(args.rounds):
                pair = {}
                for t in ((True, False) if r % 2 == 0 else (False, True)):   # alternate which goes first
                    with scratch.mounted("tmpfs", Path(root)) as m:
                        pair[t] = one_run(driver, wl, args.workers, str(m.mountpoint), t, args.duration)
                timed.append(pair[True])
                untimed.append(pair[False])
                ratios.append(pair[True] / pair[False])
            print(f"{wl:10} {statistics.median(timed):13,.0f} {statistics.median(untimed):14,.0f} "
                  f"{statistics.median(ratios):6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
