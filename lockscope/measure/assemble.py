"""A run record assembled from what a point measured: the host, the probe's
raw data kept (symbolized stacks, objects, the mounts they live on), the
locks named (kernel, user space, Go, USDT), the roles and who waited for
whom, the warnings, the driver's time series and reference. Shared by
`run`/`sweep` (runner.py), `attach` (attach.py) and `top` (top/session.py)."""
from __future__ import annotations

import copy
import datetime
import os
import platform
import threading
from collections import defaultdict
from pathlib import Path
from typing import Callable

from lockscope import __version__
from lockscope.measure import hwcounters
from lockscope.machine import scratch
from lockscope.analyzer import holders, holdstacks, owners, probeeffect, roles
from lockscope.analyzer.kernel import filelocks, kallsyms, kimage, ktext, naming, objlocks, slab
from lockscope.analyzer.user import golocks, runtimes, userlocks, userspin, usdt
from lockscope.analyzer.kernel.kallsyms import Symbolizer
from lockscope.analyzer.kernel.knowledge import own_functions
from lockscope.model.jsondata import from_dict, from_list, parse_addr
from lockscope.model.probedata import (Contention, CpuSample, KernelImage, MapUse, Objects, OffCpuWait, ProgramStats,
                                       RawProbe, Series, Slab, TaskTimes, Waiter, Wakeup, heaviest)
from lockscope.model.record import Cpi, Host, Interval, Latency, ProbeCost, ProbeInfo, RunRecord


def host_info() -> Host:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return Host(kernel=platform.release(), machine=platform.machine(), hostname=platform.node(),
                ncpus=os.cpu_count(), cpus_allowed=len(os.sched_getaffinity(0)), cpu_model=model)


class KernelTables:
    """/proc/kallsyms read once: the stack symbolizer, the kernel image's
    bounds and its variables; each window gets a copy of the image with its
    own contended static addresses named (`image`, kernel_image's
    signature). `lockscope top` keeps one for its session; raw_from_probe
    reuses one while kallsyms reads the same (`current`)."""

    def __init__(self, vmlinux: Path | None, lines: list[list[str]] | None = None):
        lines = kallsyms.rows() if lines is None else lines
        self.sym = Symbolizer(lines=lines)
        self.img = kimage.read(lines=lines)
        self.table = (kimage.load_symbols(vmlinux) if vmlinux else kimage.kallsyms_symbols(lines=lines)) \
            if self.img is not None else None

    def image(self, addrs: set[int], vmlinux: Path | None) -> KernelImage | None:
        if self.img is None:
            return None
        img = copy.deepcopy(self.img)
        if self.table is not None:
            kimage.resolve_static(img, addrs, self.table)
        return img

    _last: tuple[str, Path | None, "KernelTables"] | None = None
    _early: threading.Thread | None = None

    @classmethod
    def prefetch(cls, vmlinux: Path | None) -> None:
        """Make the tables in a thread now, while the probes load (the kernel's
        verifier works in the loader, on another CPU: a point's 0.4 s of
        parsing overlaps it); settle() waits for it, before anything is
        measured."""
        if cls._early is not None:
            return

        def make() -> None:
            try:
                cls._make(vmlinux)
            except (OSError, ValueError):
                pass                      # current() tries again, and says why
        cls._early = threading.Thread(target=make, name="kallsyms", daemon=True)
        cls._early.start()

    @classmethod
    def settle(cls) -> None:
        """The prefetch done: nothing of lockscope's parses while a window runs."""
        early, cls._early = cls._early, None
        if early is not None:
            early.join()

    @classmethod
    def current(cls, vmlinux: Path | None) -> "KernelTables":
        """The tables of kallsyms as it reads now: the last ones made when its
        text is the same (the points of a sweep, whose probes stay loaded:
        parsing its 100,000-odd lines took 0.4 s a point; or made while the
        probes loaded: prefetch), else new ones."""
        cls.settle()
        return cls._make(vmlinux)

    @classmethod
    def _make(cls, vmlinux: Path | None) -> "KernelTables":
        """The tables of the kernel's own symbols, kept while they read the
        same; the BPF programs' lines ("[bpf]", which come and go as programs
        load: the probes' own among them) added to a copy's symbolizer."""
        with open("/proc/kallsyms") as f:
            text = f.read()
        base, bpf = [], []
        for line in text.splitlines(True):
            (bpf if line.endswith("[bpf]\n") else base).append(line)
        base_text = "".join(base)
        last = cls._last
        if last is not None and last[1] == vmlinux and last[0] == base_text:
            tables = last[2]
        else:
            tables = cls(vmlinux, kallsyms.split(base_text))
            cls._last = (base_text, vmlinux, tables)
        if not bpf:
            return tables
        out = copy.copy(tables)
        out.sym = tables.sym.with_extra(kallsyms.split("".join(bpf)))
        return out


def raw_from_probe(data: dict, mountpoint: Path | None, vmlinux: Path | None = None, *,
                   sym: Symbolizer | None = None,
                   image: Callable[[set[int], Path | None], KernelImage | None] | None = None) -> RawProbe:
    """The probe's output as kept in the record: heaviest aggregates, their
    stacks symbolized, the objects, and the mounts they live on. `sym` and
    `image` (KernelTables.image's signature) let a caller naming many
    windows (lockscope top) bring its own tables."""
    # kallsyms read once for the symbolizer and the image, unless the caller has both
    if sym is None or image is None:
        tables = KernelTables.current(vmlinux)
        sym, image = sym or tables.sym, image or tables.image
    user_spin = userspin.resolve(data)          # the CPU samples' user stacks (before their rows are read)
    contention = heaviest(from_list(Contention, data.get("contention", [])), "total_ns")
    offcpu = heaviest(from_list(OffCpuWait, data.get("offcpu", [])), "total_ns")
    samples = heaviest(from_list(CpuSample, data.get("cpu_samples", [])), "count")
    used = {e.stack for e in contention + offcpu} | holdstacks.activity_stacks(data) | owners.stacks(data)
    kept = {e.lock for e in contention}
    objects = from_dict(Objects, data.get("objects", {}))
    table = scratch.mounts_by_dev()
    devs = {f.dev for f in objects.files} | {t.extra.get("cwd_dev") for t in objects.tasks} | \
        {sb.dev for sb in objects.superblocks}
    mounts = {d: table[d] for d in devs if d in table}
    where = str(mountpoint) if mountpoint else None
    img = image({e.lock for e in contention}, vmlinux)
    if img is not None and data.get("ktext"):
        # the text around the calls that led to waits on static locks (probes/ktext.c)
        img.text_calls = ktext.text_calls({parse_addr(k): bytes.fromhex(v) for k, v in data["ktext"].items()},
                                          sym.symbolize)
    stacks = {int(k): sym.stack(v) for k, v in data.get("stacks", {}).items() if int(k) in used}
    return RawProbe(
        contention=contention, offcpu=offcpu, cpu_samples=samples,
        sample_period_ns=data.get("sample_period_ns", 0),
        stacks=stacks,
        sample_stacks={int(k): sym.stack(v) for k, v in data.get("sample_stacks", {}).items()},
        objects=objects, layout=data.get("layout", {}),
        mounts=mounts, scratch=where,
        # cumulative wait per lock address every --series-ms (the time view)
        series=from_dict(Series, data["series"]) if "series" in data else None,
        slab=slab.resolve(from_dict(Slab, data.get("slab", {})), {e.lock for e in contention},
                          functions=_functions(contention, stacks)),
        # the lock members of the objects behind the files, typed by f_op and BTF
        objlocks=objlocks.resolve(objects, contention, mounts, where, sym.symbolize),
        # per-thread times and wake-ups (absent when the per-thread probe did not load)
        tasks=heaviest(from_list(TaskTimes, data["tasks"]), "total_ns") if "tasks" in data else None,
        wakeups=heaviest(from_list(Wakeup, data["wakeups"]), "count") if "wakeups" in data else None,
        kernel_image=img,
        waiters=[w for w in from_list(Waiter, data["waiters"]) if w.lock in kept] if "waiters" in data else None,
        waiter_every=data.get("waiter_every"),
        **user_spin, **userlocks.resolve(data), **golocks.resolve(data), **usdt.resolve(data), **holdstacks.resolve(data, sym),
        **owners.resolve(data), **filelocks.resolve(data))


def _functions(contention: list[Contention], stacks: dict[int, list[str]]) -> dict[int, set[str]]:
    """Per lock address, the functions its waits' (symbolized) stacks pass
    through, up to an interrupt entry (an interrupt's lock is not typed by
    the system call it interrupted)."""
    out: dict[int, set[str]] = defaultdict(set)
    for e in contention:
        out[e.lock] |= set(own_functions(stacks.get(e.stack, [])))
    return out


def tasks_warnings(data: dict) -> list[str]:
    probe = data.get("tasks_probe")
    if probe and not probe.get("attached"):
        return [f"per-thread times and wake-ups not measured: {probe.get('reason') or 'the probe did not load'}"]
    return []


def probe_warnings(probe: ProbeInfo) -> list[str]:
    c = probe.counters
    out = []
    lost = {k: v for k, v in c.items() if k.startswith("lost_") and v}
    for k, v in lost.items():
        out.append(f"probe: {v} events lost ({k.removeprefix('lost_').replace('_', ' ')})")
    if c.get("stacks_lost"):
        n = c["stacks_lost"]
        out.append(f"probe: {n} stack{'s' if n != 1 else ''} not stored (stack map full or hash collision); "
                   "the waits or samples are counted under an unknown stack")
    misses = sum(p.recursion_misses for p in probe.programs)
    total = c.get("contentions", 0) + c.get("offcpu_spans", 0)
    if misses:
        out.append(f"probe: the kernel skipped {misses} probe runs (BPF recursion guard: a lock contended "
                   f"inside a probe), against {total} events recorded")
    for k in ("stale_sleeping_waits", "stale_spin_waits"):
        if c.get(k):
            out.append(f"probe: {c[k]} {k.replace('_', ' ')} discarded (their end event was skipped)")
    return out


def probe_info(data: dict | None, raw: RawProbe | None, reason: str | None) -> ProbeInfo:
    if data is None:
        return ProbeInfo(attached=False, reason=reason)
    return ProbeInfo(attached=True, window_s=data["window_ns"] / 1e9, counters=data.get("counters", {}),
                     programs=from_list(ProgramStats, data.get("programs", [])),
                     maps={k: from_dict(MapUse, v) for k, v in data.get("maps", {}).items()},
                     cost=from_dict(ProbeCost, data["cost"]) if isinstance(data.get("cost"), dict) else None, raw=raw)


def _without_driver_locks(locks: list, drivers: set[str]) -> tuple[list, int]:
    """run --target: a user-space lock only the driver waited on (pgbench's
    own thread barrier) is not the work's."""
    if not drivers:
        return locks, 0
    kept = [lk for lk in locks if not lk.roles or set(lk.roles) - drivers]
    return kept, len(locks) - len(kept)


def _without_other_programs_locks(locks: list, path: set[str]) -> tuple[list, int]:
    """System-wide: a lock whose waiters are known (Lock.roles) and none of
    them on the work's path is another program's (a daemon's futex): left
    out. Kernel locks with no sampled waiter stay."""
    kept = [lk for lk in locks if not lk.roles or set(lk.roles) & path]
    return kept, len(locks) - len(kept)


def _work_first(locks: list, path: set[str]) -> list:
    """The locks the measured work waits on first: user-space locks by the
    wait of the roles on the work's path (analyzer/roles.py), then by their
    whole wait, so that another program's lock (a daemon's, system-wide) is
    never the top lock for its own threads' waits. Kernel locks have no
    per-thread split and keep their whole wait."""
    def ours(lk) -> int:
        return sum(ns for r, ns in lk.roles.items() if r in path) if lk.roles else lk.wait_ns
    return sorted(locks, key=lambda lk: (-ours(lk), -lk.wait_ns))


def _kernel_lock_roles(locks: list, raw: RawProbe, rs) -> None:
    """System-wide: a kernel lock's wait split by the role of its waiters,
    in proportion to the probe's sampled (lock, thread) pairs (raw.waiters),
    so that another program's kernel lock is not counted as the work's. A
    lock with no sampled waiter keeps its whole wait (no split)."""
    by_lock: dict[int, list] = defaultdict(list)
    for w in raw.waiters or []:
        by_lock[w.lock].append(w)
    for lk in locks:
        if lk.roles or lk.component == "user space":
            continue
        seen: dict[str, int] = defaultdict(int)
        for a in lk.addresses:
            try:
                addr = int(a, 16) if isinstance(a, str) else int(a)
            except ValueError:
                continue
            for w in by_lock.get(addr, ()):
                seen[rs.role_of(w.tid) or f"tid {w.tid}"] += w.count
        total = sum(seen.values())
        if total:
            lk.roles = {r: round(lk.wait_ns * n / total) for r, n in seen.items()}


def finish_record(rec: RunRecord, data: dict | None, raw: RawProbe | None, hw_cpi: dict | None,
                  drivers: set[int] | None = None, work: set[int] | None = None,
                  system_wide: bool = False) -> RunRecord:
    if data is not None:
        window = data["window_ns"]
        rec.locks = naming.add_sampled_spin(naming.name_locks(raw, rec.workers, window), raw, rec.workers, window)
        # who is a worker: roles, the kind of each sleep, who woke whom
        rs = roles.analyze(raw, window, drivers, work)
        # user-space locks (futex waits) next to the kernel's, Go sync.Mutex waits (uprobes on
        # the Go runtime), and application locks named by the program's own USDT probes (whose
        # semaphore sleeps are not counted again as futex locks)
        folded = usdt.folded_futexes(raw)
        user = userlocks.name_futexes(raw, rec.workers, window, rs, folded, naming.futex_spin(raw, folded)) + \
            golocks.name_go_waits(raw, rec.workers, window) + usdt.name_usdt(raw, rec.workers, window)
        # and the user-space spinning in their acquire paths, from CPU samples' user stacks
        user = userspin.add_spin(user, raw, rec.workers, window, rs.role_of if rs else None)
        # file-lock sleeps (POSIX, OFD, flock, leases) by the held lock, with its holders
        files = filelocks.name_file_locks(raw, rec.workers, window, rs.role_of if rs else None)
        rec.locks = sorted(rec.locks + user + files, key=lambda lk: -lk.wait_ns)
        # the GIL's waits by the waiters' Python frames
        runtimes.python_stacks(rec.locks, raw)
        # who held each lock while others waited, where it let go, doing what
        holders.attach(rec.locks, raw)
        owners.attach(rec.locks, raw)
        rec.warnings += (userlocks.futex_warnings(raw) + golocks.go_warnings(raw) + usdt.usdt_warnings(raw)
                         + tasks_warnings(data) + holdstacks.python_warnings(data) + filelocks.file_lock_warnings(raw))
        rec.offcpu = naming.offcpu_summary(
            raw, rec.workers, window, role_of={t: th.role for t, th in rs.threads.items()} if rs else None,
            kind_of=(lambda cls, tid: roles.sleep_kind(cls, rs.threads[tid].tgid if tid in rs.threads else 0,
                                                       rs.parents)) if rs else None)
        if rs:
            rec.roles, rec.wait_for = rs.roles, rs.edges
            rec.locks, left = _without_driver_locks(rec.locks, {r.name for r in rs.roles if r.driver})
            if left:
                rec.warnings.append(f"{left} user-space lock{'s' if left != 1 else ''} waited on only by the "
                                    "command driving the load (--target) left out")
            if system_wide:
                _kernel_lock_roles(rec.locks, raw, rs)
                rec.locks, others = _without_other_programs_locks(rec.locks, rs.path)
                if others:
                    rec.warnings.append(f"system-wide: {others} lock{'s' if others != 1 else ''} waited on only by "
                                        "other programs (roles off the work's path) left out")
            rec.locks = _work_first(rec.locks, rs.path)
        rec.warnings += probe_warnings(rec.probe)
    rec.created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    rec.lockscope_version = __version__
    rec.host = host_info()
    rec.cpi = from_dict(Cpi, hw_cpi or hwcounters.cpi_status())
    return rec


def latency_of(d: dict | None) -> dict[str, Latency]:
    return {op: Latency(**{k: v for k, v in lat.items() if k in Latency.__dataclass_fields__})
            for op, lat in (d or {}).items()}


def timeseries(events: list[dict], start_ns: int) -> list[Interval]:
    """The driver's progress events as the record's time series."""
    return [Interval(t_s=(e["t_ns"] - start_ns) / 1e9, interval_s=e.get("interval_s", 0.0),
                     ops=e.get("interval_ops", 0), ops_per_sec=e.get("ops_per_sec", 0.0),
                     op_counts=e.get("op_counts", {}), latency=latency_of(e.get("latency")))
            for e in events if "interval_s" in e]


def reference_fields(rec: RunRecord, reference: dict) -> None:
    """The driver's reference (the warm-up before the probes recorded) in
    the record, the window's rate over it, and the warning when the probes
    slowed the point (analyzer/probeeffect.py)."""
    if not reference.get("seconds"):
        return                                   # --warmup 0: no reference
    rec.reference_s = reference["seconds"]
    rec.reference_ops = reference["ops"]
    rec.reference_ops_per_sec = reference["ops_per_sec"]
    rec.probe_effect = probeeffect.ratio(rec.ops_per_sec, rec.reference_ops_per_sec)
    w = probeeffect.warning(rec)
    if w:
        rec.warnings.append(w)
