#!/usr/bin/env python3
"""What each part of lockscope's probe costs, from the kernel's BPF statistics.

Throughput ratios (bench/overhead.py) move with whatever else the machine runs;
the time the kernel spends inside each BPF program does not. With run-time
statistics on (BPF_ENABLE_STATS, held only while this script runs: the kernel
then times every program run, about 20 ns each), every program's run_cnt and
run_time_ns are read at the start and the end of each probed phase; the probe
process's own CPU time (user space: aggregation reads, time series, object
walks) is read from /proc. Per part:

    events/s   program runs per second of the phase (all CPUs)
    ns/event   run_time_ns / run_cnt
    CPU%       run time per second of wall time, in % of one CPU

The programs run for every task's events and return early for the others':
on a busy machine ns/event mixes the two. The two lines under each table
divide the programs' whole run time by the workload's own events (the probe's
counters): per kernel lock wait, and per switch-out of a workload thread.

The CPU-sampling interrupt and the tracepoints' dispatch outside the programs
are not in run_time_ns; bench/overhead.py's ratios include them.

    sudo python3 bench/probe_cost.py [--workloads MWRM,PMUTEX,MWRL] [--phases 3] [--phase 2]
    sudo python3 bench/probe_cost.py --workers 1 --cpus 0        # one CPU
    sudo python3 bench/probe_cost.py --compare-probe /tmp/lockscope-probe.before   # before / after

With --compare-probe, probed phases alternate between that lockscope-probe
binary and this tree's (same workload run, same background): two tables.

One table per workload, medians over the phases. The table in bench/README.md
is this output.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from lockscope.machine import scratch  # noqa: E402
from lockscope.measure.probe import DEFAULT_SAMPLE_HZ, ProbeSession, preflight  # noqa: E402
from lockscope.measure.steadyload import SteadyLoad  # noqa: E402
from overhead import INTERVAL, _use_probe  # noqa: E402

BPF_ENABLE_STATS = 32       # enum bpf_cmd
BPF_STATS_RUN_TIME = 0
NR_BPF = {"x86_64": 321, "aarch64": 280}

# what each program is, for the table
PARTS = {
    "lksc_cont_begin": "contention_begin (kernel lock wait starts; stack walk sampled)",
    "lksc_cont_end": "contention_end (wait ends: per-CPU buffer)",
    "lksc_switch": "sched_switch: off-CPU spans, futex waits, per-thread times (one program)",
    "lksc_tasks_waking": "sched_waking: wake-up edges (tasks.bpf.c)",
    "lksc_cpu_sample": "perf cpu-clock sample (stack walk)",
    "lksc_fork": "sched_process_fork (fork-following)",
}


def enable_stats() -> int:
    """An fd that keeps the kernel's BPF run-time statistics on while open."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(BPF_STATS_RUN_TIME.to_bytes(4, "little") + bytes(4))
    fd = libc.syscall(NR_BPF[os.uname().machine], BPF_ENABLE_STATS, attr, 8)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "BPF_ENABLE_STATS")
    return fd


def prog_stats(pid: int) -> dict[str, tuple[int, int]]:
    """name -> (run_cnt, run_time_ns) of the BPF programs process pid holds
    (their fds' fdinfo; the names from bpftool)"""
    by_id: dict[int, tuple[int, int]] = {}
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            info = dict(line.split(":", 1) for line in fd.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if "prog_id" in info and "run_cnt" in info:
            by_id[int(info["prog_id"])] = (int(info["run_cnt"]), int(info["run_time_ns"]))
    if not names:
        out = subprocess.run(["bpftool", "--json", "prog", "show"], capture_output=True, text=True, check=True)
        names.update({p["id"]: p.get("name", "") for p in json.loads(out.stdout)})
    stats: dict[str, tuple[int, int]] = {}
    for pid_, v in by_id.items():
        name = names.get(pid_, "")
        if name.startswith("lksc_"):
            cnt, ns = stats.get(name, (0, 0))
            stats[name] = (cnt + v[0], ns + v[1])
    return stats


names: dict[int, str] = {}     # BPF program id -> name, filled per probe process


def cpu_ns(pid: int) -> int:
    """CPU time of a process (all its threads), ns, from schedstat"""
    return sum(int((t / "schedstat").read_text().split()[0]) for t in Path(f"/proc/{pid}/task").iterdir())


def measure(workload: str, a) -> dict[str, dict]:
    """{binary label: results}; two labels with --compare-probe"""
    own_probe = os.environ.get("LOCKSCOPE_PROBE")
    binaries = [("other", a.compare_probe), ("this", own_probe)] if a.compare_probe else [("this", own_probe)]
    total = a.phases * len(binaries) * 2 + 1
    duration = total * (a.phase + 1.5) + 5
    rows: dict[str, dict[str, list[tuple[float, float, float]]]] = {b: {} for b, _ in binaries}
    counters: dict[str, list[dict]] = {b: [] for b, _ in binaries}
    which: list[str] = []
    with scratch.mounted(a.fs, *([a.scratch] if a.scratch else [])) as m, \
            SteadyLoad(workload, a.workers, m.mountpoint, duration, INTERVAL, cpus=a.cpus) as prog:
        try:
            alone, probed = [], []
            for i in range(total):
                if i % 2 == 0:
                    t0 = time.monotonic_ns()
                    time.sleep(a.phase)
                    alone.append(prog.rate(t0, time.monotonic_ns()))
                    continue
                label, binary = binaries[(i // 2) % len(binaries)]
                which.append(label)
                _use_probe(binary)
                with ProbeSession(futex=not a.no_futex, sample_hz=a.sample_hz) as probe:
                    for pid in prog.worker_pids:
                        probe.track(pid)
                    lpid = probe.proc.pid
                    names.clear()
                    t0 = probe.start()["t_ns"]
                    s0, c0, w0 = prog_stats(lpid), cpu_ns(lpid), time.monotonic_ns()
                    time.sleep(a.phase)
                    s1, c1, w1 = prog_stats(lpid), cpu_ns(lpid), time.monotonic_ns()
                    data = probe.stop()
                probed.append(prog.rate(t0, data["t_stop_ns"]))
                counters[label].append({k: v / (data["window_ns"] / 1e9) for k, v in data["counters"].items()
                                 if isinstance(v, (int, float))})
                wall = (w1 - w0) / 1e9
                for name in s1:
                    cnt = s1[name][0] - s0.get(name, (0, 0))[0]
                    ns = s1[name][1] - s0.get(name, (0, 0))[1]
                    rows[label].setdefault(name, []).append((cnt / wall, ns / cnt if cnt else 0.0, ns / wall / 1e7))
                rows[label].setdefault("(user space: lockscope-probe)", []).append((0.0, 0.0, (c1 - c0) / wall / 1e7))
                time.sleep(0.3)
        finally:
            _use_probe(own_probe)
    ratios = [p / ((alone[i] + alone[i + 1]) / 2) for i, p in enumerate(probed)]
    out = {}
    for label, _ in binaries:
        med = {k: tuple(statistics.median(x[j] for x in v) for j in range(3)) for k, v in rows[label].items()}
        keys = sorted({k for c in counters[label] for k in c})
        mine = [r for r, w in zip(ratios, which) if w == label]
        out[label] = {"rows": med, "ratio": statistics.median(mine), "ratios": mine,
                      "alone": statistics.median(alone),
                      "probed": statistics.median(p for p, w in zip(probed, which) if w == label),
                      "counters": {k: statistics.median(c.get(k, 0) for c in counters[label]) for k in keys}}
    return out


def print_table(workload: str, r: dict, a, label: str) -> None:
    cpus = a.cpus or "all"
    probe = f" [{a.compare_probe}]" if label == "other" else " [this tree]" if a.compare_probe else ""
    print(f"\n{workload}{probe}, {a.workers} worker(s), CPUs {cpus}, --sample-hz {a.sample_hz}: alone "
          f"{r['alone']:,.0f} ops/s, probed {r['probed']:,.0f}, ratio {r['ratio']:.3f} "
          f"({min(r['ratios']):.3f}..{max(r['ratios']):.3f}; indicative on a busy machine)")
    print("| program | events/s | ns/event | CPU% |\n|---|---|---|---|")
    total = 0.0
    for name, (ev, ns, pct) in sorted(r["rows"].items(), key=lambda kv: -kv[1][2]):
        total += pct
        ev_s = f"{ev:,.0f}" if ev else ""
        ns_s = f"{ns:,.0f}" if ev else ""
        print(f"| {name} | {ev_s} | {ns_s} | {pct:.2f} |")
    print(f"| **total** | | | **{total:.2f}** |")
    # the programs also run (and return early) for other tasks' events: per
    # event of the workload's, their whole run time over its event count
    rows, c = r["rows"], r["counters"]
    ns_per_s = {k: v[2] * 1e7 for k, v in rows.items()}
    waits = c.get("contentions", 0)
    switches = c.get("task_switches", 0) or c.get("offcpu_spans", 0)
    if waits:
        lock = ns_per_s.get("lksc_cont_begin", 0) + ns_per_s.get("lksc_cont_end", 0)
        print(f"per kernel lock wait of the workload (contention_begin + end): {lock / waits:,.0f} ns")
    if switches:
        sw = sum(v for k, v in ns_per_s.items() if k.endswith("switch") or k == "lksc_tasks_waking")
        print(f"per switch-out of a workload thread (sched_switch program(s) + sched_waking): "
              f"{sw / switches:,.0f} ns")
    if a.counters:
        print("counters/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in r["counters"].items() if v))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="MWRM,PMUTEX,MWRL")
    ap.add_argument("--fs", default="tmpfs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cpus", help="pin the workers to these CPUs (lockscope-workload --cpus)")
    ap.add_argument("--phases", type=int, default=3, help="probed phases per workload (default 3)")
    ap.add_argument("--phase", type=float, default=2.0, help="seconds per phase (default 2)")
    ap.add_argument("--sample-hz", type=int, default=DEFAULT_SAMPLE_HZ)
    ap.add_argument("--no-futex", action="store_true")
    ap.add_argument("--compare-probe", metavar="PATH",
                    help="probed phases alternate between the lockscope-probe at PATH and this tree's")
    ap.add_argument("--counters", action="store_true", help="also print the probe's counters per second")
    ap.add_argument("--scratch", type=Path, help="where the file system is made (default: lockscope's)")
    a = ap.parse_args()
    preflight()
    fd = enable_stats()
    try:
        for wl in a.workloads.split(","):
            for label, r in measure(wl, a).items():
                print_table(wl, r, a, label)
            sys.stdout.flush()
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
