"""`lockscope confirm`: one point of a sweep run again, with a busy wait
added inside the root-cause lock's critical sections, and the same wait
just outside them as the control, in alternating phases of one run of the
workload (probes/inject.bpf.c adds the waits; the workload's own progress
lines give each phase's throughput).

1. The workload starts on a fresh file system and keeps running.
2. Discovery: the probe watches it for a short window and names its locks
   as `run` does; the lock the diagnosis named is looked up by name, and its
   addresses in this run are the ones delayed (object locks are new objects
   in every run).
3. Alone: one second with nothing attached (the rate the plain phases are
   compared with, to see what the injector's probes cost by themselves).
4. Phases, the injector attached, in rounds: none, inside d1, none,
   outside d1, none, inside d2, ..., each injected phase between two plain
   ones; every other round runs the delays backwards and the control
   first (ABBA), so that a drift of the machine falls on both sides. The
   delays are chosen from the discovery window and the first plain phase
   so that the serial prediction loses ~9/20/33% of the throughput, unless
   given.
5. Sequential: after the first --rounds rounds, rounds are added while the
   verdict (analyzer/confirmation.py, on the intervals) is inconclusive and
   the next round fits in --budget seconds of phases.

A command (`lockscope confirm DIR -- CMD`) runs the same way, its
throughput read from its own progress lines (commandload.py).

The record (lockscope/model/confirmdata.py) keeps every phase; the verdict is
computed by analyzer/confirmation.py.
"""
from __future__ import annotations

import contextlib
import datetime
import fnmatch
import os
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lockscope import __version__
from lockscope.analyzer import confirmation
from lockscope.analyzer.user import demangle
from lockscope.analyzer.user.addrspace import elf_symbols
from lockscope.model.confirmdata import INSIDE, NONE, OUTSIDE, ConfirmRecord, Phase, Target
from lockscope.errors import LockscopeError, UsageError
from lockscope.machine import scratch
from lockscope.measure import background, workloads
from lockscope.measure.assemble import finish_record, probe_info, raw_from_probe
from lockscope.measure.inject import MAX_KERNEL_NS, MAX_USER_NS, InjectSession
from lockscope.measure.probe import ProbeSession
from lockscope.measure.commandload import CommandLoad
from lockscope.measure.runner import MAX_WATCH_PATHS, substitute
from lockscope.measure.steadyload import SteadyLoad
from lockscope.model.record import NO_FS, Lock, RunRecord

Progress = Callable[[str], None]
# after a delay changes, before the phase is measured: one progress interval
# (0.1 s), so that the phase's first count is taken a whole interval after the
# change (its rate is read between counts inside the phase, never across the
# change; 0.25 s before 2026-11-28, a third of a 0.5-s phase spent waiting)
SETTLE_S = 0.1
ALONE_S = 1.0                   # the workload's rate with nothing attached, after discovery
# the serial prediction's loss of throughput at each automatic level: the
# wait added per operation is this fraction of the time per operation
AUTO_FRACTIONS = (0.1, 0.25, 0.5)
MIN_DELAY_NS = 100
# a kernel lock class with tracepoints of its own at every acquisition
MMAP_LOCK = "mm->mmap_lock"
# below this many contended acquisitions per operation, waits there are too
# few: a kernel mutex or rwsem (one address) is sampled in time instead,
# TICK_HZ timer ticks a second per CPU (inject.bpf.c, inject_tick)
FEW_CONTENDED = 0.05
TICK_HZ = 10_000
TICK_HOLD = 0.5                 # the share of a worker's time taken as holding the lock, to size the waits
# a user lock's kind -> (acquire, release, how): the functions (names or
# patterns of demangled names) whose entries get the outside and inside
# waits; how: "calls" (the C ABI), "go" (Go's register ABI), "contended"
# (lock and unlock inlined: the inside wait on return from the contended
# acquire, the outside one on return from the wake-up after a release)
USER_RELEASE = {"pthread_mutex": ("pthread_mutex_lock", "pthread_mutex_unlock", "calls"),
                # the control on entry to either acquire function
                "pthread_rwlock": ("pthread_rwlock_wrlock|pthread_rwlock_rdlock", "pthread_rwlock_unlock", "calls"),
                # inlined into their callers unless built with -gcflags=all=-l
                "sync.Mutex": ("sync.(*Mutex).Lock", "sync.(*Mutex).Unlock", "go"),
                "std::sync::Mutex": ("*std::sys::*Mutex*::lock_contended", "*std::sys::*Mutex*::wake", "contended")}


@dataclass
class ConfirmSpec:
    workload: str
    fs: str
    workers: int
    lock_name: str                          # the lock to lengthen, as the diagnosis names it
    params: dict = field(default_factory=dict)
    delays_ns: list[int] | None = None      # None: chosen from the discovery window
    phase_s: float = 1.5
    rounds: int = 2                         # at least this many; more while undecided, within budget_s
    budget_s: float = 90.0                  # the most seconds of phases
    discover_s: float = 1.5
    scratch_root: Path = scratch.DEFAULT_SCRATCH
    device: str | None = None
    record_id: str = ""
    vmlinux: Path | None = None
    # a command (`confirm ... -- CMD`): its argv as given to sweep ({n}, {dir},
    # {duration}) and how its output gives the throughput (commandload.py)
    command: list[str] | None = None
    ops_regex: str | None = None
    rate_regex: str | None = None
    # a command that prints its throughput only when it exits: one run per phase
    # (confirmruns.py), each told to run run_s seconds ({duration})
    throughput_regex: str | None = None
    run_s: float = 3.0


def discover(load: SteadyLoad | CommandLoad, mountpoint: Path | None, workers: int, seconds: float,
             vmlinux: Path | None, probe: ProbeSession) -> tuple[list[Lock], float, float]:
    """The workload's locks named as `run` names them, from a probe window of
    `seconds`: (locks, window seconds, the workload's ops/s in the window).
    `probe`: begun already (ProbeSession.begin, loading while the workload
    started), closed here."""
    try:
        probe.wait_ready()
        for pid in load.worker_pids:
            probe.track(pid)
        return discover_with(probe, load, mountpoint, workers, seconds, vmlinux)
    finally:
        probe.close()             # detached before the workload's rate alone is measured


def discover_with(probe: ProbeSession, load, mountpoint: Path | None, workers: int, seconds: float,
                  vmlinux: Path | None) -> tuple[list[Lock], float, float]:
    """discover() with a probe already loaded and tracking the workload."""
    for path in load.ready.get("watch_paths", [])[:MAX_WATCH_PATHS]:
        probe.watch(path)        # the objects whose locks are named by path, as in `run`
    t0 = probe.start()["t_ns"]
    time.sleep(seconds)
    data = probe.stop()
    window_s = data["window_ns"] / 1e9
    raw = raw_from_probe(data, mountpoint, vmlinux)
    rec = RunRecord(id="discovery", workload="discovery", fs=NO_FS, workers=workers, duration_s=window_s,
                    ops=None, ops_per_sec=None, probe=probe_info(data, raw, None))
    finish_record(rec, data, raw, None)
    return rec.locks, window_s, load.rate(t0, data["t_stop_ns"])


def _functions(syms, names: list[str]) -> list[int | None]:
    """The addresses of functions `names` (a name, or a pattern of demangled
    names) in ELF symbols `syms`; None for one not there."""
    readable = demangle.demangle_all(n for _, _, n in syms.functions if demangle.is_mangled(n)) \
        if any("*" in name for name in names) else {}
    return [next((a for a, _, n in syms.functions if (fnmatch.fnmatchcase(readable.get(n, n), name) if "*" in name
                                                       else n == name)), None) for name in names]


def _user_functions(tgid: int, names: list[str]) -> tuple[str, list[int]]:
    """(path, the file offset of each of `names`) in the library or
    executable of process tgid that defines them all (glibc's
    pthread_mutex_lock/unlock, Rust std's linked into the program)."""
    seen = set()
    with open(f"/proc/{tgid}/maps") as f:
        paths = [ln.split(None, 5)[5].strip() for ln in f if len(ln.split(None, 5)) == 6]
    for path in paths:
        if not path.startswith("/") or path in seen:
            continue
        seen.add(path)
        syms = elf_symbols(path)
        if not syms:
            continue
        offs = []
        for vaddr in _functions(syms, names):
            seg = next((s for s in syms.segments if vaddr is not None and s[2] <= vaddr < s[2] + s[1]), None)
            if seg is None:
                break
            offs.append(vaddr - seg[2] + seg[0])
        if len(offs) == len(names):
            return path, offs
    raise LockscopeError(f"no library of process {tgid} defines {' and '.join(names)}")


def kernel_site(lock: Lock, contended_per_op: float) -> str:
    """How a kernel lock gets its waits: mmap (its own tracepoints), tick
    (sampled in time while held), or contended (at contended acquisitions)."""
    if lock.lock_class == MMAP_LOCK:
        return "mmap"
    if contended_per_op < FEW_CONTENDED and lock.kind in ("mutex", "rwsem") and len(lock.addresses) == 1:
        return "tick"
    return "contended"


KERNEL_HOW = {
    "mmap": "a busy wait after every acquisition (mmap_lock:mmap_lock_acquire_returned), and for the control "
            "before it (mmap_lock_start_locking)",
    "tick": f"a busy wait at {TICK_HZ:,} timer ticks a second per CPU landing while a worker holds the lock (its "
            "owner word), and for the control at the ticks landing while a worker runs without it",
    "contended": "a busy wait after each contended acquisition (lock:contention_end), and for the control at "
                 "the acquiring thread's next system-call return",
    "file": "a busy wait after every lock taken on the file (filelock:posix_lock_inode, flock_lock_inode), and for "
            "the control after every release",
}


def target_of(lock: Lock, inj: InjectSession, contended_per_op: float) -> Target:
    """Hand `lock`'s addresses to the injector; what will be delayed, in words."""
    t = Target(name=lock.name, lock_class=lock.lock_class, kind=lock.kind, space="kernel",
               addresses=list(lock.addresses))
    if lock.kind == "file lock":
        # its addresses are its file's inode: every lock of the file taken and released is delayed
        t.site = "file"
        for a in lock.addresses:
            inj.file_lock(int(a, 16))
        t.how = KERNEL_HOW["file"]
        return t
    user = [a for a in lock.addresses if ":" in a]
    if not user:
        site = t.site = kernel_site(lock, contended_per_op)
        for a in lock.addresses:
            if site == "tick":
                inj.tick_lock(int(a, 16), lock.kind == "rwsem", TICK_HZ)
            else:
                inj.kernel_lock(int(a, 16), every_mmap_lock=site == "mmap")
        t.how = KERNEL_HOW[site]
        return t
    if lock.kind not in USER_RELEASE:
        raise UsageError(f"confirm cannot lengthen the critical sections of {lock.name} ({lock.kind}): "
                         f"it adds waits to kernel locks and to {', '.join(USER_RELEASE)} locks",
                         "pass --lock with another lock of the diagnosis (`lockscope analyze` lists them)")
    t.space = "user"
    acquires, release, how = USER_RELEASE[lock.kind]
    t.site = "contended-paths" if how == "contended" else how
    for a in user:
        tgid, addr = a.split(":")
        path, offs = _user_functions(int(tgid), acquires.split("|") + [release])
        for acq_off in offs[:-1]:
            if how == "contended":
                inj.contended_user_lock(path, acq_off, offs[-1], int(tgid), int(addr, 16))
            else:
                inj.user_lock(path, acq_off, offs[-1], int(tgid), int(addr, 16), go=how == "go")
        t.acquire, t.release = f"{acquires.replace('|', ', ')} ({path})", f"{release} ({path})"
    t.how = (f"a busy wait on return from each contended acquisition ({acquires.strip('*')}), and for the control "
             f"on return from the wake-up after a release ({release.strip('*')}): lock and unlock are inlined"
             if how == "contended" else
             f"a busy wait before each release ({release}), and for the control on entry to "
             f"{acquires.replace('|', ' or ')}")
    return t


# the sites whose waits go at every acquisition or release (one per operation, taken)
EVERY = ("mmap", "calls", "go")


def auto_delays(site: str, contended_per_op: float, ops_per_sec: float,
                user: bool) -> tuple[list[int], float | None]:
    """Delays whose serial prediction loses AUTO_FRACTIONS of the throughput
    (ops_per_sec, with the injector attached): wait per acquisition d with
    d x (acquisitions per op) = f / (ops/s). At contended acquisitions
    (kernel, Rust's contended paths) those are counted per op in the
    discovery window; at every release or acquisition (EVERY) taken as one
    per op. (delays, the contended acquisitions per op they assumed)"""
    per_op = None if site in EVERY else contended_per_op
    cap = MAX_USER_NS if user else MAX_KERNEL_NS
    if site == "tick":      # a wait at each tick that finds the lock held: f of the time = TICK_HZ x TICK_HOLD x d
        return sorted({int(min(cap, round(f / (TICK_HZ * TICK_HOLD) * 1e9, -1))) for f in AUTO_FRACTIONS}), per_op
    acq = per_op if per_op else 1.0
    delays = [min(cap, max(MIN_DELAY_NS, round(f / ops_per_sec / acq * 1e9, -1))) for f in AUTO_FRACTIONS]
    return sorted(set(int(d) for d in delays)), per_op


def _phase(load: SteadyLoad | CommandLoad, inj: InjectSession, where: str, delay: int, seconds: float, t_start: int) -> Phase:
    inj.delay(inside_ns=delay if where == INSIDE else 0, outside_ns=delay if where == OUTSIDE else 0)
    time.sleep(SETTLE_S)
    bg0 = background.snapshot()
    c0, t0 = inj.counts(), time.monotonic_ns()
    time.sleep(seconds)
    t1 = time.monotonic_ns()
    bg = background.measure(bg0, background.snapshot(), {load.proc.pid} if load.proc else set())
    if load.ended:
        raise LockscopeError(f"the workload stopped during the phases ({where} {delay / 1000:g} us, "
                             f"{(t1 - t_start) / 1e9:.0f} s in; its messages are above)",
                             "a workload that fills its file system (MWCM creates files) runs out over many "
                             "phases: pass fewer or shorter ones (--rounds 1, --phase 0.5, a smaller --budget)")
    c = inj.counts() - c0
    # the injector's counts cover [t0, t1]; the progress lines a little less:
    # the operations are their rate over the counts' window
    rate = load.rate(t0, t1)
    ops = round(rate * (t1 - t0) / 1e9)
    added, added_ns = (c.inside, c.inside_ns) if where == INSIDE else (c.outside, c.outside_ns)
    return Phase(where=where, delay_ns=delay if where != NONE else 0, t_s=round((t0 - t_start) / 1e9, 3),
                 seconds=round((t1 - t0) / 1e9, 3), ops=ops, ops_per_sec=rate, added=added, added_ns=added_ns,
                 background=round(bg.noise, 4))


def _whole_rounds(phases: list[Phase]) -> list[Phase]:
    """The phases up to the plain one that closed the last whole round
    (every injected phase keeps a plain one after it)."""
    last = max((i for i, p in enumerate(phases) if p.where == NONE), default=0)
    injected = sum(p.where != NONE for p in phases[:last])
    per_round = 2 * len({p.delay_ns for p in phases if p.where != NONE})
    keep = injected - injected % per_round if per_round else injected
    seen, out = 0, []
    for p in phases:
        if p.where != NONE:
            if seen == keep:
                break
            seen += 1
        out.append(p)
    return out


def one_round(delays: list[int], r: int) -> list[tuple[str, int]]:
    """Round r (from 0): none, inside d, none, outside d for every delay;
    odd rounds backwards and with the control first (ABBA)."""
    out = []
    first, second = (INSIDE, OUTSIDE) if r % 2 == 0 else (OUTSIDE, INSIDE)
    for d in (delays if r % 2 == 0 else list(reversed(delays))):
        out += [(NONE, 0), (first, d), (NONE, 0), (second, d)]
    return out


def schedule(delays: list[int], rounds: int) -> list[tuple[str, int]]:
    """`rounds` rounds (one_round), ending with none."""
    return [ph for r in range(rounds) for ph in one_round(delays, r)] + [(NONE, 0)]


def round_seconds(delays: list[int], phase_s: float) -> float:
    return len(one_round(delays, 0)) * (phase_s + SETTLE_S)


def _start_load(spec: ConfirmSpec, stack: contextlib.ExitStack, progress: Progress):
    """(the running workload or command, its file system's mount point or None)"""
    needs_dir = spec.fs != NO_FS if spec.command else workloads.check_workload(spec.workload).get("needs_dir", True)
    mnt = None
    if needs_dir:
        progress(f"preparing {spec.fs}")
        mnt = stack.enter_context(scratch.mounted(spec.fs, spec.scratch_root, device=spec.device)).mountpoint
    planned = len(schedule(spec.delays_ns or list(AUTO_FRACTIONS), spec.rounds))
    duration = ALONE_S + spec.discover_s + 3 + max(planned * (spec.phase_s + SETTLE_S + 0.1), spec.budget_s) + 30
    if spec.command:
        argv = [a.replace("{duration}", f"{duration:.0f}") for a in substitute(spec.command, spec.workers, mnt)]
        progress(f"running {shlex.join(argv)}")
        return stack.enter_context(CommandLoad(argv, spec.ops_regex, spec.rate_regex, mnt)), mnt
    directory = mnt or stack.enter_context(tempfile.TemporaryDirectory(prefix="lockscope-confirm-"))
    return stack.enter_context(SteadyLoad(spec.workload, spec.workers, directory, duration, params=spec.params)), mnt


def find_lock(locks: list[Lock], name: str, where: str, fix: str) -> Lock:
    """The lock `name` among those a probe window named, or an error listing them."""
    lock = next((lk for lk in locks if lk.name == name), None)
    if lock is None:
        top = "; ".join(f"{lk.name} ({lk.wait_share:.0%})" for lk in locks[:5]) or "none"
        raise LockscopeError(f"the lock to confirm, {name}, was not waited on in {where}; the locks waited on "
                             f"were: {top}", fix)
    return lock


def decided(record: Callable[[], ConfirmRecord], done: int, least: int, most: int, progress: Progress) -> bool:
    """After `done` rounds: whether to stop, the verdict decided (looked at
    from `least` rounds on, not after the last round allowed, `most`)."""
    if done < least or done == most:
        return False
    c = confirmation.confirm(record())
    if c.verdict in confirmation.DECIDED:
        progress(f"decided after {done} rounds: {c.verdict}")
        return True
    progress(f"undecided after {done} rounds ({c.why}); another round")
    return False


def run_confirm(spec: ConfirmSpec, progress: Progress) -> ConfirmRecord:
    with contextlib.ExitStack() as stack:
        probe = ProbeSession()
        stack.callback(probe.close)
        probe.begin()                     # loads while the workload starts (not measured: discovery names)
        load, mnt = _start_load(spec, stack, progress)
        progress(f"discovery: naming the locks of {spec.workload} ({spec.workers} workers) for {spec.discover_s:g} s")
        locks, window_s, disc_rate = discover(load, mnt, spec.workers, spec.discover_s, spec.vmlinux, probe)
        t0 = time.monotonic_ns()            # then its rate with nothing attached, warmed up
        time.sleep(ALONE_S)
        alone = load.rate(t0, time.monotonic_ns())
        lock = find_lock(locks, spec.lock_name, f"the discovery window ({window_s:.1f} s)",
                         "pass --lock with one of those names, or a longer --discover")
        inj = stack.enter_context(InjectSession())
        for pid in load.worker_pids:
            inj.track(pid)
        contended = lock.count / window_s / max(disc_rate, 1e-9)
        target = target_of(lock, inj, contended)
        t_start = time.monotonic_ns()
        phases = [_phase(load, inj, NONE, 0, spec.phase_s, t_start)]     # the first plain one sizes the delays
        delays, per_op = auto_delays(target.site, contended, phases[0].ops_per_sec, target.space == "user")
        delays = spec.delays_ns or delays
        per_round = round_seconds(delays, spec.phase_s)
        most = max(spec.rounds, int(spec.budget_s // per_round))
        progress(f"alone: {alone:,.0f} ops/s; rounds of {len(one_round(delays, 0))} phases of {spec.phase_s:g} s "
                 f"(at least {spec.rounds}, at most {most} within --budget {spec.budget_s:g} s): waits of "
                 f"{', '.join(f'{d / 1000:g}' for d in delays)} us inside and outside {lock.name}; "
                 f"none: {phases[0].ops_per_sec:,.0f} ops/s")

        def record() -> ConfirmRecord:
            return ConfirmRecord(
                workload=spec.workload, fs=spec.fs, workers=spec.workers, target=target, phases=list(phases),
                created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                lockscope_version=__version__, record_id=spec.record_id, discovery_s=round(window_s, 3),
                alone_ops_per_sec=alone, t0_monotonic_ns=t_start,
                lock_wait_share=lock.wait_share, contended_per_op=per_op,
                warnings=_warnings(spec, lock))

        stopped = None
        for r in range(most):
            plan = one_round(delays, r)[1 if r == 0 else 0:]      # round 1's first plain phase is above
            for i, (where, d) in enumerate(plan, 1):
                try:
                    phases.append(_phase(load, inj, where, d, spec.phase_s, t_start))
                except LockscopeError as e:
                    if r == 0 or not load.ended:
                        raise
                    # a workload that ends after a whole round (MWCM fills its file system):
                    # the verdict comes from the rounds it completed
                    stopped = (f"the workload stopped in round {r + 1} ({e.message.split(';')[0]}): the verdict "
                               f"is from the {r} round{'s' if r != 1 else ''} before")
                    phases = _whole_rounds(phases)
                    break
                p = phases[-1]
                progress(f"round {r + 1} [{i}/{len(plan)}] {where} {d / 1000:g} us: "
                         f"{p.ops_per_sec:,.0f} ops/s" + (f", {p.added:,} waits added" if where != NONE else ""))
            if stopped:
                progress(stopped)
                break
            if decided(record, r + 1, spec.rounds, most, progress):
                break
        if not stopped:
            phases.append(_phase(load, inj, NONE, 0, spec.phase_s, t_start))
        inj.delay()
    rec = record()
    if stopped:
        rec.warnings.append(stopped)
    return rec


def _warnings(spec: ConfirmSpec, lock: Lock) -> list[str]:
    out = []
    if lock.instances > len(lock.addresses):
        out.append(f"only {len(lock.addresses)} of the lock's {lock.instances} instances (addresses) in the discovery "
                   "window got waits: the others' critical sections were not lengthened")
    if (os.cpu_count() or 1) < spec.workers:
        out.append(f"{spec.workers} workers on {os.cpu_count()} CPUs: an outside wait competes for CPU time too")
    return out
