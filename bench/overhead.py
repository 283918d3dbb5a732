#!/usr/bin/env python3
"""Overhead of lockscope's probes, measured side by side in one run.

One workload runs for the whole benchmark on a fresh file system and reports
its progress every 0.1 s. Phases alternate: workload alone (no BPF program
attached), then the real probe process (lockscope-probe: attached, tracking
the workers, counting), then alone again, ... Each probed phase is compared
with the mean of the alone phases on either side, and the median ratio is
reported, with a 95% bootstrap interval of that median (scipy.stats.bootstrap,
percentile method: the phases resampled). Separate runs on a shared VM differ
by +-10% from one another; this way the noise is that of adjacent seconds of
one run.

    sudo python3 bench/overhead.py [--workloads MWRM,MWRL] [--phases 8] [--phase 2]
    sudo python3 bench/overhead.py --compare-probe /tmp/lockscope-probe.before   # a change, side by side

A ratio of 0.95 means the workload kept 95% of its throughput under the
probes. Not a test: the figures go in bench/README.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy  # noqa: E402
from scipy.stats import bootstrap  # noqa: E402

from lockscope.machine import scratch  # noqa: E402
from lockscope.measure.probe import DEFAULT_SAMPLE_HZ, ProbeSession, preflight  # noqa: E402
from lockscope.measure.steadyload import SteadyLoad  # noqa: E402

INTERVAL = 0.1
scratch_root: list[Path] = []     # --scratch


def _use_probe(path: str | None) -> None:
    """The lockscope-probe the next ProbeSession runs: path, or this tree's."""
    if path is None:
        os.environ.pop("LOCKSCOPE_PROBE", None)
    else:
        os.environ["LOCKSCOPE_PROBE"] = path


def median_interval(ratios: list[float]) -> tuple[float, float]:
    """95% bootstrap interval of the median of the phases' ratios"""
    if len(set(ratios)) < 2:
        return ratios[0], ratios[0]
    ci = bootstrap((numpy.array(ratios),), numpy.median, n_resamples=4000, method="percentile",
                   random_state=numpy.random.default_rng(1)).confidence_interval
    return float(ci.low), float(ci.high)


def measure(workload: str, fs: str, workers: int, phases: int, phase: float, futex: bool | None = True,
            other_probe: str | None = None, sample_hz: int = DEFAULT_SAMPLE_HZ) -> dict:
    """futex None: probed phases alternate without and with futex tracing;
    other_probe: probed phases alternate between that lockscope-probe binary
    and this tree's, both with futex tracing"""
    own_probe = os.environ.get("LOCKSCOPE_PROBE")
    total = phases * 2 + 1
    duration = total * (phase + 1.5) + 5
    with scratch.mounted(fs, *scratch_root) as m:
        with SteadyLoad(workload, workers, m.mountpoint, duration, INTERVAL) as prog:
            alone, probed, events, with_futex = [], [], [], []
            for i in range(total):
                if i % 2 == 0:
                    t0 = time.monotonic_ns()
                    time.sleep(phase)
                    alone.append(prog.rate(t0, time.monotonic_ns()))
                else:
                    # the two kinds in ABBA order (this, other, other, this, ...): neither always
                    # comes first (the same binary on both sides read 1.007 against 0.938 in
                    # strict alternation, this tree's phases always the earlier ones)
                    on = bool((i // 2) % 4 in (0, 3)) if futex is None or other_probe else futex
                    with_futex.append(on)
                    if other_probe:          # "on": this tree's binary
                        _use_probe(own_probe if on else other_probe)
                    with ProbeSession(futex=True if other_probe else on, sample_hz=sample_hz) as probe:
                        for pid in prog.worker_pids:
                            probe.track(pid)
                        t0 = probe.start()["t_ns"]
                        time.sleep(phase)
                        data = probe.stop()
                    probed.append(prog.rate(t0, data["t_stop_ns"]))
                    c = data["counters"]
                    window = data["window_ns"] / 1e9
                    events.append((c["contentions"] / window, c["cpu_samples"] / window,
                                   c["offcpu_spans"] / window, c.get("futex_waits", 0) / window))
                time.sleep(0.3)      # let attach/detach settle before the next phase
    ratios = [p / ((alone[i] + alone[i + 1]) / 2) for i, p in enumerate(probed)]
    if other_probe:
        _use_probe(own_probe)
        this = [r for r, f in zip(ratios, with_futex) if f]
        other = [r for r, f in zip(ratios, with_futex) if not f]
        return {"ratio_this": statistics.median(this), "ratio_other": statistics.median(other),
                "ratios_this": this, "ratios_other": other}
    if futex is None:
        on = [r for r, f in zip(ratios, with_futex) if f]
        off = [r for r, f in zip(ratios, with_futex) if not f]
        return {"ratio_futex": statistics.median(on), "ratio_no_futex": statistics.median(off),
                "ratios_futex": on, "ratios_no_futex": off,
                "futex_waits_per_s": statistics.median(e[3] for e, f in zip(events, with_futex) if f)}
    return {"alone": statistics.median(alone), "probed": statistics.median(probed),
            "ratio": statistics.median(ratios), "ratios": ratios,
            "waits_per_s": statistics.median(e[0] for e in events),
            "samples_per_s": statistics.median(e[1] for e in events),
            "switches_per_s": statistics.median(e[2] for e in events),
            "futex_waits_per_s": statistics.median(e[3] for e in events)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="MWRM,MWRL",
                    help="comma-separated (default: MWRM, ~1M lock waits/s at 2 workers here; MWRL, an "
                         "ordinary workload that scales)")
    ap.add_argument("--fs", default="tmpfs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--phases", type=int, default=8, help="probed phases per workload (default 8)")
    ap.add_argument("--phase", type=float, default=2.0, help="seconds per phase (default 2)")
    ap.add_argument("--no-futex", action="store_true", help="probe without the futex (user-space lock) tracing")
    ap.add_argument("--sample-hz", type=int, default=DEFAULT_SAMPLE_HZ,
                    help=f"the probe's CPU sampling rate (default {DEFAULT_SAMPLE_HZ}; 0: none)")
    ap.add_argument("--compare-futex", action="store_true",
                    help="probed phases alternate without and with futex tracing; print both median ratios")
    ap.add_argument("--compare-probe", metavar="PATH",
                    help="probed phases alternate between the lockscope-probe binary at PATH (e.g. a copy "
                         "built before a change) and this tree's; print both median ratios")
    ap.add_argument("--scratch", type=Path, help="where the file system is made (default: lockscope's)")
    a = ap.parse_args()
    if a.scratch:
        scratch_root.append(a.scratch)
    preflight()
    if a.compare_probe:
        print(f"{'workload':<8} {'ratio ' + Path(a.compare_probe).name:>24} {'ratio this tree':>15}")
        for wl in a.workloads.split(","):
            r = measure(wl, a.fs, a.workers, a.phases, a.phase, other_probe=a.compare_probe, sample_hz=a.sample_hz)
            print(f"{wl:<8} {r['ratio_other']:>24.3f} {r['ratio_this']:>15.3f}  "
                  f"(ratios {[round(x, 3) for x in r['ratios_other']]} / {[round(x, 3) for x in r['ratios_this']]})",
                  flush=True)
        return 0
    if a.compare_futex:
        print(f"{'workload':<8} {'ratio no futex':>14} {'ratio futex':>11}  {'futex waits/s':>13}")
        for wl in a.workloads.split(","):
            r = measure(wl, a.fs, a.workers, a.phases, a.phase, futex=None, sample_hz=a.sample_hz)
            print(f"{wl:<8} {r['ratio_no_futex']:>14.3f} {r['ratio_futex']:>11.3f}  {r['futex_waits_per_s']:>13,.0f}  "
                  f"(ratios {[round(x, 3) for x in r['ratios_no_futex']]} / {[round(x, 3) for x in r['ratios_futex']]})",
                  flush=True)
        return 0
    print(f"{'workload':<8} {'alone ops/s':>12} {'probed ops/s':>13} {'ratio':>6} {'95% interval':>12}  {'ratios min..max':>15}  "
          f"{'lock waits/s':>12} {'samples/s':>9} {'switches/s':>10} {'futex waits/s':>13}")
    for wl in a.workloads.split(","):
        r = measure(wl, a.fs, a.workers, a.phases, a.phase, futex=not a.no_futex, sample_hz=a.sample_hz)
        lo, hi = median_interval(r['ratios'])
        print(f"{wl:<8} {r['alone']:>12,.0f} {r['probed']:>13,.0f} {r['ratio']:>6.3f} {lo:>5.3f}..{hi:.3f}  "
              f"{min(r['ratios']):>7.3f}..{max(r['ratios']):.3f}  {r['waits_per_s']:>12,.0f} "
              f"{r['samples_per_s']:>9,.0f} {r['switches_per_s']:>10,.0f} {r['futex_waits_per_s']:>13,.0f}", flush=True)
        print(f"{'':<8} phases: {', '.join(f'{x:.3f}' for x in r['ratios'])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
