#!/usr/bin/env python3
"""lockscope's built-in workload driver against the original FxMark driver,
side by side on the same machine.

For every workload both drivers know, at each worker count, the two drivers
run in alternation (FxMark, lockscope, lockscope, FxMark, ...: the order
flips every round), each on a fresh tmpfs made for that run, for the same
timed window and without a warm-up (FxMark has none). Separate runs on a
shared VM differ by +-10% from one another, so each lockscope run is compared
with the FxMark run next to it, and the median of those ratios is reported.

    sudo python3 bench/fxmark_compare.py --fxmark PATH/TO/fxmark/bin/fxmark \\
        [--workloads MWRL,MWRM] [--workers 1,2] [--duration 2] [--rounds 3]

FxMark is not part of lockscope: build it yourself from
https://github.com/sslab-gatech/fxmark (`make` in its tree, which also
generates its CPU table src/cpupol.h) and pass its bin/fxmark. Its driver is
run as its own runner does: `fxmark --type T --ncore N --nbg 0 --duration D
--directio 0|1 --root DIR`; the *_DIO names map to `--type` without the suffix
and `--directio 1`. Names the built-in driver does not list
(`lockscope-workload --list`) are skipped, with that reason.

FxMark's MWUL, MWUM and DWTL pre-create files (or a file) until the file
system is full, so the tmpfs of every run is capped (--inodes, --size) for
both drivers alike. A ratio above 1 means lockscope's driver did more
operations per second. Not a test: the figures go in bench/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lockscope import paths  # noqa: E402
from lockscope.machine import scratch  # noqa: E402
from lockscope.errors import LockscopeError  # noqa: E402

FXMARK_WORKLOADS = ["DRBL", "DRBM", "DRBH", "DWOL", "DWOM", "DWAL", "DWTL", "DWSL", "MRPL", "MRPM", "MRPH",
                    "MRDL", "MRDM", "MWCL", "MWCM", "MWUL", "MWUM", "MWRL", "MWRM",
                    "DRBL_DIO", "DRBM_DIO", "DWOL_DIO", "DWOM_DIO"]
DIO = "_DIO"


def fxmark_args(name: str) -> tuple[str, str]:
    """lockscope's name -> FxMark's (--type, --directio)."""
    return (name[:-len(DIO)], "1") if name.endswith(DIO) else (name, "0")


@contextlib.contextmanager
def fresh_tmpfs(root: Path, options: str):
    root.mkdir(parents=True, exist_ok=True)
    mnt = root / f"cmp-{os.getpid()}-{time.monotonic_ns()}"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"noatime,mode=0777,{options}", scratch.MOUNT_SOURCE,
                        str(mnt)], check=True, capture_output=True)
        try:
            scratch.drop_caches(mnt)
            yield mnt
        finally:
            scratch.unmount(mnt)
    finally:
        with contextlib.suppress(OSError):
            mnt.rmdir()


def become_subreaper() -> None:
    """FxMark's parent never waits for its forked workers: made our orphans,
    they are reaped here and their CPU time counted (RUSAGE_CHILDREN)."""
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def timed(cmd: list[str], timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """Run cmd; return it and the CPU seconds (user + sys) of its whole process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    while True:                          # reap orphaned workers (we are their subreaper)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_fxmark(fxmark: str, name: str, workers: int, duration: int, root: Path) -> tuple[float, float]:
    """ops/s and CPU seconds per op (the set-up's CPU included)."""
    typ, dio = fxmark_args(name)
    cmd = [fxmark, "--type", typ, "--ncore", str(workers), "--nbg", "0", "--duration", str(duration),
           "--directio", dio, "--root", str(root)]
    p, cpu = timed(cmd, duration + 600)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"fxmark {typ} failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()[-300:]}")
    ncpu, secs, works, rate = lines[-1].split()[:4]
    if float(works) <= 0:
        raise RuntimeError(f"fxmark {typ} did no work (a worker failed; FxMark prints no error)")
    return float(rate), cpu / float(works)


# path-lookup workloads: FxMark's code stat()s the file; lockscope's default is the
# paper's open+close, --param stat=1 is FxMark's operation
STAT_LOOKUPS = {"MRPL", "MRPM", "MRPH"}


def run_lockscope(driver: str, name: str, workers: int, duration: int, root: Path,
                  no_latency: bool = False) -> tuple[float, float, bool]:
    """ops/s, CPU seconds per op (the set-up's CPU included), and whether a worker ran out of work."""
    cmd = [driver, "run", "--workload", name, "--workers", str(workers), "--duration", str(duration),
           "--warmup", "0", "--dir", str(root)] + (["--no-latency"] if no_latency else [])
    if name in STAT_LOOKUPS:       # FxMark's code stats where the paper opens: compare the same operation
        cmd += ["--param", "stat=1"]
    p, cpu = timed(cmd, duration + 600)
    result = None
    for line in p.stdout.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            ev = json.loads(line)
            if ev.get("event") == "result":
                result = ev
            elif ev.get("event") == "error":
                raise RuntimeError(f"lockscope-workload {name}: {ev.get('message')}")
    if p.returncode != 0 or result is None:
        raise RuntimeError(f"lockscope-workload {name} failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    ran_out = any(w.get("ran_out_in_window") for w in result.get("per_worker", []))
    return float(result["ops_per_sec"]), cpu / max(1, result["ops"]), ran_out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fxmark", help="path of FxMark's driver (bin/fxmark of your FxMark build)")
    ap.add_argument("--driver", default=None,
                    help="lockscope's driver (default: this tree's workloads/build/lockscope-workload)")
    ap.add_argument("--workloads", default=",".join(FXMARK_WORKLOADS))
    ap.add_argument("--workers", default=None, help="worker counts, e.g. 1,2 (default 1..CPUs)")
    ap.add_argument("--duration", type=int, default=2, help="timed window in whole seconds (FxMark's unit)")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of runs per point")
    ap.add_argument("--size", default="4g", help="tmpfs size of each run (FxMark fills DWTL's file to it)")
    ap.add_argument("--inodes", default="1500000",
                    help="tmpfs inodes of each run (FxMark's MWUL/MWUM pre-create until they run out)")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/lockscope-fxmark-compare"))
    ap.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    ap.add_argument("--no-latency", action="store_true",
                    help="run lockscope's driver without per-operation latency timing (what timing costs)")
    args = ap.parse_args()

    if not args.fxmark:
        print("fxmark_compare: no FxMark driver given.\n  FxMark is not shipped with lockscope: build it from "
              "https://github.com/sslab-gatech/fxmark (run `make` in its tree)\n  and pass its driver: "
              "--fxmark PATH/fxmark/bin/fxmark", file=sys.stderr)
        return 2
    if not (os.path.isfile(args.fxmark) and os.access(args.fxmark, os.X_OK)):
        print(f"fxmark_compare: --fxmark {args.fxmark}: not an executable file (build FxMark first: `make` in "
              "its tree makes bin/fxmark)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("fxmark_compare: needs root (it mounts a tmpfs per run and drops caches)", file=sys.stderr)
        return 3
    try:
        driver = args.driver or str(paths.workload_binary())
        builtin = {w["name"] for w in json.loads(subprocess.run([driver, "--list"], capture_output=True,
                                                                text=True, check=True).stdout)["workloads"]}
    except (LockscopeError, subprocess.CalledProcessError, OSError, ValueError) as e:
        print(f"fxmark_compare: lockscope's driver is not usable: {e}", file=sys.stderr)
        return 3
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in FXMARK_WORKLOADS]
    if unknown:
        print(f"fxmark_compare: not FxMark workloads: {', '.join(unknown)} "
              f"(choose from {', '.join(FXMARK_WORKLOADS)})", file=sys.stderr)
        return 2
    ncpu = len(os.sched_getaffinity(0))
    workers = [int(x) for x in args.workers.split(",")] if args.workers else list(range(1, ncpu + 1))
    skipped = {w: "not in the built-in driver (lockscope-workload --list)" for w in names if w not in builtin}
    todo = [w for w in names if w in builtin]
    for w, why in skipped.items():
        print(f"skip {w}: {why}", file=sys.stderr)

    def on_term(signum, frame):
        raise KeyboardInterrupt      # unwind: the run's tmpfs is unmounted on the way out

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    become_subreaper()
    results = []
    for name in todo:
        for n in workers:
            fx, ours, ratios, cpu_ratios, notes = [], [], [], [], set()
            for r in range(args.rounds):
                order = ("fxmark", "lockscope") if r % 2 == 0 else ("lockscope", "fxmark")
                got = {}
                try:
                    for who in order:
                        with fresh_tmpfs(args.scratch, f"size={args.size},nr_inodes={args.inodes}") as mnt:
                            if who == "fxmark":
                                got[who], got["fx_cpu"] = run_fxmark(args.fxmark, name, n, args.duration, mnt)
                            else:
                                got[who], got["ls_cpu"], ran_out = run_lockscope(driver, name, n, args.duration,
                                                                                 mnt, args.no_latency)
                                if ran_out:
                                    notes.add("lockscope workers ran out of pre-created files")
                except (RuntimeError, subprocess.TimeoutExpired, subprocess.CalledProcessError) as e:
                    notes.add(str(e).splitlines()[0][:200])
                    print(f"  {name} w{n} round {r + 1}: {e}", file=sys.stderr)
                    continue
                fx.append(got["fxmark"])
                ours.append(got["lockscope"])
                ratios.append(got["lockscope"] / got["fxmark"])
                cpu_ratios.append(got["ls_cpu"] / got["fx_cpu"])
                print(f"  {name} w{n} round {r + 1}: fxmark {got['fxmark']:,.0f}  lockscope "
                      f"{got['lockscope']:,.0f}  ratio {ratios[-1]:.3f}  CPU/op ratio {cpu_ratios[-1]:.3f}",
                      file=sys.stderr, flush=True)
            results.append({"workload": name, "workers": n, "fxmark": fx, "lockscope": ours, "ratios": ratios,
                            "cpu_per_op_ratios": cpu_ratios, "notes": sorted(notes)})

    print(f"\nops/s, median of {args.rounds} alternating pairs, {args.duration} s each, tmpfs "
          f"(size={args.size}, nr_inodes={args.inodes}); ratio = lockscope / FxMark, median of the pairs' "
          "ratios;\nCPU/op = CPU time (user+sys, set-up included) per operation, lockscope / FxMark "
          "(below 1: lockscope spends less per op)\n")
    print("| workload | workers | FxMark ops/s | lockscope ops/s | ops/s ratio | min..max | CPU/op ratio | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for res in results:
        if res["ratios"]:
            print(f"| {res['workload']} | {res['workers']} | {statistics.median(res['fxmark']):,.0f} | "
                  f"{statistics.median(res['lockscope']):,.0f} | **{statistics.median(res['ratios']):.3f}** | "
                  f"{min(res['ratios']):.2f}..{max(res['ratios']):.2f} | "
                  f"{statistics.median(res['cpu_per_op_ratios']):.3f} | {'; '.join(res['notes'])} |")
        else:
            print(f"| {res['workload']} | {res['workers']} | — | — | — | — | — | failed: {'; '.join(res['notes'])} |")
    for w, why in skipped.items():
        print(f"| {w} | | | | | | | skipped: {why} |")
    if args.json:
        args.json.write_text(json.dumps({"duration_s": args.duration, "rounds": args.rounds, "results": results,
                                         "skipped": skipped}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
