"""Which points `lockscope confirm DIR` runs again, and on which lock: by
default the collapse point of each experiment and the lock its root cause
names; --experiment, --workers and --lock choose otherwise. Experiments
that cannot be confirmed are skipped with the reason (attached processes
are never injected into: lockscope did not start them)."""
from __future__ import annotations

from dataclasses import dataclass

from lockscope.analyzer.results import Experiment
from lockscope.errors import UsageError
from lockscope.measure.confirm import ConfirmSpec


@dataclass
class Choice:
    wanted: list[str] | None = None    # --experiment: WORKLOAD or WORKLOAD-FS
    workers: int | None = None         # --workers: this point instead of the collapse point
    lock: str | None = None            # --lock: this lock instead of the root cause's
    command: list[str] | None = None   # after --: the command of the command experiments


def _matches(e: Experiment, wanted: list[str] | None) -> bool:
    return not wanted or e.workload in wanted or f"{e.workload}-{e.fs}" in wanted


def plan(exps: list[Experiment], choice: Choice, **spec_kw) -> tuple[list[ConfirmSpec], list[str]]:
    """(the points to confirm, "experiment: why skipped" lines)"""
    specs: list[ConfirmSpec] = []
    skipped: list[str] = []
    chosen = [e for e in exps if _matches(e, choice.wanted)]
    if choice.command:
        builtin = [e for e in chosen if e.kind == "builtin"]
        chosen = [e for e in chosen if e.kind == "command"]
        if len(chosen) != 1:
            raise UsageError(f"a command after -- is confirmed on one command experiment; {len(chosen)} match "
                             f"({', '.join(f'{e.workload}-{e.fs}' for e in chosen) or 'none'})",
                             "pass --experiment NAME-FS")
        skipped += [f"{e.workload}-{e.fs}: built-in, not the command given" for e in builtin]
    if choice.wanted and not chosen:
        raise UsageError(f"--experiment {','.join(choice.wanted)}: no such experiment in the results "
                         f"(there are: {', '.join(f'{e.workload}-{e.fs}' for e in exps)})")
    for e in chosen:
        name = f"{e.workload}-{e.fs}"
        if e.kind == "attach":
            skipped.append(f"{name}: attached processes are not injected into (lockscope did not start them)")
            continue
        if e.kind != "builtin" and not choice.command:
            skipped.append(f"{name}: a command: give it after -- as given to sweep, with --ops-regex or "
                           "--rate-regex for its progress lines, or --throughput-regex for the throughput it prints "
                           "when it exits")
            continue
        workers = choice.workers or (e.collapse.workers if e.collapse else
                                     e.undecided.workers if e.undecided else None)
        if workers is None:
            skipped.append(f"{name}: no collapse point (pass --workers N to confirm at a point of your choice)")
            continue
        rec = next((r for r in e.records if r.workers == workers), None)
        if rec is None:
            skipped.append(f"{name}: no point with {workers} workers (there are: "
                           f"{', '.join(str(r.workers) for r in e.records)})")
            continue
        lock = choice.lock or (e.root_cause.wait.name if e.root_cause and e.root_cause.wait.is_lock else None)
        if lock is None:
            skipped.append(f"{name}: its diagnosis names no lock (pass --lock NAME to confirm one)")
            continue
        if workers < 2:
            skipped.append(f"{name}: one worker has no one to wait for (pass --workers 2 or more)")
            continue
        command = choice.command if e.kind != "builtin" else None
        specs.append(ConfirmSpec(workload=e.workload, fs=e.fs, workers=workers, lock_name=lock,
                                 params={} if command else dict(rec.params), record_id=rec.id,
                                 command=command, **spec_kw))
    return specs, skipped
