#!/usr/bin/env python3
"""What the on-CPU sampling timer costs, apart from the BPF programs.

One workload runs for the whole benchmark; rounds of phases alternate: the
workload alone, then the probe (lockscope-probe, tracking the workers) at each
--sample-hz given, then alone with a process that only wakes up at 200 Hz
(`time.sleep(0.005)` in a loop: periodic interruptions with no BPF at all).
Each phase's rate is divided by the rate alone at its time, interpolated
between the alone phases that open its round and the next (one more closes
the last round): the VM's speed drifts by 10-15% over a minute. The probe binary is
this tree's unless LOCKSCOPE_PROBE names another (e.g. a build whose
programs return at once, to see the timer alone).

With --perf PATH (the user's own `perf`), two more phases per rate sample
with no BPF at all: `perf record -e cpu-clock -a` (a timer on every CPU,
what lockscope-probe does) and `perf record -e task-clock -p WORKERS` (a
timer per thread that runs only while the thread does, but with a perf
context to switch at each of its context switches).

    sudo python3 bench/sampling_cost.py [--workload PMUTEX] [--hz 49,0] [--rounds 4]
    sudo python3 bench/sampling_cost.py --hz 199,49 --perf /usr/bin/perf

Not a test: the figures go in bench/README.md ("The sampling interrupt, and samples at the tick
tried").
"""
from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from lockscope.machine import scratch  # noqa: E402
from lockscope.measure.steadyload import SteadyLoad  # noqa: E402
from lockscope.measure.probe import ProbeSession  # noqa: E402

SLEEPER = "import time\nwhile True: time.sleep(0.005)"


def perf_record(perf: str, phase: str, pids: list[int]) -> subprocess.Popen:
    """`perf record` of one phase ("perf cpu-clock 49 Hz"), its output thrown away"""
    _, clock, hz, _ = phase.split()
    who = ["-a"] if clock == "cpu-clock" else ["-p", ",".join(map(str, pids))]
    return subprocess.Popen([perf, "record", "-q", "-e", clock, "-c", str(1_000_000_000 // int(hz)), *who,
                             "-o", "/dev/null"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="PMUTEX")
    ap.add_argument("--fs", default="tmpfs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hz", default="49,0", help="sampling rates to compare (default 49,0)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--phase", type=float, default=1.5, help="seconds per phase (default 1.5)")
    ap.add_argument("--perf", metavar="PATH", help="also time perf record's per-CPU and per-thread sampling")
    a = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C: the sleeper or perf of the phase, the workload and the mount go
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rates = [int(x) for x in a.hz.split(",")]
    phases = ["alone"] + [f"probe {hz} Hz" for hz in rates] + ["alone + 200 Hz sleeper"]
    if a.perf:
        phases += [f"perf {clock} {hz} Hz" for hz in rates if hz for clock in ("cpu-clock", "task-clock")]
    got: dict[str, list[tuple[float, float]]] = {p: [] for p in phases}     # (mid time, rate)
    duration = (a.rounds * len(phases) + 1) * (a.phase + 5) + 30   # generous: killed at the end
    with scratch.mounted(a.fs) as m, SteadyLoad(a.workload, a.workers, m.mountpoint, duration) as prog:
        for r in range(a.rounds + 1):
            for p in phases if r < a.rounds else ["alone"]:
                if p.startswith("probe"):
                    with ProbeSession(sample_hz=int(p.split()[1])) as probe:
                        for pid in prog.worker_pids:
                            probe.track(pid)
                        t0 = probe.start()["t_ns"]
                        time.sleep(a.phase)
                        t1 = probe.stop()["t_stop_ns"]
                else:
                    other = subprocess.Popen([sys.executable, "-c", SLEEPER]) if "sleeper" in p else \
                        perf_record(a.perf, p, prog.worker_pids) if p.startswith("perf") else None
                    try:
                        time.sleep(0.5 if other else 0)
                        t0 = time.monotonic_ns()
                        time.sleep(a.phase)
                        t1 = time.monotonic_ns()
                    finally:      # also when the script is stopped: a sleeper left behind skews every later run
                        if other:
                            # SIGTERM, not SIGINT: run in the background, a shell starts its
                            # children with SIGINT ignored, and Python then never sees it
                            other.terminate()
                            other.wait()
                got[p].append(((t0 + t1) / 2, prog.rate(t0, t1)))
                time.sleep(0.3)
    alone = got["alone"]
    print(f"{a.workload}, {a.workers} workers, {a.rounds} rounds of {a.phase} s phases; alone "
          f"{statistics.median(r for _, r in alone):,.0f} ops/s (median)")
    print("| phase | ratio (median) | phases |\n|---|---|---|")
    for p, v in got.items():
        ratios = [rate / numpy.interp(t, [t for t, _ in alone], [r for _, r in alone]) for t, rate in v]
        print(f"| {p} | {statistics.median(ratios):.3f} | {', '.join(f'{x:.2f}' for x in ratios)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
