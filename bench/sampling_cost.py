#!/usr/bin/env python3
"""What the on-CPU sampling timer costs, apart from the BPF programs.

One workload runs for the whole benchmark; rounds of phases alternate: the
workload alone, then the probe (lockscope-probe, tracking the workers) at each
--sample-hz given, then alone with a process that only wakes up at 200 Hz
(`time.sleep(0.005)` in a loop: periodic interruptions with no BPF at all).
Each phase's rate is divided by the median rate alone. The probe binary is
this tree's unless LOCKSCOPE_PROBE names another (e.g. a build whose
programs return at once, to see the timer alone).

    sudo python3 bench/sampling_cost.py [--workload PMUTEX] [--hz 199,49,0] [--rounds 4]

Not a test: the figures go in bench/README.md ("What the sampling timer costs").
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from overhead import Progress  # noqa: E402
from lockscope import paths, scratch  # noqa: E402
from lockscope.probe import ProbeSession  # noqa: E402

SLEEPER = "import time\nwhile True: time.sleep(0.005)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="PMUTEX")
    ap.add_argument("--fs", default="tmpfs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hz", default="199,49,0", help="sampling rates to compare (default 199,49,0)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--phase", type=float, default=1.5, help="seconds per phase (default 1.5)")
    a = ap.parse_args()
    rates = [int(x) for x in a.hz.split(",")]
    phases = ["alone"] + [f"probe {hz} Hz" for hz in rates] + ["alone + 200 Hz sleeper"]
    got: dict[str, list[float]] = {p: [] for p in phases}
    duration = a.rounds * len(phases) * (a.phase + 2.5) + 10
    with scratch.mounted(a.fs) as m:
        proc = subprocess.Popen([str(paths.workload_binary()), "run", "--workload", a.workload, "--workers",
                                 str(a.workers), "--duration", str(duration), "--warmup", "1", "--dir",
                                 str(m.mountpoint), "--interval", "0.1"], stdout=subprocess.PIPE, text=True)
        try:
            prog = Progress(proc)
            if not prog.started.wait(120):
                raise RuntimeError("the workload did not start")
            for _ in range(a.rounds):
                for p in phases:
                    if p.startswith("probe"):
                        with ProbeSession(sample_hz=int(p.split()[1])) as probe:
                            for pid in prog.ready["worker_pids"]:
                                probe.track(pid)
                            t0 = probe.start()["t_ns"]
                            time.sleep(a.phase)
                            t1 = probe.stop()["t_stop_ns"]
                    else:
                        sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER]) if "sleeper" in p else None
                        time.sleep(0.3 if sleeper else 0)
                        t0 = time.monotonic_ns()
                        time.sleep(a.phase)
                        t1 = time.monotonic_ns()
                        if sleeper:
                            sleeper.kill()
                            sleeper.wait()
                    got[p].append(prog.rate(t0, t1))
                    time.sleep(0.3)
        finally:
            proc.kill()
            proc.wait()
    alone = statistics.median(got["alone"])
    print(f"{a.workload}, {a.workers} workers, {a.rounds} rounds of {a.phase} s phases; alone {alone:,.0f} ops/s")
    print("| phase | ratio (median) | phases |\n|---|---|---|")
    for p, v in got.items():
        print(f"| {p} | {statistics.median(v) / alone:.3f} | {', '.join(f'{x / alone:.2f}' for x in v)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
