"""The `lockscope` command: run, sweep, analyze, report, doctor, list."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from lockscope import __version__, atomicio, record, scratch, textout
from lockscope.probe import DEFAULT_SAMPLE_HZ
from lockscope.errors import (EXIT_INTERRUPTED, EXIT_USAGE, EnvironmentProblem, Interrupted, LockscopeError,
                              UsageError)

DEFAULT_WORKLOADS = ["MWRM", "DWOM", "MWCM", "MWCL", "mmap"]
DEFAULT_FS = ["tmpfs", "ext4"]
DEFAULT_DURATION = 3.0
DEFAULT_WARMUP = 1.0
DEFAULT_INTERVAL = 1.0
MAX_WORKERS_PER_CPU = 64

EPILOG = """\
examples:
  lockscope run MWRM --fs tmpfs --workers 2 --duration 3 --out results/mwrm
  lockscope run --workers 4 --duration 10 --out results/app -- ./mybench --threads {n}
  lockscope sweep MWRM,DWOM --fs tmpfs,ext4 --workers 1,2 --out results/sweep
  lockscope analyze results/sweep --json
  lockscope report results/sweep            # writes results/sweep/report/index.html
  lockscope export results/sweep            # PDF/SVG figures, CSV/LaTeX table: results/sweep/exports
  lockscope compare results/before results/after [--html compare.html]

exit codes: 0 ok, 1 a run failed, 2 bad input, 3 this machine lacks something (root, BTF, a tool),
130 interrupted (finished points are kept).
"""


def _ncpus() -> int:
    return len(os.sched_getaffinity(0))


def parse_workers(text: str) -> list[int]:
    """'2' | '1,2,4' | '1-4' -> sorted distinct worker counts."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
    except ValueError:
        raise UsageError(f"--workers {text!r}: expected a count, a list (1,2,4) or a range (1-4)") from None
    return sorted(out)


def check_workers(counts: list[int], force: bool, infos: list[dict] | None = None) -> None:
    """Worker counts: at most 64 per CPU unless --force, except for workloads
    whose tasks mostly sleep (catalog many_tasks, e.g. syncs), which may use
    up to their max_workers; no workload goes beyond its max_workers."""
    limit = MAX_WORKERS_PER_CPU * _ncpus()
    infos = infos or []
    for n in counts:
        if n < 1:
            raise UsageError(f"--workers {n}: needs at least 1 worker")
        if n > limit and not force and not (infos and all(info.get("many_tasks") for info in infos)):
            raise UsageError(
                f"--workers {n} is more than {MAX_WORKERS_PER_CPU} per CPU (this machine lets lockscope use "
                f"{_ncpus()}): at that level a run measures the scheduler, not the workload",
                "use fewer workers, or pass --force to run it anyway")
        for info in infos:
            if info.get("max_workers") and n > info["max_workers"]:
                raise UsageError(f"--workers {n}: workload {info['name']} runs at most {info['max_workers']} workers")


def parse_params(items: list[str] | None) -> dict[str, str]:
    """--param KEY=VALUE (repeatable) -> {KEY: VALUE}."""
    out = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--param {item!r}: expected KEY=VALUE, e.g. --param files=128")
        out[key.strip()] = value.strip()
    return out


def check_interval(interval: float) -> None:
    if interval < 0:
        raise UsageError(f"--interval {interval:g}: must be 0 (off) or more seconds")


def check_sample_hz(hz: int) -> None:
    if not 0 <= hz <= 10000:
        raise UsageError(f"--sample-hz {hz}: must be between 0 and 10000")


def check_duration(duration: float | None, warmup: float, required: bool = True) -> None:
    if duration is None:
        if required:
            raise UsageError("--duration is required")
        return
    if not duration > 0:
        raise UsageError(f"--duration {duration:g}: must be more than 0 seconds")
    if warmup < 0:
        raise UsageError(f"--warmup {warmup:g}: must be 0 or more seconds")


def _split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def _common_run_args(p: argparse.ArgumentParser, multi: bool) -> None:
    p.add_argument("--fs", default=None,
                   help="file-system setup" + ("s, comma-separated" if multi else "") +
                        f" ({', '.join(scratch.FS_SETUPS)}; default "
                        f"{','.join(DEFAULT_FS) if multi else 'tmpfs'}; a command gets one only if asked, "
                        "and finds it at {dir})")
    p.add_argument("--workers", default=None,
                   help="worker counts: 1,2,4 or 1-4 (default: 1 to the number of CPUs)" if multi
                   else "worker count (default: the number of CPUs)")
    p.add_argument("--duration", type=float, default=None,
                   help=f"timed window in seconds (default {DEFAULT_DURATION:g}; a command without it runs "
                        "to completion)")
    p.add_argument("--warmup", type=float, default=DEFAULT_WARMUP,
                   help=f"seconds of warm-up before the timed window (default {DEFAULT_WARMUP:g})")
    p.add_argument("--out", type=Path, default=None,
                   help="results directory; run records go to OUT/runs/ (default: a new directory under "
                        "./lockscope-results/)")
    p.add_argument("--no-probe", action="store_true", help="measure throughput only, without the BPF probes")
    p.add_argument("--scratch", type=Path, default=scratch.DEFAULT_SCRATCH,
                   help=f"where file systems are created and mounted (default {scratch.DEFAULT_SCRATCH})")
    p.add_argument("--cpus", default=None, help="pin workers round-robin to these CPUs (e.g. 0,1)")
    p.add_argument("--name", default=None, help="name of a profiled command in the results (default: its program)")
    p.add_argument("--throughput-regex", default=None,
                   help="for a command: regular expression whose first group, in its output, is its throughput")
    p.add_argument("--sample-hz", type=int, default=DEFAULT_SAMPLE_HZ,
                   help=f"on-CPU samples per second per CPU, which measure rwsem spinning (default "
                        f"{DEFAULT_SAMPLE_HZ}; more is finer and costs more; 0: none)")
    p.add_argument("--system-wide", action="store_true",
                   help="count the lock waits of every task on the machine, not only the workload's")
    p.add_argument("--force", action="store_true", help="allow more than 64 workers per CPU")
    p.add_argument("--device", default=None, metavar="PATH",
                   help="make the disk file systems on this block device instead of a RAM-backed loop image; "
                        "it is FORMATTED at every point (needs --yes-format-device with the same path)")
    p.add_argument("--yes-format-device", default=None, metavar="PATH",
                   help="confirm that --device PATH may be formatted: repeat its path")
    p.add_argument("--param", action="append", default=None, metavar="KEY=VALUE",
                   help="a parameter of the built-in workload (repeatable; see `lockscope list`)")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL,
                   help=f"time series: ops/s and latency percentiles every this many seconds of the timed "
                        f"window (default {DEFAULT_INTERVAL:g}; 0: off)")
    p.add_argument("--no-latency", action="store_true",
                   help="count operations without timing each one (no latency histograms)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="lockscope", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Lock-contention profiler and scalability analyzer: runs a workload at several worker "
                    "counts, watches the kernel with eBPF, and names the lock behind each scalability collapse.")
    ap.add_argument("--version", action="version", version=f"lockscope {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")

    p = sub.add_parser("run", help="measure one point: a built-in workload, or any command after --",
                       description="Measure one point. `lockscope run WORKLOAD ...` runs a built-in workload; "
                                   "`lockscope run ... -- CMD ARGS` profiles any command, with {n} in its "
                                   "arguments replaced by the worker count and {dir} by a fresh file system "
                                   "(with --fs).")
    p.add_argument("workload", nargs="?", help="built-in workload (see `lockscope list`)")
    _common_run_args(p, multi=False)
    p.add_argument("--json", action="store_true", help="print the run record as JSON")

    p = sub.add_parser("sweep", help="measure every workload x fs x worker count (resumable)",
                       description="Measure every (workload, file system, worker count) point, one run record per "
                                   "point written atomically; rerunning skips finished points.")
    p.add_argument("workloads", nargs="?", default=None,
                   help=f"comma-separated built-in workloads (default {','.join(DEFAULT_WORKLOADS)})")
    _common_run_args(p, multi=True)

    p = sub.add_parser("analyze", help="scaling curves, collapse points and root causes of a results directory")
    p.add_argument("dir", type=Path)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("report", help="write DIR/report/index.html")
    p.add_argument("dir", type=Path)
    p.add_argument("--out", type=Path, default=None, help="report directory (default DIR/report)")

    p = sub.add_parser("export", help="figures (PDF, SVG), bottleneck table (CSV, LaTeX) and run records for papers",
                       description="Write DIR/exports (or --out): per experiment the throughput figure (with ideal, "
                                   "USL fit and the what-if bound) and the lock wait share figure as PDF and SVG; "
                                   "bottlenecks.csv and bottlenecks.tex (booktabs); analysis.json; the run records.")
    p.add_argument("dir", type=Path)
    p.add_argument("--out", type=Path, default=None, help="exports directory (default DIR/exports)")

    p = sub.add_parser("compare", help="compare two results directories experiment by experiment",
                       description="Compare two results directories (before/after a kernel patch, two file "
                                   "systems, two machines): per experiment, matched by workload and file system, "
                                   "the change in throughput at each worker count and in each wait's share.")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--fs-a", default=None, help="compare this file system of A ...")
    p.add_argument("--fs-b", default=None, help="... with this one of B (both or neither)")
    p.add_argument("--workload", default=None, help="only this workload")
    p.add_argument("--json", action="store_true", help="machine-readable output (lockscope.compare/1)")
    p.add_argument("--html", type=Path, default=None, help="also write an offline HTML page here")

    p = sub.add_parser("doctor", help="what works on this machine, and why not; leftovers of killed runs")
    p.add_argument("--clean", action="store_true", help="release leftover mounts, loop devices and directories")
    p.add_argument("--scratch", type=Path, default=scratch.DEFAULT_SCRATCH)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("list", help="built-in workloads and file-system setups")
    p.add_argument("--json", action="store_true")
    return ap


# ---- commands -------------------------------------------------------------

def _require_run_environment(probe: bool) -> None:
    if probe:
        from lockscope.probe import preflight
        preflight()
    elif os.geteuid() != 0:
        raise EnvironmentProblem("lockscope needs root to mount its scratch file systems",
                                 "run it with sudo (or as root)")


def _default_out(name: str) -> Path:
    return Path("lockscope-results") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _cpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        cpus = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"--cpus {text!r}: expected a list of CPU numbers such as 0,1") from None
    allowed = os.sched_getaffinity(0)
    bad = [c for c in cpus if c not in allowed]
    if not cpus or bad:
        raise UsageError(f"--cpus {text!r}: CPUs {bad or cpus} are not available here "
                         f"(allowed: {','.join(map(str, sorted(allowed)))})")
    return cpus


def _check_command(command: list[str]) -> None:
    exe = command[0]
    found = shutil.which(exe) if "/" not in exe else (exe if os.access(exe, os.X_OK) and
                                                     not os.path.isdir(exe) else None)
    if not found:
        raise UsageError(f"command not found or not executable: {exe}",
                         "give the program's path, or a program on PATH, after --")


def _command_name(args, command: list[str]) -> str:
    name = args.name or Path(command[0]).name
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:40] or "command"


def cmd_run(args, command: list[str] | None) -> int:
    from lockscope import workloads
    from lockscope.runner import NO_FS, PointSpec, run_point

    if command is not None and not command:
        raise UsageError("nothing after --", "give the command to profile: lockscope run ... -- CMD ARGS")
    if command and args.workload:
        raise UsageError(f"both a workload ({args.workload}) and a command were given", "give one of them")
    if not command and not args.workload:
        raise UsageError("no workload given", "name a built-in workload (see `lockscope list`) or a command after --")
    workers = parse_workers(args.workers)[0] if args.workers else _ncpus()
    if args.workers and len(parse_workers(args.workers)) != 1:
        raise UsageError("run measures one worker count", "use `lockscope sweep` for several")
    params = parse_params(args.param)
    check_interval(args.interval)
    if command and params:
        raise UsageError("--param goes with a built-in workload, not with a command")
    check_workers([workers], args.force, [workloads.check_workload(args.workload)] if args.workload else None)
    duration = args.duration if (command or args.duration is not None) else DEFAULT_DURATION
    check_duration(duration, args.warmup, required=not command)
    check_sample_hz(args.sample_hz)
    cpus = _cpus(args.cpus)
    if command:
        _check_command(command)
        name = _command_name(args, command)
        fs = args.fs or NO_FS
        if fs != NO_FS:
            scratch.check_setup(fs)
        device = _device(args, [fs])
        spec = PointSpec(workload=name, fs=fs, workers=workers, duration=duration, warmup=0.0, command=command,
                         throughput_regex=args.throughput_regex, probe=not args.no_probe,
                         scratch_root=args.scratch, cpus=cpus, sample_hz=args.sample_hz,
                         system_wide=args.system_wide)
    else:
        info = workloads.check_workload(args.workload)
        fs = args.fs or "tmpfs"
        if "," in fs:
            raise UsageError("run measures one file system", "use `lockscope sweep` for several")
        if info.get("needs_dir", True):
            scratch.check_setup(fs)
        else:
            fs = NO_FS
        device = _device(args, [fs])
        spec = PointSpec(workload=args.workload, fs=fs, workers=workers, duration=duration, warmup=args.warmup,
                         probe=not args.no_probe, scratch_root=args.scratch, cpus=cpus, sample_hz=args.sample_hz,
                         system_wide=args.system_wide, params=workloads.check_params(args.workload, params),
                         interval=args.interval, latency=not args.no_latency)
    spec.device = device
    _require_run_environment(spec.probe)
    out = args.out or _default_out(spec.id)
    rec = run_point(spec)
    path = out / "runs" / f"{spec.id}.json"
    record.save(rec, path)
    if args.json:
        json.dump(record.to_dict(rec), sys.stdout, indent=1)
        print()
    else:
        print(textout.summarize(rec))
        print(f"record: {path}\nnext:   lockscope report {out}")
    return 0


def cmd_sweep(args, command: list[str] | None) -> int:
    from lockscope import workloads
    from lockscope.sweep import SweepSpec, run_sweep

    if command is not None and not command:
        raise UsageError("nothing after --", "give the command to profile: lockscope sweep ... -- CMD ARGS")
    if command and args.workloads:
        raise UsageError("both workloads and a command were given", "give one of them")
    workers = parse_workers(args.workers) if args.workers else list(range(1, _ncpus() + 1))
    params = parse_params(args.param)
    check_interval(args.interval)
    if command and params:
        raise UsageError("--param goes with a built-in workload, not with a command")
    check_workers(workers, args.force, None if command else
                  [workloads.check_workload(w) for w in (args.workloads or ",".join(DEFAULT_WORKLOADS)).split(",")
                   if w])
    duration = args.duration if (command or args.duration is not None) else DEFAULT_DURATION
    check_duration(duration, args.warmup, required=not command)
    check_sample_hz(args.sample_hz)
    if command:
        _check_command(command)
        names = [_command_name(args, command)]
        fss = [f for f in (args.fs or "none").split(",") if f]
    else:
        names = [w for w in (args.workloads or ",".join(DEFAULT_WORKLOADS)).split(",") if w]
        for w in names:
            workloads.check_workload(w)
        checked = {}
        for w in names:       # each --param must belong to every workload of the sweep
            checked = workloads.check_params(w, params)
        params = checked
        fss = [f for f in (args.fs or ",".join(DEFAULT_FS)).split(",") if f]
    fss, unavailable = _available_fs(fss)
    device = _device(args, fss)
    spec = SweepSpec(workloads=names, fs=fss, workers=workers, duration=duration,
                     warmup=0.0 if command else args.warmup, command=command,
                     throughput_regex=args.throughput_regex, probe=not args.no_probe,
                     scratch_root=str(args.scratch), cpus=_cpus(args.cpus), sample_hz=args.sample_hz,
                     system_wide=args.system_wide, params=params, interval=args.interval,
                     latency=not args.no_latency)
    spec.device, spec.unavailable_fs = device, unavailable
    _require_run_environment(spec.probe)
    out = args.out or _default_out("sweep")
    outcome = run_sweep(spec, out)
    print(f"{len(outcome.done)} points measured, {len(outcome.skipped)} already there, "
          f"{len(outcome.failed)} failed; results in {out}\nnext: lockscope report {out}")
    for pid, msg in outcome.failed.items():
        print(f"failed: {pid}: {msg}", file=sys.stderr)
    for fs, why in spec.unavailable_fs.items():
        print(f"skipped: file system {fs}: {why}", file=sys.stderr)
    return 1 if outcome.failed else 0


def _available_fs(fss: list[str]) -> tuple[list[str], dict[str, str]]:
    """The sweep's setups that exist here, and those skipped with the reason
    (an unknown name is bad input; a known one missing here is skipped)."""
    keep, skipped = [], {}
    for fs in fss:
        if fs == "none":
            keep.append(fs)
            continue
        if fs not in scratch.FS_SETUPS:
            scratch.check_setup(fs)       # raises the usage error
        ok, why = scratch.availability(fs)
        if ok:
            keep.append(fs)
        else:
            skipped[fs] = why
            print(f"lockscope: warning: skipping file system '{fs}': {why}", file=sys.stderr)
    if not keep:
        raise EnvironmentProblem(f"none of the file systems asked for is available here "
                                 f"({'; '.join(f'{k}: {v}' for k, v in skipped.items())})",
                                 "run `lockscope doctor`, or choose others (see `lockscope list`)")
    return keep, skipped


def _device(args, fss: list[str]) -> str | None:
    """--device, checked (refusals are usage errors), for disk setups only."""
    from lockscope.device import check_device

    device = check_device(args.device, args.yes_format_device)
    if device:
        bad = [f for f in fss if f not in scratch.FS_SETUPS or not scratch.FS_SETUPS[f].needs_device]
        if bad:
            raise UsageError(f"--device is for disk file systems; {', '.join(bad)} "
                             f"{'uses' if len(bad) == 1 else 'use'} none",
                             "choose --fs among " + ", ".join(n for n, s in scratch.FS_SETUPS.items()
                                                                if s.needs_device))
    return device


def cmd_analyze(args) -> int:
    from lockscope.analyzer.analysis_json import to_json
    from lockscope.analyzer.analyze import analyze, load_records

    exps = analyze(load_records(args.dir))
    if args.json:
        json.dump(to_json(exps), sys.stdout, indent=1)
        print()
        return 0
    for e in exps:
        print("\n".join(textout.experiment_lines(e)))
        print()
    return 0


def cmd_report(args) -> int:
    from lockscope.reports.html import write_report

    path = write_report(args.dir, args.out)
    print(f"report: {path}")
    return 0


def cmd_export(args) -> int:
    from lockscope.reports.exports import write_exports

    paths = write_exports(args.dir, args.out)
    out = args.out or Path(args.dir) / "exports"
    figs = sum(1 for p in paths if p.parent.name == "figures")
    runs = sum(1 for p in paths if p.parent.name == "runs")
    print(f"exports: {out}\n  {figs} figures (PDF and SVG) in figures/, bottlenecks.csv, bottlenecks.tex, "
          f"analysis.json, {runs} run records in runs/")
    return 0


def cmd_compare(args) -> int:
    from lockscope.reports.compare import compare, render_html, render_text

    doc = compare(args.a, args.b, args.fs_a, args.fs_b, args.workload)
    if args.html:
        html = render_html(doc)
        atomicio.write_text(args.html, html)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        sys.stdout.write(render_text(doc))
        if args.html:
            print(f"page: {args.html}")
    return 0


def cmd_list(args) -> int:
    from lockscope import workloads

    cat = workloads.catalog()
    fss = {name: scratch.availability(name) for name in scratch.FS_SETUPS}
    if args.json:
        json.dump({"workloads": list(cat.values()),
                   "fs": [{"name": n, "description": scratch.FS_SETUPS[n].description, "available": ok,
                           "reason": why} for n, (ok, why) in fss.items()]}, sys.stdout, indent=1)
        print()
        return 0
    print("workloads:")
    for w in cat.values():
        print(f"  {w['name']:<8} {w['operation']}\n           sharing: {w['sharing']}; stresses: {w['component']}"
              + ("; threads of one process" if w.get("model") == "thread" else ""))
        if len(w.get("op_names", [])) > 1:
            print(f"         operations timed: {', '.join(w['op_names'])}")
        for p in w.get("params", []):
            print(f"         --param {p['name']}=N  {p['help']} (default {p['default']}, {p['min']}..{p['max']})")
        if w.get("many_tasks"):
            print(f"         up to {w['max_workers']} workers without --force (they mostly sleep in I/O)")
    print("\nfile systems (--fs):")
    for name, (ok, why) in fss.items():
        print(f"  {name:<14} {scratch.FS_SETUPS[name].description}" + ("" if ok else f"  [unavailable: {why}]"))
    return 0


def cmd_doctor(args) -> int:
    from lockscope.doctor import diagnose, render

    if args.clean:
        for line in scratch.clean_leftovers(args.scratch) or ["nothing to clean"]:
            print(line)
        return 0
    checks = diagnose(args.scratch)
    if args.json:
        json.dump(checks, sys.stdout, indent=1)
        print()
    else:
        print(render(checks))
    return 0 if checks["ready"] else 3


# ---- entry point ----------------------------------------------------------

def _install_signal_handlers() -> None:
    def on_signal(signum, frame):
        # first signal: unwind (probes, workers, mounts are released on the
        # way out); later ones are ignored so that the cleanup can finish
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signum)

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, command = _split_command(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return EXIT_USAGE
    if command is not None and args.cmd not in ("run", "sweep"):
        parser.error(f"'--' and a command only go with run and sweep, not {args.cmd}")
    _install_signal_handlers()
    try:
        if args.cmd == "run":
            return cmd_run(args, command)
        if args.cmd == "sweep":
            return cmd_sweep(args, command)
        return {"analyze": cmd_analyze, "report": cmd_report, "list": cmd_list, "doctor": cmd_doctor,
                "export": cmd_export, "compare": cmd_compare}[args.cmd](args)
    except LockscopeError as e:
        print(f"lockscope: error: {e.message}", file=sys.stderr)
        if e.fix:
            print(f"  fix: {e.fix}", file=sys.stderr)
        return e.exit_code
    except (KeyboardInterrupt, Interrupted) as e:
        sig = "SIGINT" if isinstance(e, KeyboardInterrupt) else signal.Signals(e.signum).name
        print(f"lockscope: interrupted ({sig}); probes, workers and file systems were released, "
              "finished points are kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
