"""The probe's own effect on a point: the window's rate (probes recording)
over the reference rate measured in the first part of the warm-up (probes
loaded, not recording; workloads/README.md, "reference").

contention_end runs with the lock just taken (probes/contention.bpf.c), so
every traced wait lengthens the critical section. A lock whose critical
section is short (a lockref, d_lockref.lock) can collapse under that: MRPH at
12 workers on a 16-CPU machine ran 2,623,676 ops/s without the probes and
429,154 with them, and the probes then saw d_lockref.lock as 86% of worker
time. Such a point's waits are the probe's as much as the workload's.

A point is flagged when the probes were recording, the reference is long
enough to mean something (MIN_REFERENCE_S, MIN_REFERENCE_OPS), and the
window ran below THRESHOLD of it. THRESHOLD = 0.7: the reference is a short
stretch right after the release, and on a machine shared with other work its
rate alone wanders: DRBL and MWCL at 1 worker and MRPH at 2 workers, with and
without the probes, on a busy 2-CPU machine (other jobs running) gave
window/reference ratios of 0.75 to 1.6. A point below 0.7 lost more than
that noise and the probes' ordinary cost (a few %
from sampling and sched_switch) explain; MRPH's collapse (0.16) is far below.
And the point must have lock waits worth naming (MIN_LOCK_SHARE of worker
time): the probe slows a point by lengthening critical sections, so a point
without contention (DRBL at 1 worker, which the busy machine above slowed to
0.75 by itself) is noise, not the probe's doing, and has no waits to
overstate. A milder slowdown (MRPH at 16 workers: 0.76) is not flagged, but the ratio
is in the record and in `lockscope run`'s text for every point.

A workload can slow down by itself as it runs: MWCM fills one directory, and
on tmpfs its rate fell from 327,800 to 147,883 ops/s over a 4-s window with
no probe at all (`lockscope run MWCM --workers 2 --duration 4 --no-probe`:
the window at 76% of the reference; probed, 69%, which is flagged). Where the
window has a time series, the point is flagged only if its first interval,
the one nearest the reference and already recorded by the probes, is below
THRESHOLD too (probed MWCM's: 97% of the reference)."""
from __future__ import annotations

from lockscope.model.record import RunRecord

THRESHOLD = 0.7
MIN_REFERENCE_S = 0.25       # the driver measures at least 0.3 s unless --warmup is shorter
MIN_REFERENCE_OPS = 100      # fewer ops (slow operations, e.g. fsync) give too coarse a rate
MIN_LOCK_SHARE = 0.1         # lock waits, share of worker time, that a slowed point must show


def ratio(window_ops_per_sec: float | None, reference_ops_per_sec: float | None) -> float | None:
    """The window's rate over the reference's; None without both."""
    if not window_ops_per_sec or not reference_ops_per_sec:
        return None
    return window_ops_per_sec / reference_ops_per_sec


def meaningful(rec: RunRecord) -> bool:
    """The record has a reference long enough to compare with."""
    return (rec.reference_ops_per_sec is not None and (rec.reference_s or 0.0) >= MIN_REFERENCE_S
            and (rec.reference_ops or 0) >= MIN_REFERENCE_OPS)


def lock_share(rec: RunRecord) -> float:
    """The point's lock waits, share of worker time (every named lock)."""
    return sum(lk.wait_share for lk in rec.locks)


def start_effect(rec: RunRecord) -> float | None:
    """The first interval's rate over the reference's, where the window has
    two intervals or more: the probes' effect with the least of the
    workload's own drift."""
    if len(rec.timeseries) < 2:
        return None
    return ratio(rec.timeseries[0].ops_per_sec, rec.reference_ops_per_sec)


def flagged(rec: RunRecord) -> bool:
    """The probes slowed this point enough that its waits overstate the
    workload's own (False for records without a reference, e.g. older ones,
    and for a window that began near the reference's rate and slowed down
    during the window)."""
    start = start_effect(rec)
    return (rec.probe.attached and meaningful(rec) and rec.probe_effect is not None
            and rec.probe_effect < THRESHOLD and (start is None or start < THRESHOLD)
            and lock_share(rec) >= MIN_LOCK_SHARE)


def warning(rec: RunRecord) -> str | None:
    """The point's warning when it is flagged, saying what it means."""
    if not flagged(rec):
        return None
    return (f"the probes slowed this point to {rec.probe_effect:.0%} of its unrecorded rate "
            f"({rec.reference_ops_per_sec:,.0f} -> {rec.ops_per_sec:,.0f} {rec.throughput_unit}): lock waits "
            "inside short critical sections are lengthened by the contention_end probe, so this point's "
            "waits overstate the workload's own; measure it with --no-probe, or with fewer workers")


CLAUSE = ("but the probes slowed that point to {:.0%} of its unrecorded rate, so its waits overstate "
          "the workload's own (see the point's warning)")


def clause(rec: RunRecord) -> str | None:
    """A clause for the diagnosis sentence about a flagged point."""
    return CLAUSE.format(rec.probe_effect) if flagged(rec) else None
