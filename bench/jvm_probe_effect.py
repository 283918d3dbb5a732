#!/usr/bin/env python3
"""Does naming Java monitors and j.u.c. locks change the JVM? The entry and
return uprobes on ObjectMonitor::EnterI fire on every contended enter, after
spinning failed; those on Unsafe_Park on every park, a lock's or not. A Java
program counts its own operations per second, run alternately alone and
under `lockscope run` (no -XX:+DTraceMonitorProbes: the EnterI way), side by
side:

- monitor: tests/programs/Monitor.java, and the share of its threads' time
  spent entering the monitor (its own clock);
- parking: tests/programs/Parking.java (a ReentrantLock), and the share spent
  in lock();
- jdklocks: tests/programs/JdkLocks.java (a Hashtable, and an
  ArrayBlockingQueue whose consumers park on its conditions: parks that are
  probed but are no lock's), 6 threads.

    sudo python3 bench/jvm_probe_effect.py [--program monitor] [--rounds 3] [--threads 2] [--seconds 6] [--java PATH]

A probe that lengthened the enter or the park would show as fewer ops/s and
a larger wait share in the lockscope column. Not a test: the figures go in
bench/README.md.
"""
from __future__ import annotations

import argparse
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


PROGRAMS = {"monitor": "Monitor", "parking": "Parking", "jdklocks": "JdkLocks"}


def parse(text: str, clock: Path) -> tuple[float, float]:
    ops = [float(x) for x in re.findall(r"ops/s: ([0-9.]+)", text)]
    return statistics.mean(ops), float(clock.read_text()) if clock.exists() else float("nan")


def argv(java: str, program: str, classes: Path, threads: int, seconds: float, clock: Path) -> list[str]:
    if program == "JdkLocks":
        return [java, "-cp", str(classes), program, str(seconds)]
    return [java, "-cp", str(classes), program, str(threads), "100", "20", str(seconds), str(clock)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="monitor")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--java", default=shutil.which("java") or "java")
    a = ap.parse_args()
    javac = str(Path(a.java).with_name("javac"))
    program = PROGRAMS[a.program]
    workers = 6 if program == "JdkLocks" else a.threads
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        subprocess.run([javac, "-d", str(tmp), str(REPO / "tests" / "programs" / f"{program}.java")], check=True)
        clock, out = tmp / "clock.txt", tmp / "out"
        print("round  alone ops/s  wait   | lockscope ops/s  wait   | ratio")
        ratios = []
        for i in range(1, a.rounds + 1):
            clock.unlink(missing_ok=True)
            p = subprocess.run(argv(a.java, program, tmp, a.threads, a.seconds, clock), capture_output=True,
                               text=True, check=True)
            ops_a, wait_a = parse(p.stdout, clock)
            shutil.rmtree(out, ignore_errors=True)
            log = tmp / "stdout.txt"
            clock.unlink(missing_ok=True)
            cmd = " ".join(shlex.quote(x) for x in argv(a.java, program, tmp, a.threads, a.seconds, clock))
            subprocess.run([sys.executable, "-m", "lockscope", "run", "--out", str(out), "--workers",
                            str(workers), "--duration", str(a.seconds + 2), "--", "sh", "-c",
                            f"exec {cmd} > {shlex.quote(str(log))}"],
                           cwd=REPO, capture_output=True, check=True)
            ops_b, wait_b = parse(log.read_text(), clock)
            ratios.append(ops_b / ops_a)
            print(f"{i:5d}  {ops_a:11,.0f}  {wait_a:.3f}  | {ops_b:15,.0f}  {wait_b:.3f}  | {ops_b / ops_a:.3f}")
        print(f"ops/s under lockscope / alone: median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
