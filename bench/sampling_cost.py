#!/usr/bin/env python3
"""What the on-CPU sampling timer costs, apart from the BPF programs.

One workload runs for the whole benchmark; rounds of phases alternate: the
workload alone, then the probe (lockscope-probe, tracking the workers) at each
--sample-hz given, then alone with a process that only wakes up at 200 Hz
(`time.sleep(0.005)` in a loop: periodic interruptions with no BPF at all).
Each phase's rate is divided by the median rate alone. The probe binary is
this tree's unless LOCKSCOPE_PROBE names another (e.g. a build whose
programs return at once, to see the timer alone).

With --perf PATH (the user's own `perf`), two more phases per rate sample
with no BPF at all: `perf record -e cpu-clock -a` (a timer on every CPU,
what lockscope-probe does) and `perf record -e task-clock -p WORKERS` (a
timer per thread that runs only while the thread does, but with a perf
context to switch at each of its context switches).

    sudo python3 bench/sampling_cost.py [--workload PMUTEX] [--hz 199,49,0] [--rounds 4]
    sudo python3 bench/sampling_cost.py --hz 199,49 --perf /usr/bin/perf

Not a test: the figures go in bench/README.md ("What the sampling timer costs").
"""
from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from lockscope import scratch  # noqa: E402
from lockscope.steadyload import SteadyLoad  # noqa: E402
from lockscope.probe import ProbeSession  # noqa: E402

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
    ap.add_argument("--hz", default="199,49,0", help="sampling rates to compare (default 199,49,0)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--phase", type=float, default=1.5, help="seconds per phase (default 1.5)")
    ap.add_argument("--perf", metavar="PATH", help="also time perf record's per-CPU and per-thread sampling")
    a = ap.parse_args()
    rates = [int(x) for x in a.hz.split(",")]
    phases = ["alone"] + [f"probe {hz} Hz" for hz in rates] + ["alone + 200 Hz sleeper"]
    if a.perf:
        phases += [f"perf {clock} {hz} Hz" for hz in rates if hz for clock in ("cpu-clock", "task-clock")]
    got: dict[str, list[float]] = {p: [] for p in phases}
    duration = a.rounds * len(phases) * (a.phase + 2.5) + 10
    with scratch.mounted(a.fs) as m, SteadyLoad(a.workload, a.workers, m.mountpoint, duration) as prog:
        for _ in range(a.rounds):
            for p in phases:
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
                    time.sleep(0.5 if other else 0)
                    t0 = time.monotonic_ns()
                    time.sleep(a.phase)
                    t1 = time.monotonic_ns()
                    if other:
                        other.send_signal(signal.SIGINT)
                        other.wait()
                got[p].append(prog.rate(t0, t1))
                time.sleep(0.3)
    alone = statistics.median(got["alone"])
    print(f"{a.workload}, {a.workers} workers, {a.rounds} rounds of {a.phase} s phases; alone {alone:,.0f} ops/s")
    print("| phase | ratio (median) | phases |\n|---|---|---|")
    for p, v in got.items():
        print(f"| {p} | {statistics.median(v) / alone:.3f} | {', '.join(f'{x / alone:.2f}' for x in v)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
