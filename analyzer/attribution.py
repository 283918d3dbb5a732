"""Where the lost capacity goes: each named lock, and each class of off-CPU
time that is not a lock wait, in worker-equivalents (wait time over the
window), and the root cause of a collapse: the wait that grew most across it.

Off-CPU time spent inside a sleeping-lock wait is already part of that lock's
wait time and is not counted again."""
from __future__ import annotations

from dataclasses import dataclass

from lockscope.record import RunRecord

WAIT_LABELS = {
    "preempted": "off-CPU: preempted (runnable, waiting for a CPU)",
    "blocked": "off-CPU: blocked (uninterruptible: I/O, page or journal waits)",
    "sleep": "off-CPU: sleeping (interruptible: waiting for an event)",
    "exit": "off-CPU: exiting",
    "other": "off-CPU: other states",
}


@dataclass
class Wait:
    name: str
    type: str                     # lock | wait
    worker_equivalents: float     # wait time / window: how many workers' worth of time it takes
    wait_share: float             # worker_equivalents / workers
    wait_ns: int = 0
    tier: str | None = None
    kind: str | None = None
    lock_class: str | None = None
    instances: int | None = None


def waits(rec: RunRecord) -> dict[str, Wait]:
    """Every wait of a point by name, locks first."""
    if not rec.probe.attached or rec.probe.window_s <= 0:
        return {}
    window_ns = rec.probe.window_s * 1e9
    out: dict[str, Wait] = {}
    for lk in rec.locks:
        we = lk.wait_ns / window_ns
        out[lk.name] = Wait(lk.name, "lock", we, we / rec.workers, lk.wait_ns, lk.tier, lk.kind,
                            lk.lock_class, lk.instances)
    by_class: dict[str, int] = {}
    for o in rec.offcpu:
        if o.wait_class != "lock":
            by_class[o.wait_class] = by_class.get(o.wait_class, 0) + o.wait_ns
    for cls, ns in by_class.items():
        name = WAIT_LABELS.get(cls, f"off-CPU: {cls}")
        we = ns / window_ns
        out[name] = Wait(name, "wait", we, we / rec.workers, ns)
    return out


@dataclass
class RootCause:
    name: str
    type: str
    tier: str | None
    kind: str | None
    lock_class: str | None
    instances: int | None
    wait_share: float             # of worker time at the collapse point
    worker_equivalents: float     # at the collapse point
    growth: float                 # worker-equivalents gained from the point before
    explained_share: float        # growth / lost capacity gained, capped at 1
    explained_share_raw: float    # uncapped (waits can overlap or exceed the loss)
    from_workers: int
    at_workers: int


def root_cause(before: RunRecord, at: RunRecord, lost_before: float, lost_at: float) -> RootCause | None:
    """The wait whose worker-equivalents grow most from `before` to `at`."""
    wb, wa = waits(before), waits(at)
    best, growth = None, 0.0
    for name, w in wa.items():
        g = w.worker_equivalents - (wb[name].worker_equivalents if name in wb else 0.0)
        if g > growth:
            best, growth = w, g
    if best is None:
        return None
    gained = lost_at - lost_before
    raw = growth / gained if gained > 0 else 0.0
    return RootCause(best.name, best.type, best.tier, best.kind, best.lock_class, best.instances,
                     best.wait_share, best.worker_equivalents, growth, min(1.0, raw), raw,
                     before.workers, at.workers)
