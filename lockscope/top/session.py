"""The data of `lockscope top`: the probe's window cut every --interval
seconds (stop, start again at once, then name the interval's waits while
the next one runs), each interval named as a whole `attach` window is
(assemble.raw_from_probe, assemble.finish_record): the top waits with name,
tier, kind, share of the targets' time, waits/s and the longest wait, and
the roles' time split of that interval. /proc/kallsyms is read once per
session, not per interval (KernelTables). The targets are only read from
/proc, never stopped or signalled; the probe detaches when the session
closes, whatever the cause."""
from __future__ import annotations

import contextlib
import datetime
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from lockscope.measure import targets as tg
from lockscope.errors import LockscopeError, UsageError
from lockscope.measure.probe import DEFAULT_SAMPLE_HZ, ProbeSession
from lockscope.model.record import NO_FS, RunRecord
from lockscope.measure.assemble import KernelTables, finish_record, probe_info, raw_from_probe

CHILDREN_EVERY_S = 0.5
NO_THROUGHPUT = "unknown: lockscope did not start the targets and reads no output of theirs"


@dataclass
class LiveSpec:
    targets: tg.Targets | None          # None: --system-wide
    interval: float = 1.0
    workers: int | None = None          # the shares' denominator (default: the targets' threads, or the CPUs)
    sample_hz: int = DEFAULT_SAMPLE_HZ
    vmlinux: Path | None = None

    @property
    def label(self) -> str:
        if self.targets is None:
            return "system-wide"
        t = self.targets
        procs = ", ".join(f"{p.tgid} ({p.comm})" for p in t.procs[:3]) + (" ..." if len(t.procs) > 3 else "")
        return f"{t.how} {t.value}: {procs}" if t.how != "pid" else f"pid {procs}"

    @property
    def workers_count(self) -> int:
        if self.workers:
            return self.workers
        if self.targets is None:
            return len(os.sched_getaffinity(0))
        return max(1, self.targets.threads)


@dataclass
class LockRow:
    name: str
    tier: str
    kind: str
    share: float          # of the targets' time (workers x interval)
    waits_per_s: float
    max_wait_ns: int
    holder: str = ""      # the top release site and its share of the release-ended waits ("" : none recorded)


@dataclass
class RoleRow:
    name: str
    threads: int
    worker: bool
    split: dict[str, float]  # on-cpu, lock, io, storage, preempted, other, idle: fractions of the role's time


@dataclass
class Frame:
    """One interval, named."""
    seq: int
    wall: str                 # local time at the interval's end, HH:MM:SS
    interval_s: float
    workers: int
    unit: str = "thread"      # what `workers` counts: the targets' threads, or the CPUs (--system-wide)
    locks: list[LockRow] = field(default_factory=list)
    roles: list[RoleRow] | None = None     # None: the per-thread probe did not load
    throughput: str = NO_THROUGHPUT
    name_s: float = 0.0       # how long naming the interval took


SPLIT = (("on-cpu", "on_cpu_ns"), ("lock", "lock_ns"), ("io", "io_ns"), ("storage", "storage_ns"),
         ("preempted", "preempted_ns"), ("other", "other_ns"), ("idle", "idle_ns"))


class TargetWatch:
    """Whether any target (or a child it forked since) is still running;
    a child seen is handed to `on_child` (its USDT probes)."""

    def __init__(self, procs: list[tg.Proc], on_child):
        self.known = {p.tgid: p for p in procs}
        self.on_child = on_child
        self.next_children = 0.0

    def alive(self) -> bool:
        now = time.monotonic()
        if now >= self.next_children:
            for c in tg.children(set(self.known)):
                if c.tgid not in self.known:
                    self.known[c.tgid] = c
                    self.on_child(c.tgid)
            self.next_children = now + CHILDREN_EVERY_S
        for tgid, p in list(self.known.items()):
            if not tg.alive(p):
                del self.known[tgid]
        return bool(self.known)


def lock_rows(rec: RunRecord, window_s: float) -> list[LockRow]:
    return [LockRow(lk.name, lk.tier, lk.kind, lk.wait_share, lk.count / window_s if window_s > 0 else 0.0,
                    lk.max_wait_ns, f"{lk.holders[0].site} {lk.holders[0].share:.0%}" if lk.holders else "")
            for lk in rec.locks if lk.wait_ns > 0]


def role_rows(rec: RunRecord) -> list[RoleRow]:
    out = []
    for r in rec.roles:
        total = sum(getattr(r, f) for _, f in SPLIT)
        if total <= 0:
            continue
        out.append(RoleRow(r.name, r.threads, r.worker, {k: getattr(r, f) / total for k, f in SPLIT}))
    return sorted(out, key=lambda r: (not r.worker, -r.split["on-cpu"] - r.split["lock"]))


class LiveSession:
    """The probe over the targets, cut into intervals: `next_frame()` when
    an interval is due (`due()`), `ended` says why it stopped (None while
    it runs)."""

    def __init__(self, spec: LiveSpec):
        self.spec = spec
        self.stack = contextlib.ExitStack()
        self.probe: ProbeSession | None = None
        self.kernel: KernelTables | None = None
        self.watch: TargetWatch | None = None
        self.t_start = 0.0
        self.seq = 0

    def __enter__(self) -> "LiveSession":
        try:
            self.kernel = KernelTables(self.spec.vmlinux)
            sw = self.spec.targets is None
            self.probe = self.stack.enter_context(ProbeSession(system_wide=sw, sample_hz=self.spec.sample_hz,
                                                               series_ms=0))
            if not sw:
                procs = []
                for p in self.spec.targets.procs:
                    try:
                        if tg.alive(p):
                            self.probe.track(p.tgid)
                            procs.append(p)
                    except LockscopeError:
                        pass           # it exited meanwhile
                if not procs:
                    raise UsageError(f"the targets ({self.spec.targets.how} {self.spec.targets.value}) exited "
                                     "before lockscope attached")
                self.watch = TargetWatch(procs, self.probe.attach_usdt)
            self.probe.start()
            self.t_start = time.monotonic()
        except BaseException:
            self.stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the probe process: its BPF programs, maps and links go with it."""
        self.stack.close()
        self.probe = None

    def targets_alive(self) -> bool:
        return self.watch is None or self.watch.alive()

    def due_in(self) -> float:
        """Seconds until the current interval ends."""
        return max(0.0, self.t_start + self.spec.interval - time.monotonic())

    def next_frame(self) -> Frame:
        """End the interval, start the next at once, and name the one ended."""
        data = self.probe.stop()
        wall = datetime.datetime.now().strftime("%H:%M:%S")
        self.probe.start()
        self.t_start = t0 = time.monotonic()
        self.seq += 1
        window_s = data["window_ns"] / 1e9
        workers = self.spec.workers_count
        raw = raw_from_probe(data, None, self.spec.vmlinux, sym=self.kernel.sym, image=self.kernel.image)
        rec = RunRecord(id="top", workload="top", fs=NO_FS, workers=workers, duration_s=window_s, ops=None,
                        ops_per_sec=None, kind="attach", probe=probe_info(data, raw, None))
        rec = finish_record(rec, data, raw, {"available": False})
        return Frame(self.seq, wall, window_s, workers, "CPU" if self.spec.targets is None else "thread",
                     lock_rows(rec, window_s), role_rows(rec) if raw.tasks is not None else None,
                     name_s=time.monotonic() - t0)
