"""A sweep: every (workload, file system, worker count) point, one run record
per point written atomically under DIR/runs/. Rerunning the same sweep skips
finished points, so a killed sweep resumes and loses nothing.

With --repeat K every point is run K times, interleaved: the first run of
every point, then the second of every point, and so on, never the repeats
of one point back to back, so that a slow spell of the machine falls on
several points and not on one point's every run. Each run keeps its own
record (`MWRM-tmpfs-w2-r2.json`); analyze summarizes them with intervals
(analyzer/intervals.py)."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, TextIO

from lockscope import atomicio
from lockscope.model import record
from lockscope.measure import apps, workloads
from lockscope.errors import EnvironmentProblem, LockscopeError, UsageError
from lockscope.model.record import NO_FS, record_path
from lockscope.measure.runner import PointSpec, run_point
from lockscope.measure.probe import LoadedProbes

MANIFEST = "sweep.json"
SWEEP_SCHEMA = "lockscope.sweep/1"


@dataclass
class SweepSpec:
    """Workloads x file systems x worker counts; every other field of a
    point comes from `template` (its workload, fs and workers are filled
    in per point)."""
    workloads: list[str]
    fs: list[str]
    workers: list[int]
    template: PointSpec
    unavailable_fs: dict[str, str] = field(default_factory=dict)   # setups skipped here -> why
    repeats: int = 1

    def points(self) -> list[PointSpec]:
        """Every run, interleaved: repeat 1 of every point, then repeat 2, ..."""
        once = self._points()
        return [dataclasses.replace(p, repeat=r) for r in range(1, self.repeats + 1) for p in once]

    def _points(self) -> list[PointSpec]:
        out, t = [], self.template
        for wl in self.workloads:
            needs_dir = True if t.command else workloads.check_workload(wl).get("needs_dir", True)
            fss = self.fs if (needs_dir or t.command) else [NO_FS]
            app = None if t.command else apps.get(wl)
            # an application workload is a command experiment with its own command line
            what = (app.point_fields(t.duration, t.params) | {"warmup": 0.0, "interval": 0.0, "latency": True}
                    if app else {})
            for fs in fss:
                for n in self.workers:
                    out.append(dataclasses.replace(t, workload=wl, fs=fs, workers=n, **what))
        return out


# parameters that change what a point measures: they must match to resume
MEASURE_PARAMS = ("duration", "warmup", "command", "throughput_regex", "target", "probe", "sample_hz", "system_wide",
                  "params", "interval", "latency", "device")
# parameters that choose the points: a rerun may add to them
POINT_PARAMS = ("workloads", "fs", "workers")


def _compatible(old: dict, spec: SweepSpec) -> list[str]:
    diffs = []
    for key in MEASURE_PARAMS:
        if key in old and old[key] != getattr(spec.template, key):
            diffs.append(f"{key}: {old[key]!r} there, {getattr(spec.template, key)!r} now")
    return diffs


@dataclass
class SweepOutcome:
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def _fmt_time(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


LOCK = ".lockscope-sweep.lock"


@contextlib.contextmanager
def sweep_lock(out: Path) -> Iterator[None]:
    """Hold OUT/.lockscope-sweep.lock for one sweep: a second sweep into the
    same directory refuses, naming the owner's pid. The lock is a flock, so
    the kernel releases it on every exit path, a kill -9 included; a lock
    file left by a dead process is reclaimed. The file is removed on the way
    out (a waiter that locked the removed file tries again)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(f"{out} is in use by another sweep (pid {owner}; lock {path})",
                             "wait for it to finish, or give this sweep another --out") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)              # the owner removed it while we waited: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.close(fd)


def run_sweep(spec: SweepSpec, out: Path, log: TextIO = sys.stderr) -> SweepOutcome:
    out = Path(out)
    points = spec.points()
    with sweep_lock(out):
        return _run_sweep(spec, points, out, log)


def _run_sweep(spec: SweepSpec, points: list[PointSpec], out: Path, log: TextIO) -> SweepOutcome:
    manifest_path = out / MANIFEST
    manifest = {}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        diffs = _compatible(manifest.get("params", {}), spec)
        if diffs:
            raise UsageError(f"{out} holds a sweep with other parameters ({'; '.join(diffs)})",
                             "use another --out directory, or the same parameters to resume it")
    ids = [p.id for p in points]
    known = manifest.get("points", [])
    old = manifest.get("params", {})
    manifest = {
        "schema": SWEEP_SCHEMA,
        "created": manifest.get("created") or datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
        "params": {k: getattr(spec.template, k) for k in MEASURE_PARAMS}
        | {k: sorted(set(old.get(k, [])) | set(getattr(spec, k))) for k in POINT_PARAMS}
        | {"repeats": max(int(old.get("repeats", 1)), spec.repeats)},
        "points": known + [i for i in ids if i not in known],
        "failures": {},
        # setups asked for but not available on this machine, with the reason
        "skipped_fs": {k: v for k, v in {**manifest.get("skipped_fs", {}), **spec.unavailable_fs}.items()
                       if k not in spec.fs},
    }
    atomicio.write_json(manifest_path, manifest)

    outcome = SweepOutcome()
    todo = []
    for p in points:
        path = record_path(out, p.id)
        try:
            rec = record.load(path) if path.exists() else None
        except (ValueError, json.JSONDecodeError):
            rec = None            # unreadable: measure it again
        if rec is not None and rec.workers == p.workers and rec.workload == p.workload:
            outcome.skipped.append(p.id)
        else:
            todo.append(p)
    if outcome.skipped:
        print(f"lockscope: {len(outcome.skipped)} of {len(points)} points already measured in {out}, "
              "skipping them", file=log, flush=True)

    with LoadedProbes() as loaded:
        _run_points(spec, todo, manifest, manifest_path, outcome, loaded, log)
    manifest["failures"] = outcome.failed
    atomicio.write_json(manifest_path, manifest)
    return outcome


def _run_points(spec: SweepSpec, todo: list[PointSpec], manifest: dict, manifest_path: Path, outcome: SweepOutcome,
                loaded: LoadedProbes, log: TextIO) -> None:
    out = manifest_path.parent
    started = time.monotonic()
    for i, p in enumerate(todo):
        elapsed = time.monotonic() - started
        eta = f", about {_fmt_time(elapsed / i * (len(todo) - i))} left" if i else ""
        on = f" on {p.fs}" if p.fs != NO_FS else ""
        again = f", repeat {p.repeat} of {spec.repeats}" if spec.repeats > 1 else ""
        print(f"[{i + 1}/{len(todo)}] {p.workload}{on}, {p.workers} worker"
              f"{'s' if p.workers != 1 else ''}{again}{eta}", file=log, flush=True)
        try:
            rec = run_point(p, lambda msg, p=p: print(f"    {msg}", file=log, flush=True), loaded)
        except EnvironmentProblem:
            raise                 # the next point would fail the same way
        except LockscopeError as e:
            outcome.failed[p.id] = e.message
            print(f"    failed: {e.message}", file=log, flush=True)
            manifest["failures"] = outcome.failed
            atomicio.write_json(manifest_path, manifest)
            continue
        record.save(rec, record_path(out, p.id))
        outcome.done.append(p.id)
        tput = f"{rec.ops_per_sec:,.0f} {rec.throughput_unit}" if rec.ops_per_sec is not None else \
            "throughput unknown (" + "; ".join(rec.warnings[:1] or ["not measured"]) + ")"
        print(f"    {tput}" +
              (f"; top lock: {rec.locks[0].name} ({rec.locks[0].wait_share:.1%} of worker time)"
               if rec.locks else ""), file=log, flush=True)
