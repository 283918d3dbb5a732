"""The command line's grammar: argparse for every subcommand, the options
shared by run and sweep, their defaults, and the split of `-- CMD ARGS`."""
from __future__ import annotations

import argparse
from pathlib import Path

from lockscope import __version__
from lockscope.machine import scratch
from lockscope.measure.probe import DEFAULT_ATTACH_BUDGET, DEFAULT_SAMPLE_HZ
from lockscope.validate import MAX_WORKERS_PER_CPU

DEFAULT_WORKLOADS = ["MWRM", "DWOM", "MWCM", "MWCL", "mmap"]
DEFAULT_FS = ["tmpfs", "ext4"]
DEFAULT_DURATION = 3.0
DEFAULT_WARMUP = 1.0
DEFAULT_INTERVAL = 1.0
# sweep: each point run 3 times, interleaved, with 1.5-s windows after 0.5 s
# of warm-up: intervals at every point, and `make report` (20 points) within
# 4 minutes on 2 CPUs (README, "Repeats and intervals")
DEFAULT_REPEATS = 3
SWEEP_DURATION = 1.5
SWEEP_WARMUP = 0.5

EPILOG = """\
examples:
  lockscope run MWRM --fs tmpfs --workers 2 --duration 3 --out results/mwrm
  lockscope run --workers 4 --duration 10 --out results/app -- ./mybench --threads {n}
  lockscope sweep MWRM,DWOM --fs tmpfs,ext4 --workers 1,2 --out results/sweep
  lockscope sweep rocksdb-readrandom,dbench --fs ext4 --workers 1,2 --out results/apps
  lockscope attach --pid 1234 --duration 10 --out results/server   # a running process (or --comm, --cgroup)
  lockscope top --pid 1234                  # live view of its lock waits (q quits; --batch 3: plain text)
  lockscope sweep --workers 1,2,4 --target comm:myserver -- ./loadgen --clients {n}   # the server is the work
  lockscope sweep pgbench --fs tmpfs --workers 1,2,4 --out results/pg   # PostgreSQL, a fresh cluster per point
  lockscope analyze results/sweep --json
  lockscope report results/sweep            # writes results/sweep/report/index.html
  lockscope export results/sweep            # figures, tables, pprof profiles: results/sweep/exports
  lockscope compare results/before results/after [--html compare.html]

exit codes: 0 ok, 1 a run failed, 2 bad input (also a path that cannot be written, a spoiled run record,
skipped with a warning, or an --out another sweep uses), 3 this machine lacks something (root, BTF,
a tool, disk space), 130 interrupted (finished points are kept). README.md, "Troubleshooting", lists them.
"""


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """argv -> (lockscope's arguments, the command after `--` or None)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def _max_overhead_option(p: argparse.ArgumentParser, default: float | None) -> None:
    """--max-overhead of run, sweep and attach (probes/budget.c)."""
    p.add_argument("--max-overhead", type=float, default=default, metavar="PCT",
                   help="lockscope's cost budget in percent of the machine's CPUs: measured every second, and "
                        "over it the probe samples fewer stacks, timed waits and object snapshots (the record "
                        "and the report say what was shed; names stay, precision drops) " +
                        (f"(default {default:g}; 0: none)" if default else "(default: none)"))


def _run_options(p: argparse.ArgumentParser, multi: bool) -> None:
    """The options of run and sweep (multi: several file systems and worker counts)."""
    p.add_argument("--fs", default=None,
                   help="file-system setup" + ("s, comma-separated" if multi else "") +
                        f" ({', '.join(scratch.FS_SETUPS)}; default "
                        f"{','.join(DEFAULT_FS) if multi else 'tmpfs'}; a command gets one only if asked, "
                        "and finds it at {dir})")
    p.add_argument("--workers", default=None,
                   help="worker counts: 1,2,4 or 1-4 (default: 1 to the number of CPUs)" if multi
                   else "worker count (default: the number of CPUs)")
    p.add_argument("--duration", type=float, default=None,
                   help=f"timed window in seconds (default {SWEEP_DURATION if multi else DEFAULT_DURATION:g}; a "
                        "command without it runs "
                        "to completion)")
    p.add_argument("--warmup", type=float, default=SWEEP_WARMUP if multi else DEFAULT_WARMUP,
                   help=f"seconds of warm-up before the timed window (default "
                        f"{SWEEP_WARMUP if multi else DEFAULT_WARMUP:g})")
    p.add_argument("--out", type=Path, default=None,
                   help="results directory; run records go to OUT/runs/ (default: a new directory under "
                        "./lockscope-results/)")
    p.add_argument("--no-probe", action="store_true", help="measure throughput only, without the BPF probes")
    p.add_argument("--scratch", type=Path, default=scratch.DEFAULT_SCRATCH,
                   help="where file systems are created and mounted (default "
                        f"{scratch.DEFAULT_SCRATCH}); a directory that holds other files gets a subfolder "
                        f"'{scratch.OWN_SUBFOLDER}' of lockscope's own, and nothing else there is touched")
    p.add_argument("--cpus", default=None, help="pin workers round-robin to these CPUs (e.g. 0,1)")
    p.add_argument("--name", default=None, help="name of a profiled command in the results (default: its program)")
    p.add_argument("--throughput-regex", default=None,
                   help="for a command: regular expression whose first group, in its output, is its throughput")
    p.add_argument("--sample-hz", type=int, default=DEFAULT_SAMPLE_HZ,
                   help=f"on-CPU samples per second per CPU, which measure rwsem spinning (default "
                        f"{DEFAULT_SAMPLE_HZ}; more is finer and costs more; 0: none)")
    _max_overhead_option(p, None)
    p.add_argument("--target", default=None, metavar="pid:P[,P] | comm:NAME | cgroup:PATH",
                   help="with a command: these running processes (a server) are the measured work, traced with "
                        "what they fork; the command only drives their load and is a role of its own (driver). "
                        "The target is never signalled; only the command is stopped")
    p.add_argument("--system-wide", action="store_true",
                   help="count the lock waits of every task on the machine, not only the workload's")
    p.add_argument("--force", action="store_true", help=f"allow more than {MAX_WORKERS_PER_CPU} workers per CPU")
    p.add_argument("--device", default=None, metavar="PATH",
                   help="make the disk file systems on this block device instead of a RAM-backed loop image; "
                        "it is FORMATTED at every point (needs --yes-format-device with the same path)")
    p.add_argument("--yes-format-device", default=None, metavar="PATH",
                   help="confirm that --device PATH may be formatted: repeat its path")
    p.add_argument("--param", action="append", default=None, metavar="KEY=VALUE",
                   help="a parameter of the built-in workload (repeatable; see `lockscope list`)")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL, help="time series: ops/s and latency "
                   f"percentiles every this many seconds of the timed window (default {DEFAULT_INTERVAL:g}; 0: off)")
    p.add_argument("--no-latency", action="store_true",
                   help="count operations without timing each one (no latency histograms)")
    p.add_argument("--vmlinux", type=Path, default=None, metavar="PATH",
                   help="a System.map or vmlinux of the running kernel: names the global locks (static data of "
                        "the kernel image) by their variable, verified (default: /proc/kallsyms, when it lists "
                        "variables)")


TOP_DESCRIPTION = ("A live view of running processes lockscope did not start: every --interval seconds the top lock "
               "waits of that interval (name, tier, kind, share of the targets' time, waits/s, longest wait), the "
               "roles' time split of the interval, and throughput where known. Keys: s, w, m sort by share, "
               "waits/s, max wait; space freezes the screen; q quits (so do Ctrl-C, SIGTERM and SIGHUP). "
               "It ends by itself when the targets exit. The targets are never stopped or signalled, and "
               "nothing stays attached after it ends. --batch N prints N intervals as plain text instead "
               "(like top -b).")


def _add_top_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("top", help="live view of the lock waits of running processes (pid, comm, cgroup)",
                       description=TOP_DESCRIPTION)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid", default=None, metavar="P[,P...]",
                     help="these processes, with their threads and the children they fork")
    who.add_argument("--comm", default=None, metavar="NAME", help="the processes named NAME (/proc/PID/comm)")
    who.add_argument("--cgroup", default=None, metavar="PATH",
                     help="the processes of this cgroup v2 directory and those below it")
    who.add_argument("--system-wide", action="store_true",
                     help="every task on the machine (shares are of the allowed CPUs' time)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds per refresh (default 1; at least 0.2)")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="print N intervals as plain text to stdout and exit (no terminal needed)")
    p.add_argument("--sort", choices=("share", "waits/s", "max"), default="share",
                   help="the waits' order at the start (default share; keys s, w, m change it)")
    p.add_argument("--workers", type=int, default=None,
                   help="the thread count the shares are relative to (default: the targets' threads at the start)")
    p.add_argument("--sample-hz", type=int, default=DEFAULT_SAMPLE_HZ,
                   help=f"on-CPU samples per second per CPU (default {DEFAULT_SAMPLE_HZ}; 0: none)")
    p.add_argument("--vmlinux", type=Path, default=None, metavar="PATH",
                   help="a System.map or vmlinux of the running kernel: names global kernel locks by variable")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; the command after `--` is split off first (split_command)."""
    ap = argparse.ArgumentParser(
        prog="lockscope", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Lock-contention profiler and scalability analyzer: runs a workload at several worker "
                    "counts, watches the kernel with eBPF, and names the lock behind each scalability collapse.")
    ap.add_argument("--version", action="version", version=f"lockscope {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    _add_measure_commands(sub)
    _add_attach_command(sub)
    _add_top_command(sub)
    _add_result_commands(sub)
    _add_confirm_command(sub)
    _add_machine_commands(sub)
    return ap


def _add_measure_commands(sub: argparse._SubParsersAction) -> None:
    """run and sweep."""
    p = sub.add_parser("run", help="measure one point: a built-in workload, or any command after --",
                       description="Measure one point. `lockscope run WORKLOAD ...` runs a built-in workload; "
                                   "`lockscope run ... -- CMD ARGS` profiles any command, with {n} in its "
                                   "arguments replaced by the worker count and {dir} by a fresh file system "
                                   "(with --fs).")
    p.add_argument("workload", nargs="?",
                   help="built-in or application workload (rocksdb-fillrandom, dbench, ...; see `lockscope list`)")
    _run_options(p, multi=False)
    p.add_argument("--json", action="store_true", help="print the run record as JSON")

    p = sub.add_parser("sweep", help="measure every workload x fs x worker count (resumable)",
                       description="Measure every (workload, file system, worker count) point, one run record per "
                                   "point written atomically; rerunning skips finished points.")
    p.add_argument("workloads", nargs="?", default=None,
                   help=f"comma-separated built-in or application workloads (default {','.join(DEFAULT_WORKLOADS)})")
    _run_options(p, multi=True)
    p.add_argument("--repeat", type=int, default=None, metavar="K",
                   help=f"run every point K times, interleaved across points; analyze gives medians with 95%% "
                        f"intervals and decides only where they do (default {DEFAULT_REPEATS}; 1: one run, "
                        "no interval)")


def _add_attach_command(sub: argparse._SubParsersAction) -> None:
    """attach: profile processes lockscope did not start."""
    p = sub.add_parser("attach", help="profile running processes lockscope did not start (pid, comm, cgroup)",
                       description="Profile running processes for --duration seconds or until Ctrl-C (SIGINT or "
                                   "SIGTERM end the window and the record is still written), or until they exit. "
                                   "The targets are never stopped, signalled or killed. The result is a run "
                                   "record of kind attach in OUT/runs/, read by analyze, report, export and "
                                   "compare; throughput is unknown (lockscope does not see the targets' work).")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid", default=None, metavar="P[,P...]",
                     help="these processes, with their threads and the children they fork during the window")
    who.add_argument("--comm", default=None, metavar="NAME",
                     help="the processes whose name (/proc/PID/comm) is NAME at the start")
    who.add_argument("--cgroup", default=None, metavar="PATH",
                     help="the processes of this cgroup v2 directory and those below it at the start (e.g. "
                          "/sys/fs/cgroup/system.slice/foo.service; a relative path is below cgroup v2's mount; "
                          "a bare unit name, foo.service, is looked for below it)")
    who.add_argument("--system-wide", action="store_true",
                     help="every task on the machine: each program a role of its own; the work is the busiest "
                          "user-space roles (never kernel threads or the idle tasks)")
    p.add_argument("--duration", type=float, default=None,
                   help="seconds to profile (default: until Ctrl-C, SIGTERM, or the targets exit)")
    p.add_argument("--workers", type=int, default=None,
                   help="the worker count the shares are relative to (default: the targets' threads at the start; "
                        "system-wide: the CPUs)")
    p.add_argument("--name", default=None,
                   help="the workload name in the results (default: the target's comm, or the cgroup's name)")
    p.add_argument("--out", type=Path, default=None,
                   help="results directory; the run record goes to OUT/runs/ (default: a new directory under "
                        "./lockscope-results/)")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL,
                   help=f"time view: the lock waits every this many seconds (default {DEFAULT_INTERVAL:g}; 0: off)")
    p.add_argument("--sample-hz", type=int, default=DEFAULT_SAMPLE_HZ,
                   help=f"on-CPU samples per second per CPU (default {DEFAULT_SAMPLE_HZ}; 0: none)")
    _max_overhead_option(p, DEFAULT_ATTACH_BUDGET)
    p.add_argument("--vmlinux", type=Path, default=None, metavar="PATH",
                   help="a System.map or vmlinux of the running kernel: names global kernel locks by variable")
    p.add_argument("--json", action="store_true", help="print the run record as JSON")


def _add_result_commands(sub: argparse._SubParsersAction) -> None:
    """analyze, report, export and compare: they read a results directory."""
    p = sub.add_parser("analyze", help="scaling curves, collapse points and root causes of a results directory")
    p.add_argument("dir", type=Path)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--vmlinux", type=Path, default=None, metavar="PATH",
                   help="a System.map or vmlinux of the kernel the records were made on: names their global "
                        "locks by variable (verified)")

    _writer(sub, "report", "report directory (default DIR/report)", help="write DIR/report/index.html")
    _writer(sub, "export", "exports directory (default DIR/exports)",
            help="figures (PDF, SVG), bottleneck table (CSV, LaTeX), run records and pprof profiles",
            description="Write DIR/exports (or --out): per experiment the throughput figure (with ideal, "
                        "USL fit and the what-if bound) and the lock wait share figure as PDF and SVG; "
                        "bottlenecks.csv and bottlenecks.tex (booktabs); analysis.json; the run records; per point "
                        "pprof profiles (mutex, off-CPU, CPU) in pprof/ for go tool pprof.")

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


def _add_confirm_command(sub: argparse._SubParsersAction) -> None:
    """confirm: the root cause tested by delay injection."""
    p = sub.add_parser("confirm", help="test the root-cause lock by experiment: waits added inside its critical "
                                       "sections and, as the control, just outside them",
                       description="Run the collapse point of each experiment of DIR again, with a busy wait "
                                   "added inside the root-cause lock's critical sections and, as the control, "
                                   "the same wait just outside them, in alternating phases of one run; the "
                                   "workload's throughput response says whether the lock limits it: confirmed, "
                                   "not confirmed, or inconclusive, decided on 95% intervals; rounds are added "
                                   "while undecided, within --budget. Writes DIR/confirm/WORKLOAD-FS.json, read by analyze, "
                                   "report and export. A command experiment needs the command again after -- "
                                   "(as given to sweep: {n}, {dir}, {duration}) and a regex for its progress "
                                   "lines. Never attached processes.")
    p.add_argument("dir", type=Path, help="results directory of `lockscope sweep` or `run`")
    p.add_argument("--experiment", default=None, metavar="W[-FS][,...]",
                   help="only these experiments (workload, or workload-fs)")
    p.add_argument("--workers", type=int, default=None,
                   help="confirm at this point (default: the collapse point)")
    p.add_argument("--lock", default=None, metavar="NAME",
                   help="the lock to lengthen, as analyze names it (default: the root cause's)")
    p.add_argument("--delays", default=None, metavar="US[,US...]",
                   help="busy waits per acquisition in microseconds (default: chosen so that a serial lock "
                        "would lose about 9, 20 and 33%% of the throughput)")
    p.add_argument("--phase", type=float, default=1.5, help="seconds per phase (default 1.5)")
    p.add_argument("--rounds", type=int, default=2,
                   help="rounds over the delays before the verdict is first looked at (default 2)")
    p.add_argument("--budget", type=float, default=90.0, metavar="SECONDS",
                   help="the most seconds of phases: rounds are added while the verdict is inconclusive and the "
                        "next round fits (default 90)")
    p.add_argument("--discover", type=float, default=1.5,
                   help="seconds of the probe window that finds the lock in this run (default 1.5)")
    p.add_argument("--scratch", type=Path, default=scratch.DEFAULT_SCRATCH,
                   help=f"where the file system is made (default {scratch.DEFAULT_SCRATCH})")
    p.add_argument("--ops-regex", default=None, metavar="REGEX",
                   help="-- CMD: its output lines with a running count of operations (group 1), e.g. 'ops: ([0-9]+)'")
    p.add_argument("--rate-regex", default=None, metavar="REGEX",
                   help="-- CMD: its output lines with a rate (group 1), e.g. pgbench -P 1's "
                        "'progress: .* ([0-9.]+) tps'")
    p.add_argument("--throughput-regex", default=None, metavar="REGEX",
                   help="-- CMD: its throughput in the output it prints when it exits (group 1), e.g. "
                        "'ops/s: ([0-9.]+)': one run of the command per phase")
    p.add_argument("--run", type=float, default=3.0, metavar="SECONDS",
                   help="with --throughput-regex: each run's {duration} (default 3)")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")


def _writer(sub: argparse._SubParsersAction, name: str, out_help: str, **kw: str) -> None:
    """A command that reads DIR and writes into --out."""
    p = sub.add_parser(name, **kw)
    p.add_argument("dir", type=Path)
    p.add_argument("--out", type=Path, default=None, help=out_help)


def _add_machine_commands(sub: argparse._SubParsersAction) -> None:
    """doctor and list: this machine and what lockscope offers."""
    p = sub.add_parser("doctor", help="what works on this machine, and why not; leftovers of killed runs")
    p.add_argument("--clean", action="store_true", help="release what killed runs recorded making (process groups, mounts, loop devices, directories); never a live run's, never what no run recorded")
    p.add_argument("--scratch", type=Path, default=scratch.DEFAULT_SCRATCH,
                   help=f"the scratch root to check (default {scratch.DEFAULT_SCRATCH})")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("list", help="built-in and application workloads, and file-system setups")
    p.add_argument("--json", action="store_true")
