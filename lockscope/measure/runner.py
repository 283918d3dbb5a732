"""One measured point: prepare the file system, attach the probes, run the
workload (built-in or any command) through warm-up and the timed window,
collect throughput, CPU breakdown and lock waits, name the locks, and return
the run record. Everything is released when it returns or raises."""
from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lockscope.measure import apps, background, cpustat, hwcounters, workloads
from lockscope.machine import scratch
from lockscope.measure import targets as tg
from lockscope.errors import LockscopeError
from lockscope.measure.jsonlines import kill_group, spawn_gated
from lockscope.measure import probe as probes
from lockscope.measure.probe import DEFAULT_SAMPLE_HZ, ProbeSession
from lockscope.model.jsondata import from_dict
from lockscope.model.record import (NO_FS, Application, AttachedProcess, AttachInfo, FsDetail, RunRecord, WorkerResult,
                                    point_id)
from lockscope.measure.assemble import (KernelTables, finish_record, latency_of, probe_info, raw_from_probe,
                                        reference_fields, timeseries)
from lockscope.measure.ptyout import PtyOutput
from lockscope.measure.server import ServerSession
from lockscope.measure.window import Window

MAX_WATCH_PATHS = 512
# a command that stops itself after its window (an application workload) is
# killed, and the point failed, when it runs this much longer
SELF_TIMED_GRACE_S = 120.0
PREPARE_TIMEOUT_S = 3600.0

Progress = Callable[[str], None]


@dataclass
class PointSpec:
    workload: str                     # built-in name, or the name given to a command
    fs: str                           # a setup of scratch.FS_SETUPS, or "none"
    workers: int
    duration: float | None            # None: a command runs to completion
    warmup: float = 1.0
    command: list[str] | None = None
    throughput_regex: str | None = None
    probe: bool = True
    scratch_root: Path = scratch.DEFAULT_SCRATCH
    cpus: list[int] | None = None
    sample_hz: int = DEFAULT_SAMPLE_HZ
    system_wide: bool = False          # count every task's waits, not only the workload's
    params: dict = field(default_factory=dict)   # built-in workloads: --param KEY=VALUE
    interval: float = 0.0              # time series every this many seconds (0: none)
    latency: bool = True               # time every operation (histograms)
    device: str | None = None          # a checked block device for disk setups (--device)
    max_overhead: float | None = None  # the probe's cost budget, percent of the CPUs (--max-overhead)
    # commands: run before the window on the same {dir}, without the probes
    prepare: list[str] | None = None
    throughput_unit: str | None = None  # of throughput_regex's number (default: ops/s)
    self_timed: bool = False           # the command stops itself after `duration` (it was told so)
    application: dict | None = None    # an application workload: apps.App.identity()
    vmlinux: Path | None = None        # System.map or vmlinux naming static locks (--vmlinux)
    # commands: --target (pid:P, comm:NAME, cgroup:PATH) or "server": those
    # tasks are the work, the command only drives the load
    target: str | None = None
    server: dict | None = None         # an application's [app.server] (lockscope/measure/server.py)
    repeat: int = 1                    # which of the point's runs (sweep --repeat K)

    @property
    def id(self) -> str:
        return point_id(self.workload, self.fs, self.workers, self.repeat)


def run_builtin(spec: PointSpec, progress: Progress, loaded: probes.LoadedProbes | None = None) -> RunRecord:
    info = workloads.check_workload(spec.workload)
    with contextlib.ExitStack() as stack:
        fs = None
        if info.get("needs_dir", True):
            progress(f"preparing {spec.fs}")
            fs = stack.enter_context(scratch.mounted(spec.fs, spec.scratch_root, device=spec.device))
        if spec.probe:
            KernelTables.prefetch(spec.vmlinux)    # parsed while the probes load, done before the workload starts
        probe = (probes.session(stack, loaded, spec.system_wide, spec.sample_hz, spec.max_overhead)
                 if spec.probe else None)
        KernelTables.settle()
        wl = stack.enter_context(workloads.WorkloadSession(
            spec.workload, spec.workers, spec.duration, spec.warmup, fs.mountpoint if fs else None, spec.cpus,
            params=spec.params, interval=spec.interval, latency=spec.latency))
        progress("setting up the workload")
        wl.start(probe.track if probe else None)
        ready = wl.wait_ready()
        if probe:
            if ready.get("pid") not in ready.get("worker_pids", []):
                probe.untrack(ready["pid"])   # only the workers are measured
            for path in ready.get("watch_paths", [])[:MAX_WATCH_PATHS]:
                probe.watch(path)
        progress(f"warming up {spec.warmup:g} s")
        hw = stack.enter_context(hwcounters.CpiCounters(ready.get("cpus") or sorted(os.sched_getaffinity(0))))
        # the reference rate (not recorded), then the probes record from the
        # rest of the warm-up on, so that they settle before the window
        reference = wl.go()
        started_ns = None
        if probe:
            probe.start()
            started_ns = time.monotonic_ns()
        start = wl.wait_measure_start()
        bg0 = background.snapshot()
        before = cpustat.sample()
        hw.start()
        progress(f"measuring {spec.duration:g} s")
        wl.wait_measure_end()
        after = cpustat.sample()
        bg = background.measure(bg0, background.snapshot(), {wl.proc.pid} if wl.proc else set())
        hw.stop()
        data = probe.stop() if probe else None
        result = wl.finish()
        # the driver's own warnings (e.g. MWUL may run out of pre-created files)
        driver_warnings = [f"workload: {line.split(': warning: ', 1)[1]}"
                           for line in wl.stderr_tail(20000).splitlines() if ": warning: " in line]
        raw = raw_from_probe(data, fs.mountpoint if fs else None, spec.vmlinux) if data else None
        fs_detail = from_dict(FsDetail, fs.describe() if fs else {"setup": NO_FS})
        fs_warnings = fs.warnings if fs else []

    cpus = sorted(set(ready.get("cpus", [])))
    rec = RunRecord(
        id=spec.id, workload=spec.workload, fs=spec.fs if fs_detail.setup != NO_FS else NO_FS,
        workers=spec.workers, duration_s=result["duration_s"], ops=result["ops"],
        ops_per_sec=result["ops_per_sec"], kind="builtin", fs_detail=fs_detail, cpus=cpus,
        oversubscribed=bool(result.get("oversubscribed")), requested_duration_s=spec.duration,
        warmup_s=result.get("warmup_s", spec.warmup), setup_s=ready.get("setup_s", 0.0),
        per_worker=[WorkerResult(worker=w["worker"], cpu=w.get("cpu"), pid=w.get("pid"), ops=w["ops"],
                                 ran_out=bool(w.get("ran_out"))) for w in result.get("per_worker", [])],
        cpu=cpustat.breakdown(before, after, cpus),
        probe=probe_info(data, raw, None if spec.probe else "disabled (--no-probe)"),
        warnings=list(fs_warnings) + driver_warnings + (["system-wide: lock waits of every task on the machine are counted, "
                                       "shares are relative to the workload's workers"]
                                      if spec.system_wide else []),
        params=result.get("params", {}), op_counts=result.get("op_counts", {}),
        latency=latency_of(result.get("latency")), interval_s=spec.interval,
        timeseries=timeseries(wl.progress, result.get("measure_start_ns", 0)), background=bg)
    reference_fields(rec, reference)
    if started_ns is not None and started_ns > start["t_ns"]:
        rec.warnings.append(f"the probes started {(started_ns - start['t_ns']) / 1e6:.0f} ms into the window "
                            "(the warm-up after the reference was too short for them to settle): "
                            "pass a longer --warmup")
    ran_out = [w.worker for w in rec.per_worker if w.ran_out]
    if ran_out:
        rec.warnings.append(f"workers {ran_out} ran out of pre-created work before the end of the window")
    # system-wide: the work is the workload's processes (and what they wait for), not another program's
    return finish_record(rec, data, raw, hw.result(), work=set(probe.tracked) if probe and spec.system_wide else None,
                         system_wide=spec.system_wide)


def substitute(argv: list[str], workers: int, directory: Path | None, port: int | None = None,
               duration: float | None = None) -> list[str]:
    """A command's arguments with {n} (the workers), {dir} (the point's
    file system), {port} (its server's) and, given a duration, {duration}
    (the window's seconds) replaced."""
    out = []
    for a in argv:
        a = a.replace("{n}", str(workers))
        if duration:
            a = a.replace("{duration}", f"{duration:g}")
        if port is not None:
            a = a.replace("{port}", str(port))
        if "{dir}" in a:
            if directory is None:
                raise LockscopeError("the command uses {dir} but no file system was asked for",
                                     "pass --fs tmpfs (or another setup) to get a fresh {dir}", 2)
            a = a.replace("{dir}", str(directory))
        out.append(a)
    return out


def _tail(f, limit: int = 4000) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - limit))
    return f.read().decode(errors="replace")


def run_prepare(argv: list[str], progress: Progress) -> float:
    """The command's preparation (e.g. filling a database), before the probes
    attach; its duration in seconds."""
    progress(f"preparing, not measured: {shlex.join(argv)}")
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=PREPARE_TIMEOUT_S)
    except OSError as e:
        raise LockscopeError(f"cannot run {argv[0]}: {e.strerror}", exit_code=2) from e
    except subprocess.TimeoutExpired:
        raise LockscopeError(f"the preparation {shlex.join(argv)} did not end within {PREPARE_TIMEOUT_S:g} s") from None
    if p.returncode != 0:
        err = (p.stderr or p.stdout).decode(errors="replace").strip()[-800:]
        raise LockscopeError(f"the preparation {shlex.join(argv)} exited with code {p.returncode}" +
                             (f": {err}" if err else ""))
    return time.monotonic() - t0


TARGET_POLL_S = 0.1
DRIVERS_EVERY_S = 0.5
RESCAN_AT_S = (0.2, 0.5, 1.0, 2.0, 4.0)   # seconds after the command starts: its USDT probes looked for again


def _track_targets(probe: ProbeSession | None, spec: PointSpec, server) -> tg.Targets | None:
    """The --target (or the application's server) resolved now and handed to
    the probe: its tasks, and what they fork, are traced as the work. It is
    only read from /proc, never signalled."""
    if not spec.target:
        return None
    targets = tg.Targets("pid", str(server.pid), [tg.process(server.pid)]) if spec.target == "server" \
        else tg.from_spec(spec.target)
    if probe:
        for p in targets.procs:
            try:
                probe.track(p.tgid)
            except LockscopeError:
                pass               # it exited meanwhile: the record's target list says what was there
    return targets


def _wait_command(proc: subprocess.Popen, timeout: float | None, drivers: set[int] | None,
                  rescan: Callable[[], None] | None = None, since: float | None = None) -> int | None:
    """The command's exit code, or None at the timeout; meanwhile, with
    --target (or system-wide), its processes are collected in `drivers` (the
    command and what it forks: with --target they drive the load and are not
    the work; system-wide, the work is among them), and `rescan` (the probe's
    USDT rescan) runs at RESCAN_AT_S after the start: the command was tracked
    before its exec, and a program maps the library with the probes later
    (a JVM's libjvm.so). Not all along: reading /proc/PID/maps takes the
    measured process's mmap_lock. The timeout counts from `since` (the
    window's start, so that the window ends on time however long the
    command took to start), else from now."""
    start = time.monotonic() if since is None else since
    deadline = None if timeout is None else start + timeout
    next_tree = 0.0
    scans = list(RESCAN_AT_S) if rescan else []
    while True:
        now = time.monotonic()
        if scans and now - start >= scans[0]:
            scans.pop(0)
            rescan()
        if drivers is None and not scans:
            try:
                return proc.wait(timeout=None if deadline is None else max(0.0, deadline - now))
            except subprocess.TimeoutExpired:
                return None
        if drivers is not None and now >= next_tree:
            drivers |= tg.tree(proc.pid, drivers)
            next_tree = now + DRIVERS_EVERY_S
        rc = proc.poll()
        if rc is not None:
            return rc
        if deadline is not None and now >= deadline:
            return None
        time.sleep(TARGET_POLL_S)


def _target_info(targets: tg.Targets | None, spec: PointSpec) -> AttachInfo | None:
    if targets is None:
        return None
    alive = [p for p in targets.procs if tg.alive(p)]
    return AttachInfo(how="server" if spec.target == "server" else targets.how,
                      target="the application's server" if spec.target == "server" else targets.value,
                      processes=[AttachedProcess(p.tgid, p.comm, p.threads) for p in targets.procs],
                      threads=targets.threads, ended="command",
                      exited=[f"pid {p.tgid} ({p.comm}) exited during the window"
                              for p in targets.procs if p not in alive])


def run_command(spec: PointSpec, progress: Progress, loaded: probes.LoadedProbes | None = None) -> RunRecord:
    assert spec.command
    with contextlib.ExitStack() as stack:
        fs = None
        if spec.fs != NO_FS:
            progress(f"preparing {spec.fs}")
            fs = stack.enter_context(scratch.mounted(spec.fs, spec.scratch_root, device=spec.device))
        server = None
        if spec.server:
            if fs is None:
                raise LockscopeError(f"{spec.workload} makes its server on a fresh file system",
                                     "pass --fs tmpfs (or another setup)", 2)
            server = stack.enter_context(ServerSession(spec.server, fs.mountpoint, progress))
        port = server.port if server else None
        # a command given {duration} runs as long as the window and stops itself (its result, printed as
        # it exits, is not lost to the window's end)
        self_timed = spec.self_timed or (bool(spec.duration) and any("{duration}" in a for a in spec.command))
        argv = substitute(spec.command, spec.workers, fs.mountpoint if fs else None, port, spec.duration)
        prepare = substitute(spec.prepare, spec.workers, fs.mountpoint if fs else None, port) \
            if spec.prepare else None
        prepare_s = run_prepare(prepare, progress) if prepare else None
        if spec.probe:
            KernelTables.prefetch(spec.vmlinux)    # parsed while the probes load, done before the window
        probe = (probes.session(stack, loaded, spec.system_wide, spec.sample_hz, spec.max_overhead)
                 if spec.probe else None)
        KernelTables.settle()
        targets = _track_targets(probe, spec, server)
        drivers: set[int] | None = set() if targets else None
        # system-wide: the command's processes, where the work is looked for (analyzer/roles.py)
        work: set[int] | None = set() if probe and spec.system_wide and not targets else None
        out = stack.enter_context(tempfile.TemporaryFile())
        err = stack.enter_context(tempfile.TemporaryFile())
        # a user's command: its stdout line-buffered, as in a terminal (the built-in applications' output
        # is read when they exit, through a file: no terminal changes what they print)
        term = PtyOutput(out.write) if not spec.application else None
        if term:
            stack.callback(term.close)
        if probe and fs:
            probe.watch(str(fs.mountpoint))
        window = Window(stack, probe, sorted(os.sched_getaffinity(0)))
        window.start()
        progress(f"running {shlex.join(argv)}" + ("" if not spec.duration else f" ({spec.duration:g} s, it stops itself)"
                                                   if self_timed else f" for up to {spec.duration:g} s")
                 + (f"; the work: {', '.join(f'{p.tgid} ({p.comm})' for p in targets.procs[:5])}" if targets else ""))
        try:
            proc = spawn_gated(argv, probe.track if probe else None, stdin=subprocess.DEVNULL,
                               stdout=term.slave if term else out, stderr=err, start_new_session=True)
        except OSError as e:
            raise LockscopeError(f"cannot run {argv[0]}: {e.strerror}", exit_code=2) from e
        if term:
            term.started()
        stack.callback(kill_group, proc)      # the command only: never the --target
        rc = _wait_command(proc, spec.duration + SELF_TIMED_GRACE_S if self_timed else spec.duration,
                           drivers if drivers is not None else work, probe.rescan_usdt if probe else None,
                           since=window.t0)
        completed = rc is not None
        data = window.stop({proc.pid, server.pid if server else 0} | {p.tgid for p in (targets.procs if targets else [])})
        elapsed = window.elapsed
        if not completed:
            kill_group(proc)
        target_info = _target_info(targets, spec)
        raw = raw_from_probe(data, fs.mountpoint if fs else None, spec.vmlinux) if data else None
        if term:
            term.close()                       # what the command printed, to its last line
        stdout, stderr = _tail(out, 1 << 20), _tail(err)
        fs_detail = from_dict(FsDetail, fs.describe() if fs else {"setup": NO_FS})

    if completed and rc != 0:
        raise LockscopeError(f"{shlex.join(argv)} exited with code {rc}" +
                             (f": {stderr.strip()[-800:]}" if stderr.strip() else ""))
    if self_timed and not completed:
        raise LockscopeError(f"{shlex.join(argv)} was told to run {spec.duration:g} s but had not ended "
                             f"{SELF_TIMED_GRACE_S:g} s later; it was stopped")
    warnings = []
    ops, tput, unit = None, None, "runs/s"
    if spec.throughput_regex:
        tput = apps.parse_throughput(spec.throughput_regex, stdout + "\n" + stderr)
        unit = spec.throughput_unit or "ops/s (from the command's output)"
        if tput is None:
            what = f"{spec.application['name']}'s throughput regex" if spec.application else "--throughput-regex"
            warnings.append(f"{what} {spec.throughput_regex!r} matched nothing in the output: "
                            + no_match_reason(completed, stdout, stderr))
    elif completed:
        ops, tput = 1, 1.0 / elapsed
    else:
        warnings.append("throughput unknown: the command was stopped at the end of --duration; "
                        "pass --throughput-regex to read it from its output, or let it run to completion")
    if target_info:
        warnings += target_info.exited
    rec = RunRecord(
        id=spec.id, workload=spec.workload, fs=spec.fs, workers=spec.workers, duration_s=elapsed,
        ops=ops, ops_per_sec=tput, kind="command", command=argv, throughput_unit=unit, fs_detail=fs_detail,
        cpus=sorted(window.before), requested_duration_s=spec.duration or 0.0, warmup_s=0.0,
        cpu=window.cpu(), background=window.background,
        probe=probe_info(data, raw, None if spec.probe else "disabled (--no-probe)"),
        warnings=warnings, params=dict(spec.params),
        application=Application(**spec.application, prepare=prepare, prepare_s=prepare_s)
        if spec.application else None, target=target_info)
    return finish_record(rec, data, raw, window.hw.result(), drivers, work, spec.system_wide)


def no_match_reason(completed: bool, stdout: str, stderr: str) -> str:
    """Why a throughput regex likely matched nothing, and what to do."""
    if not completed:
        return ("the command was stopped at the end of the window before it printed a match (a program that "
                "prints its result when it exits): give it {duration} in its arguments so that it ends with the "
                "window, or pass a longer --duration")
    if not (stdout + stderr).strip():
        return "the command printed nothing (its output was read line by line, through a terminal)"
    last = (stdout.strip() or stderr.strip()).splitlines()[-1][:120]
    return f"check the regex against what it printed (its last line: {last!r})"


def run_point(spec: PointSpec, progress: Progress | None = None,
              loaded: probes.LoadedProbes | None = None) -> RunRecord:
    """One point; `loaded`: a sweep's probes, kept loaded between its points."""
    progress = progress or (lambda msg: print(f"  {spec.id}: {msg}", file=sys.stderr, flush=True))
    rec = run_command(spec, progress, loaded) if spec.command else run_builtin(spec, progress, loaded)
    rec.repeat = spec.repeat if spec.repeat > 1 else None
    return rec
