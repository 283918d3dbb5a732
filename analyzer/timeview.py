"""The time view of one run: wait share per lock (and per off-CPU class
outside lock waits) in each interval of the timed window, so that bursts
(journal commits, checkpoints) are not averaged away.

The probe keeps the cumulative wait per lock address every --series-ms
(record.probe.raw.series); the last interval ends at the window's end,
with the totals of the aggregated data. Addresses are mapped to the names of
the record's locks; an address missing from a snapshot (only the heaviest
are kept) counts as its last known value."""
from __future__ import annotations

from lockscope.analyzer import naming
from lockscope.analyzer.attribution import WAIT_LABELS
from lockscope.jsondata import parse_addr
from lockscope.probedata import RawProbe, Series
from lockscope.record import RunRecord

MAX_SERIES = 8


def timeview(rec: RunRecord, max_series: int = MAX_SERIES) -> dict:
    if not rec.probe.attached:
        return {"unavailable": f"lock waits were not measured ({rec.probe.reason or 'probes disabled'})"}
    raw = rec.probe.raw or RawProbe()
    series = raw.series or Series()
    snaps: list = series.snapshots
    window_ns = rec.probe.window_s * 1e9
    if not snaps or window_ns <= 0:
        return {"unavailable": "the run record has no per-interval data (recorded by a lockscope without "
                               "the probe's --series-ms, or the window was shorter than one interval)"}
    names: dict[int, str] = {}
    for lk in rec.locks:                       # heaviest first: an address keeps its heaviest name
        for a in lk.addresses:
            if isinstance(a, str) and ":" in a:  # a user-space lock ("pid:address"): not in the kernel series
                continue
            names.setdefault(parse_addr(a), lk.name)
    # cumulative ns per name at each snapshot, and at the end of the window
    times = [s.t_ns for s in snaps if s.t_ns < window_ns] + [window_ns]
    snaps = snaps[:len(times) - 1]
    last: dict[int, int] = {}
    cum_locks: list[dict[str, float]] = []
    cum_off: list[dict[str, float]] = []
    end_locks: dict[int, int] = {}
    for e in raw.contention:
        end_locks[e.lock] = end_locks.get(e.lock, 0) + e.total_ns
    end_off: dict[str, int] = {}
    for e in raw.offcpu:
        if not e.in_lock_wait:
            cls = naming.offcpu_class(e.state, False)
            end_off[cls] = end_off.get(cls, 0) + e.total_ns
    for s in snaps + [None]:
        vals = (dict(s.locks) if s is not None else end_locks)
        for a, ns in vals.items():
            last[a] = max(ns, last.get(a, 0))       # cumulative: never decreases
        by_name: dict[str, float] = {}
        for a, ns in last.items():
            if a in names:
                by_name[names[a]] = by_name.get(names[a], 0) + ns
        cum_locks.append(by_name)
        if s is not None:
            off: dict[str, float] = {}
            for state, ns in s.offcpu:
                cls = naming.offcpu_class(state, False)
                off[cls] = off.get(cls, 0) + ns
        else:
            off = dict(end_off)
        if cum_off:                                  # cumulative: never decreases
            off = {k: max(v, cum_off[-1].get(k, 0)) for k, v in off.items()} | \
                  {k: v for k, v in cum_off[-1].items() if k not in off}
        cum_off.append(off)
    top = [lk.name for lk in rec.locks if lk.name in cum_locks[-1]][:max_series]
    top = list(dict.fromkeys(top))
    classes = sorted(cum_off[-1], key=lambda c: -cum_off[-1][c])
    out_series = []
    starts = [0.0] + times[:-1]
    for label, cum in ([(n, [c.get(n, 0) for c in cum_locks]) for n in top] +
                       [(WAIT_LABELS.get(c, f"off-CPU: {c}"), [o.get(c, 0) for o in cum_off]) for c in classes]):
        shares = []
        prev = 0.0
        for t0, t1, v in zip(starts, times, cum):
            dt = t1 - t0
            shares.append(max(0.0, v - prev) / (rec.workers * dt) if dt > 0 else 0.0)
            prev = max(prev, v)
        out_series.append({"name": label, "type": "lock" if label in top else "nonlock", "wait_share": shares})
    return {"workers": rec.workers, "interval_s": series.interval_ns / 1e9,
            "t_s": [t / 1e9 for t in times], "series": out_series,
            "truncated": bool(series.truncated)}
