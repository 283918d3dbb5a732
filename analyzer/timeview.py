"""The time view of one run: wait share per lock (and per off-CPU class
outside lock waits) in each interval of the timed window, so that bursts
(journal commits, checkpoints) are not averaged away.

The probe keeps the cumulative wait per lock address every --series-ms
(record.probe.raw.series); the last interval ends at the window's end,
with the totals of the aggregated data. Addresses are mapped to the names of
the record's locks; an address missing from a snapshot (only the heaviest
are kept) counts as its last known value."""
from __future__ import annotations

from .kernel import naming
from .attribution import LOCK, NONLOCK, WAIT_LABELS
from .results import TimeSeries, TimeView, Unavailable
from lockscope.model.jsondata import parse_addr
from lockscope.model.probedata import RawProbe, Series, Snapshot
from lockscope.model.record import RunRecord

MAX_SERIES = 8
NO_SERIES = ("the run record has no per-interval data (recorded by a lockscope without the probe's "
             "--series-ms, or the window was shorter than one interval)")


def timeview(rec: RunRecord, max_series: int = MAX_SERIES) -> TimeView | Unavailable:
    if not rec.probe.attached:
        return Unavailable(f"lock waits were not measured ({rec.probe.reason or 'probes disabled'})")
    raw = rec.probe.raw or RawProbe()
    series = raw.series or Series()
    window_ns = rec.probe.window_s * 1e9
    if not series.snapshots or window_ns <= 0:
        return Unavailable(NO_SERIES)
    times = [s.t_ns for s in series.snapshots if s.t_ns < window_ns] + [window_ns]
    snaps = series.snapshots[:len(times) - 1]
    cum_locks = _cumulative_locks(snaps, raw, _lock_names(rec))
    cum_off = _cumulative_offcpu(snaps, raw)
    top = list(dict.fromkeys(lk.name for lk in rec.locks if lk.name in cum_locks[-1]))[:max_series]
    classes = sorted(cum_off[-1], key=lambda c: -cum_off[-1][c])
    if rec.roles:
        # the series has off-CPU time by task state of every traced thread: it
        # cannot tell a worker's sleep from an idle thread's (roles, sleep
        # kinds), so only preemption and uninterruptible waits are drawn
        classes = [c for c in classes if c in ("preempted", "blocked")]
    out = [TimeSeries(n, LOCK, _shares([c.get(n, 0) for c in cum_locks], times, rec.workers)) for n in top]
    out += [TimeSeries(WAIT_LABELS.get(c, f"off-CPU: {c}"), NONLOCK,
                       _shares([o.get(c, 0) for o in cum_off], times, rec.workers)) for c in classes]
    return TimeView(rec.workers, series.interval_ns / 1e9, [t / 1e9 for t in times], out, bool(series.truncated))


def _lock_names(rec: RunRecord) -> dict[int, str]:
    """Kernel lock address (a file lock's: its inode's) -> the name of its
    lock; heaviest lock first, so an address keeps its heaviest name.
    User-space locks ("pid:address") are not in the kernel's series."""
    names: dict[int, str] = {}
    for lk in rec.locks:
        for a in lk.addresses:
            if isinstance(a, str) and ":" in a:
                continue
            names.setdefault(parse_addr(a), lk.name)
    return names


def _cumulative_locks(snaps: list[Snapshot], raw: RawProbe, names: dict[int, str]) -> list[dict[str, float]]:
    """Cumulative wait per lock name at each snapshot and at the window's end
    (the aggregated totals). An address missing from a snapshot (only the
    heaviest are kept) counts as its last known value."""
    end: dict[int, int] = {}
    for e in raw.contention:
        end[e.lock] = end.get(e.lock, 0) + e.total_ns
    for w in raw.file_lock_waits or []:          # a file lock's, by its file's inode (probes/series.c)
        end[w.inode] = end.get(w.inode, 0) + w.total_ns
    last: dict[int, int] = {}
    out: list[dict[str, float]] = []
    for vals in [dict(s.locks) for s in snaps] + [end]:
        for a, ns in vals.items():
            last[a] = max(ns, last.get(a, 0))       # cumulative: never decreases
        by_name: dict[str, float] = {}
        for a, ns in last.items():
            if a in names:
                by_name[names[a]] = by_name.get(names[a], 0) + ns
        out.append(by_name)
    return out


def _cumulative_offcpu(snaps: list[Snapshot], raw: RawProbe) -> list[dict[str, float]]:
    """Cumulative off-CPU time outside lock waits per class (by task state) at
    each snapshot and at the window's end."""
    end: dict[str, float] = {}
    for e in raw.offcpu:
        if not e.in_lock_wait:
            cls = naming.offcpu_class(e.state, False)
            end[cls] = end.get(cls, 0) + e.total_ns
    out: list[dict[str, float]] = []
    for s in snaps + [None]:
        if s is not None:
            off: dict[str, float] = {}
            for state, ns in s.offcpu:
                cls = naming.offcpu_class(state, False)
                off[cls] = off.get(cls, 0) + ns
        else:
            off = dict(end)
        if out:                                      # cumulative: never decreases
            off = {k: max(v, out[-1].get(k, 0)) for k, v in off.items()} | \
                  {k: v for k, v in out[-1].items() if k not in off}
        out.append(off)
    return out


def _shares(cum: list[float], times: list[float], workers: int) -> list[float]:
    """Wait share of worker time in each interval, from cumulative ns, each
    at most 1. A wait is counted when it ends, so a long one (a vfork parent
    blocked while its child runs, threads asleep across intervals) lands
    whole in the interval it ends in: what an interval holds beyond its
    workers' time (workers x its length) happened before it, and is moved
    back to the intervals before, as far as they have room (a fork/exit
    storm at 8 workers read "blocked 59%..113%" before). What the first
    interval cannot hold either (more traced threads waiting than workers)
    is not drawn."""
    deltas, caps, prev = [], [], 0.0
    for t0, t1, v in zip([0.0] + times[:-1], times, cum):
        deltas.append(max(0.0, v - prev))
        caps.append(workers * (t1 - t0))
        prev = max(prev, v)
    for i in range(len(deltas) - 1, 0, -1):
        if deltas[i] > caps[i]:
            deltas[i - 1] += deltas[i] - caps[i]
            deltas[i] = caps[i]
    return [min(d, c) / c if c > 0 else 0.0 for d, c in zip(deltas, caps)]
