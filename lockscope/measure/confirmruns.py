"""`lockscope confirm DIR --throughput-regex R -- CMD`: a command that
prints its throughput only when it exits (most programs people write),
confirmed with one run of the command per phase.

The phases are those of confirm.py (none, inside, none, outside at three
wait sizes, ABBA rounds, rounds added while the verdict is inconclusive
within --budget), each one run of the command, {duration} replaced by
--run seconds. In every run the probe first names the command's locks for
--discover seconds (the lock's addresses are new in every process), then
the injector adds the phase's wait to the lock's addresses until the
command exits. The run's throughput is the last match of the regex in its
output, its operations that rate times the run's wall time; the waits added
per operation are the injector's over the whole run, so a run's first
part without a wait thins the added time and the slowdown alike and the
response (their ratio) stays. The plain runs carry the same discovery
window, so it costs every phase the same.
"""
from __future__ import annotations

import contextlib
import datetime
import subprocess
import tempfile
import time

from lockscope import __version__
from lockscope.model.confirmdata import INSIDE, NONE, OUTSIDE, ConfirmRecord, Phase, Target
from lockscope.errors import LockscopeError
from lockscope.machine import scratch
from lockscope.measure import apps, background
from lockscope.measure import targets as tg
from lockscope.measure.confirm import (ConfirmSpec, Progress, auto_delays, decided, discover_with, find_lock,
                                       one_round, round_seconds, target_of, _warnings)
from lockscope.measure.inject import InjectSession
from lockscope.measure.jsonlines import kill_group, spawn_gated
from lockscope.measure.probe import ProbeSession
from lockscope.measure.runner import substitute
from lockscope.model.record import NO_FS, Lock

RUN_GRACE_S = 60                 # beyond --run before a run is stopped as hung


class _Run:
    """One run of the command, as discover() sees a load: its processes,
    and no rate while it runs (it prints none)."""

    def __init__(self, proc: subprocess.Popen, watch: str | None):
        self.proc = proc
        self.ready = {"watch_paths": [watch] if watch else []}

    @property
    def worker_pids(self) -> list[int]:
        return sorted(tg.tree(self.proc.pid))

    def rate(self, t0: int, t1: int) -> float:
        return 0.0


def _one_run(spec: ConfirmSpec, where: str, delay: int, t_start: int,
             rate_hint: float) -> tuple[Phase, Lock, Target, float]:
    """(the phase, the lock as this run named it, the target, its contended
    acquisitions per operation)"""
    with contextlib.ExitStack() as stack:
        mnt = None
        if spec.fs != NO_FS:
            mnt = stack.enter_context(scratch.mounted(spec.fs, spec.scratch_root, device=spec.device)).mountpoint
        argv = substitute(spec.command, spec.workers, mnt, duration=spec.run_s)
        out = stack.enter_context(tempfile.TemporaryFile())
        # the probe and the injector are loaded before the command starts: its run is short
        inj = stack.enter_context(InjectSession())
        with ProbeSession() as probe:
            t0 = time.monotonic_ns()
            bg0 = background.snapshot()
            try:
                proc = spawn_gated(argv, probe.track, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as e:
                raise LockscopeError(f"cannot run {argv[0]}: {e.strerror}", exit_code=2) from e
            stack.callback(kill_group, proc)
            inj.track(proc.pid)
            run = _Run(proc, str(mnt) if mnt else None)
            locks, window_s, _ = discover_with(probe, run, mnt, spec.workers, spec.discover_s, spec.vmlinux)
        lock = find_lock(locks, spec.lock_name, f"this run's first {window_s:.1f} s",
                         "pass a longer --run (the command's {duration}) or --discover, or --lock")
        for pid in run.worker_pids:
            inj.track(pid)
        contended = lock.count / window_s / rate_hint if rate_hint > 0 else 1.0
        target = target_of(lock, inj, contended)
        inj.delay(inside_ns=delay if where == INSIDE else 0, outside_ns=delay if where == OUTSIDE else 0)
        c0 = inj.counts()
        try:
            rc = proc.wait(timeout=spec.run_s + RUN_GRACE_S)
        except subprocess.TimeoutExpired:
            raise LockscopeError(f"{' '.join(argv)} ran {spec.run_s + RUN_GRACE_S:g} s, beyond --run "
                                 f"{spec.run_s:g} s: it was stopped",
                                 "pass the command's run time as {duration} in its arguments") from None
        c = inj.counts() - c0
        t1 = time.monotonic_ns()
        bg = background.measure(bg0, background.snapshot(), {proc.pid})
        inj.delay()
        out.seek(0)
        text = out.read().decode(errors="replace")
    if rc != 0:
        raise LockscopeError(f"{' '.join(argv)} exited with code {rc}: {text.strip()[-400:]}")
    tput = apps.parse_throughput(spec.throughput_regex, text)
    if tput is None:
        raise LockscopeError(f"--throughput-regex {spec.throughput_regex!r} matched nothing in the output of "
                             f"{' '.join(argv)}", "check the regex against the program's output")
    seconds = (t1 - t0) / 1e9
    added, added_ns = (c.inside, c.inside_ns) if where == INSIDE else (c.outside, c.outside_ns)
    phase = Phase(where=where, delay_ns=delay if where != NONE else 0, t_s=round((t0 - t_start) / 1e9, 3),
                  seconds=round(seconds, 3), ops=round(tput * seconds), ops_per_sec=tput, added=added,
                  added_ns=added_ns, background=round(bg.noise, 4))
    return phase, lock, target, contended


def run_confirm_per_run(spec: ConfirmSpec, progress: Progress) -> ConfirmRecord:
    t_start = time.monotonic_ns()
    progress(f"one run of {spec.run_s:g} s per phase; the first, plain, sizes the waits")
    first, lock, target, contended = _one_run(spec, NONE, 0, t_start, 0.0)
    phases = [first]
    delays, per_op = auto_delays(target.site, contended, first.ops_per_sec, target.space == "user")
    delays = spec.delays_ns or delays
    per_round = round_seconds(delays, spec.run_s + spec.discover_s)
    most = max(spec.rounds, int(spec.budget_s // per_round))
    progress(f"[1] none: {first.ops_per_sec:,.0f} ops/s; rounds of {len(one_round(delays, 0))} runs (at least "
             f"{spec.rounds}, at most {most} within --budget {spec.budget_s:g} s): waits of "
             f"{', '.join(f'{d / 1000:g}' for d in delays)} us inside and outside {lock.name}")

    def record() -> ConfirmRecord:
        return ConfirmRecord(
            workload=spec.workload, fs=spec.fs, workers=spec.workers, target=target, phases=list(phases),
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            lockscope_version=__version__, record_id=spec.record_id, discovery_s=spec.discover_s,
            alone_ops_per_sec=None, t0_monotonic_ns=t_start, lock_wait_share=lock.wait_share,
            contended_per_op=per_op,
            warnings=_warnings(spec, lock) + [f"one run of the command per phase ({spec.run_s:g} s each, its first "
                                              f"{spec.discover_s:g} s naming the lock without a wait)"])

    for r in range(most):
        plan = one_round(delays, r)[1 if r == 0 else 0:]
        for i, (where, d) in enumerate(plan, 1):
            p, _, _, _ = _one_run(spec, where, d, t_start, first.ops_per_sec)
            phases.append(p)
            progress(f"round {r + 1} [{i}/{len(plan)}] {where} {d / 1000:g} us: {p.ops_per_sec:,.0f} ops/s"
                     + (f", {p.added:,} waits added" if where != NONE else ""))
        if decided(record, r + 1, spec.rounds, most, progress):
            break
    phases.append(_one_run(spec, NONE, 0, t_start, first.ops_per_sec)[0])
    return record()
