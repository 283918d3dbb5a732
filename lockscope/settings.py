"""What each command measures, from its options, one spec builder per mode:
`run` and `sweep` share their checks (RunSettings.from_args), then each
makes its own (point_spec: the runner's PointSpec; sweep_spec: a
SweepSpec); `attach` (attach_spec) checks its own with
the same validate functions, one per rule. The checks keep the order in
which the command line's errors are reported."""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from lockscope import validate
from lockscope.measure import apps, targets, workloads
from lockscope.machine import scratch
from lockscope.cliargs import DEFAULT_DURATION, DEFAULT_FS, DEFAULT_REPEATS, DEFAULT_WORKLOADS, SWEEP_DURATION
from lockscope.errors import UsageError
from lockscope.model.record import NO_FS
from lockscope.measure.attach import AttachSpec
from lockscope.measure.inject import MAX_KERNEL_NS
from lockscope.measure.runner import PointSpec
from lockscope.measure.sweep import SweepSpec


@dataclass
class RunSettings:
    """The options run and sweep share, parsed and checked."""
    names: list[str]                  # built-in workloads, or the profiled command's name
    command: list[str] | None         # the command after --
    workers: list[int]
    params: dict[str, str]            # --param, not yet checked against a workload
    duration: float | None            # None: a command runs to completion
    warmup: float                     # 0 for a command

    @classmethod
    def from_args(cls, args: argparse.Namespace, command: list[str] | None, workers: list[int],
                  names: list[str], default_duration: float = DEFAULT_DURATION) -> RunSettings:
        """Checks --param, --interval, --workers, --duration, --warmup and
        --sample-hz; `names`: the built-in workloads (ignored for a command)."""
        params = validate.parse_params(args.param)
        validate.check_interval(args.interval)
        if command and params:
            raise UsageError("--param goes with a built-in workload, not with a command")
        validate.check_workers(workers, args.force, None if command else
                               [workloads.check_workload(w) for w in names])
        duration = args.duration if (command or args.duration is not None) else default_duration
        validate.check_duration(duration, args.warmup, required=not command)
        validate.check_sample_hz(args.sample_hz)
        if command:
            names = [validate.command_name(args.name, command)]
        return cls(names=names, command=command, workers=workers, params=params, duration=duration,
                   warmup=0.0 if command else args.warmup)


def point_spec(args: argparse.Namespace, command: list[str] | None) -> PointSpec:
    """`lockscope run`: one built-in workload or command, one file system,
    one worker count."""
    validate.check_command_given(command, "run")
    _no_target(args, command)
    if command and args.workload:
        raise UsageError(f"both a workload ({args.workload}) and a command were given", "give one of them")
    if not command and not args.workload:
        raise UsageError("no workload given", "name a built-in workload (see `lockscope list`) or a command after --")
    workers = validate.parse_workers(args.workers) if args.workers else [validate.ncpus()]
    if len(workers) != 1:
        raise UsageError("run measures one worker count", "use `lockscope sweep` for several")
    s = RunSettings.from_args(args, command, workers, [args.workload])
    cpus = validate.parse_cpus(args.cpus)
    common = dict(workload=s.names[0], workers=s.workers[0], duration=s.duration, warmup=s.warmup,
                  probe=not args.no_probe, scratch_root=args.scratch, cpus=cpus, sample_hz=args.sample_hz,
                  system_wide=args.system_wide, vmlinux=validate.check_vmlinux(args.vmlinux),
                  max_overhead=validate.check_max_overhead(args.max_overhead))
    if command:
        validate.check_command(command)
        validate.check_regex("--throughput-regex", args.throughput_regex)
        fs = args.fs or NO_FS
        if fs != NO_FS:
            scratch.check_setup(fs)
        device = validate.check_device(args.device, args.yes_format_device, [fs])
        spec = PointSpec(fs=fs, command=command, throughput_regex=args.throughput_regex, target=_target(args),
                         **common)
    else:
        fs = _workload_fs(args.fs, workloads.check_workload(args.workload))
        device = validate.check_device(args.device, args.yes_format_device, [fs])
        params = workloads.check_params(args.workload, s.params)
        app = apps.get(args.workload)
        if app:       # an application workload: a command experiment with its own command line
            fields = app.point_fields(s.duration, params)
            app.require_installed()
            spec = PointSpec(fs=fs, **fields, **(common | {"warmup": 0.0}))
        else:
            spec = PointSpec(fs=fs, params=params, interval=args.interval, latency=not args.no_latency, **common)
    spec.device = device
    return spec


def _target(args: argparse.Namespace) -> str | None:
    """--target, checked: its processes exist now (else exit 2)."""
    if args.target is None:
        return None
    targets.from_spec(args.target)
    return args.target


def _no_target(args: argparse.Namespace, command: list[str] | None) -> None:
    if args.target is not None and not command:
        raise UsageError("--target goes with a command after -- (the command drives the target's load)",
                         "an application with a server (pgbench) makes its own target")


def _workload_fs(fs: str | None, info: dict) -> str:
    """The one file system of a built-in workload's run (none if it needs no directory)."""
    fs = fs or "tmpfs"
    if "," in fs:
        raise UsageError("run measures one file system", "use `lockscope sweep` for several")
    if not info.get("needs_dir", True):
        return NO_FS
    scratch.check_setup(fs)
    return fs


def sweep_spec(args: argparse.Namespace, command: list[str] | None) -> SweepSpec:
    """`lockscope sweep`: built-in workloads (or one command) x file systems
    x worker counts; file systems missing here are skipped with a warning."""
    validate.check_command_given(command, "sweep")
    _no_target(args, command)
    if command and args.workloads:
        raise UsageError("both workloads and a command were given", "give one of them")
    workers = validate.parse_workers(args.workers) if args.workers else list(range(1, validate.ncpus() + 1))
    names = [w for w in (args.workloads or ",".join(DEFAULT_WORKLOADS)).split(",") if w]
    # application workloads take whole seconds: they keep run's default window
    has_app = not command and any(apps.get(w) for w in names)
    s = RunSettings.from_args(args, command, workers, names, DEFAULT_DURATION if has_app else SWEEP_DURATION)
    chosen = [apps.get(w) for w in ([] if command else s.names) if apps.get(w)]
    for app in chosen:
        app.check_duration(s.duration)
    params: dict = {}
    if command:
        validate.check_command(command)
        validate.check_regex("--throughput-regex", args.throughput_regex)
        fss = [f for f in (args.fs or NO_FS).split(",") if f]
    else:
        for w in s.names:       # each --param must belong to every workload of the sweep
            params = workloads.check_params(w, s.params)
        fss = [f for f in (args.fs or ",".join(DEFAULT_FS)).split(",") if f]
    fss, unavailable = validate.available_fs(fss)
    device = validate.check_device(args.device, args.yes_format_device, fss)
    for app in chosen:
        app.require_installed()
    template = PointSpec(workload="", fs="", workers=0, duration=s.duration, warmup=s.warmup, command=command,
                         throughput_regex=args.throughput_regex, target=_target(args), probe=not args.no_probe,
                         scratch_root=args.scratch, cpus=validate.parse_cpus(args.cpus), sample_hz=args.sample_hz,
                         system_wide=args.system_wide, params=params, interval=args.interval,
                         latency=not args.no_latency, device=device, vmlinux=validate.check_vmlinux(args.vmlinux),
                         max_overhead=validate.check_max_overhead(args.max_overhead))
    spec = SweepSpec(workloads=s.names, fs=fss, workers=s.workers, template=template,
                     repeats=validate.check_repeats(args.repeat if args.repeat is not None else DEFAULT_REPEATS))
    spec.unavailable_fs = unavailable
    return spec


def default_out(name: str) -> Path:
    """A new results directory under ./lockscope-results/ for a run without --out."""
    return Path("lockscope-results") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def attach_spec(args: argparse.Namespace):
    """`lockscope attach`: running processes (pid, comm, cgroup) or the
    whole system; a missing target is exit 2."""
    if args.duration is not None:
        validate.check_duration(args.duration, 0.0)
    validate.check_interval(args.interval)
    validate.check_sample_hz(args.sample_hz)
    validate.check_worker_count(args.workers)
    vmlinux = validate.check_vmlinux(args.vmlinux)
    found = targets.system_wide() if args.system_wide else targets.resolve(args.pid, args.comm, args.cgroup)
    return AttachSpec(found, args.duration, args.workers, args.name, args.interval, args.sample_hz, vmlinux,
                      validate.check_max_overhead(args.max_overhead))


def confirm_options(args: argparse.Namespace, command: list[str] | None) -> dict:
    """confirm's options, checked: the ConfirmSpec fields they set."""
    validate.check_worker_count(args.workers)
    if command is not None:
        validate.check_command_given(command, "confirm")
        validate.check_command(command)
        given = [o for o in (args.ops_regex, args.rate_regex, args.throughput_regex) if o]
        if len(given) != 1:
            raise UsageError("confirm -- CMD: give --ops-regex (a running count of operations in the command's "
                             "output), --rate-regex (a rate per line) or --throughput-regex (its throughput when it "
                             "exits: one run per phase), one of them")
        for option, regex in (("--ops-regex", args.ops_regex), ("--rate-regex", args.rate_regex),
                              ("--throughput-regex", args.throughput_regex)):
            validate.check_regex(option, regex)
        if args.run < 1:
            raise UsageError(f"--run {args.run:g}: must be 1 second or more")
    elif args.ops_regex or args.rate_regex or args.throughput_regex:
        raise UsageError("--ops-regex, --rate-regex and --throughput-regex go with a command after --")
    delays = validate.parse_delays(args.delays, MAX_KERNEL_NS / 1000)
    validate.check_phases(args.phase, args.rounds, args.discover)
    if args.budget <= 0:
        raise UsageError(f"--budget {args.budget:g}: must be more than 0 seconds")
    scratch.check_root(args.scratch)
    return {"delays_ns": delays, "phase_s": args.phase, "rounds": args.rounds, "discover_s": args.discover,
            "budget_s": args.budget, "throughput_regex": args.throughput_regex, "run_s": args.run,
            "scratch_root": args.scratch, "ops_regex": args.ops_regex, "rate_regex": args.rate_regex}
