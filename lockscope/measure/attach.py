"""`lockscope attach`: profile processes lockscope did not start, for
--duration seconds or until SIGINT/SIGTERM, or until the targets exit.

The probe tracks the targets' tgids (their threads, and children forked
during the window by the probe's fork-following), or with --system-wide
every task (the work is then found among the user-space roles,
analyzer/roles.py); the window is the one
a command's point uses (window.Window) and the record is named and finished
as `run`'s (assemble.raw_from_probe, assemble.finish_record). The targets are
only read from /proc: never stopped, signalled or killed, and never given
to the watchdog (lockscope/machine/watchdog.py), which kills only what lockscope
started. A signal during the window ends it and the record is still
written."""
from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from lockscope.measure import targets as tg
from lockscope.errors import LockscopeError, UsageError
from lockscope.measure.probe import DEFAULT_ATTACH_BUDGET, DEFAULT_SAMPLE_HZ, ProbeSession
from lockscope.model.record import NO_FS, AttachedProcess, AttachInfo, RunRecord, point_id
from lockscope.measure.assemble import finish_record, probe_info, raw_from_probe
from lockscope.measure.runner import Progress
from lockscope.measure.window import Window

POLL_S = 0.1                 # how often the targets' liveness is checked
CHILDREN_EVERY_S = 0.5       # how often children forked during the window are looked for
NO_THROUGHPUT = ("throughput unknown (attach): lockscope did not start the target and reads no output of it, "
                 "so it cannot count its operations")
SYSTEM_WIDE_NOTE = ("system-wide: every process is a role of its own (by program and thread name); the work is "
                    "the busiest user-space roles, never kernel threads or the idle tasks; kernel lock waits have no "
                    "per-thread split and count every task's")
NO_OPS_SERIES = ("time series: the lock waits per interval are recorded (the time view); ops/s per interval "
                 "are unavailable: no workload driver counts the target's operations")


@dataclass
class AttachSpec:
    targets: tg.Targets
    duration: float | None             # None: until SIGINT/SIGTERM or the targets exit
    workers: int | None = None         # None: the targets' threads at the start
    name: str | None = None            # the workload name in the results (default: the target's comm)
    interval: float = 1.0              # the probe's snapshot period of lock waits (0: none kept)
    sample_hz: int = DEFAULT_SAMPLE_HZ
    vmlinux: Path | None = None
    max_overhead: float | None = DEFAULT_ATTACH_BUDGET   # the probe's cost budget, percent of the CPUs

    @property
    def workload(self) -> str:
        name = self.name or self.targets.label
        return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:40] or "attach"

    @property
    def system_wide(self) -> bool:
        return self.targets.how == tg.SYSTEM_WIDE

    @property
    def workers_count(self) -> int:
        if self.system_wide:      # the machine: its CPUs
            return self.workers or len(os.sched_getaffinity(0))
        return self.workers or max(1, self.targets.threads)

    @property
    def id(self) -> str:
        return point_id(self.workload, NO_FS, self.workers_count)


class WindowEnd:
    """SIGINT, SIGTERM and SIGHUP end the window instead of interrupting
    lockscope; the previous handlers come back after it."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict = {}

    def _on_signal(self, signum, frame) -> None:
        self.signum = self.signum or signum

    def __enter__(self) -> "WindowEnd":
        for s in self.SIGNALS:
            self._old[s] = signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def _track(probe: ProbeSession, procs: list[tg.Proc], notes: list[str]) -> list[tg.Proc]:
    """Hand the targets to the probe; one that exited meanwhile is a note."""
    out = []
    for p in procs:
        try:
            if not tg.alive(p):
                raise LockscopeError("gone")
            probe.track(p.tgid)
            out.append(p)
        except LockscopeError:
            notes.append(f"pid {p.tgid} ({p.comm}) exited before the window started")
    return out


def wait_window(procs: list[tg.Proc], duration: float | None, end: WindowEnd, t0: float,
                notes: list[str], on_child=None) -> str:
    """Until the duration is over, a signal came, or none of the targets
    (nor a child of theirs) is left: returns why the window ended.
    `on_child(tgid)` is called for each child seen (the USDT probes of an
    executable it runs are attached then)."""
    known = {p.tgid: p for p in procs}
    first = set(known)
    forked = 0
    next_children = t0 + CHILDREN_EVERY_S
    while True:
        now = time.monotonic()
        over = _window_over(end, duration, t0, now)
        if over:
            return over
        if now >= next_children:
            for c in tg.children(set(known)):
                if c.tgid not in known:
                    known[c.tgid] = c
                    forked += 1
                    if on_child:
                        on_child(c.tgid)
            next_children = now + CHILDREN_EVERY_S
        for tgid, p in list(known.items()):
            if not tg.alive(p):
                del known[tgid]
                if tgid in first:
                    notes.append(f"pid {tgid} ({p.comm}) exited {now - t0:.2f} s into the window")
        if not known:
            if forked:
                notes.append(f"{forked} process{'es' if forked != 1 else ''} forked by the targets during "
                             "the window were followed until they exited")
            return "exited"
        _nap(duration, t0, now)


def _window_over(end: WindowEnd, duration: float | None, t0: float, now: float) -> str | None:
    """Why the window ends now (a signal's name, "duration"), or None."""
    if end.signum:
        return signal.Signals(end.signum).name
    if duration is not None and now - t0 >= duration:
        return "duration"
    return None


def _nap(duration: float | None, t0: float, now: float) -> None:
    """Sleep one poll, not past the end of the duration."""
    time.sleep(POLL_S if duration is None else max(0.0, min(POLL_S, duration - (now - t0))))


def wait_system_wide(duration: float | None, end: WindowEnd, t0: float) -> str:
    """System-wide: until the duration is over or a signal came."""
    while True:
        now = time.monotonic()
        over = _window_over(end, duration, t0, now)
        if over:
            return over
        _nap(duration, t0, now)


def _end_notes(ended: str, spec: AttachSpec) -> list[str]:
    if ended == "exited":
        return ["the window ended early: the targets exited" if spec.duration else
                "the window ended when the targets exited"]
    if ended != "duration" and spec.duration:
        return [f"the window ended early: {ended} received"]
    return []


def run_attach(spec: AttachSpec, progress: Progress) -> RunRecord:
    notes: list[str] = []
    series_ms = max(1, round(spec.interval * 1000)) if spec.interval > 0 else 0
    with contextlib.ExitStack() as stack:
        probe = stack.enter_context(ProbeSession(spec.system_wide, sample_hz=spec.sample_hz, series_ms=series_ms,
                                                      max_overhead=spec.max_overhead))
        procs = _track(probe, spec.targets.procs, notes)
        if spec.system_wide:
            probe.rescan_usdt()            # the USDT lock probes of every program running now
        elif not procs:
            raise UsageError(f"the targets ({spec.targets.how} {spec.targets.value}) exited before lockscope "
                             "attached")
        window = Window(stack, probe, sorted(os.sched_getaffinity(0)))
        what = ("every task on the machine (system-wide)" if spec.system_wide else
                ", ".join(f"{p.tgid} ({p.comm})" for p in procs[:5]) + (" ..." if len(procs) > 5 else ""))
        with WindowEnd() as end:
            window.start()
            progress(f"attached to {what}: " + (f"{spec.duration:g} s" if spec.duration else "until Ctrl-C") +
                     "; Ctrl-C ends the window and writes the record")
            ended = (wait_system_wide(spec.duration, end, window.t0) if spec.system_wide else
                     wait_window(procs, spec.duration, end, window.t0, notes, probe.attach_usdt))
            data = window.stop({p.tgid for p in procs})
        progress(f"window ended ({ended}) after {window.elapsed:.2f} s; naming the locks")
        raw = raw_from_probe(data, None, spec.vmlinux)
        notes += [f"USDT: {m}" for m in probe.usdt_errors]

    t = spec.targets
    rec = RunRecord(
        id=spec.id, workload=spec.workload, fs=NO_FS, workers=spec.workers_count, duration_s=window.elapsed,
        ops=None, ops_per_sec=None, kind="attach", throughput_unit="ops/s",
        cpus=sorted(window.before), requested_duration_s=spec.duration or 0.0, warmup_s=0.0,
        cpu=window.cpu(), background=window.background, probe=probe_info(data, raw, None),
        warnings=[NO_THROUGHPUT] + ([NO_OPS_SERIES] if spec.interval > 0 else []) + _end_notes(ended, spec) + notes
                 + ([SYSTEM_WIDE_NOTE] if spec.system_wide else []),
        interval_s=spec.interval,
        attach=AttachInfo(how=t.how, target=t.value,
                          processes=[AttachedProcess(p.tgid, p.comm, p.threads) for p in procs],
                          threads=sum(p.threads for p in procs),
                          ended=ended, exited=[n for n in notes if "exited" in n]))
    return finish_record(rec, data, raw, window.hw.result(), system_wide=spec.system_wide)
