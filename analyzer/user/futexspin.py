"""Kernel locks spun on inside the futex syscalls, charged to the user-space
lock they serve (issue 25).

A contended pthread mutex makes its threads call futex(2) on its word, and
those calls spin on kernel locks: the futex hash bucket's lock, a runqueue
lock or a task's pi_lock taken to wake a waiter (`try_to_wake_up <-
wake_up_q <- futex_wake`). Those waits are the mutex's cost, not a kernel
lock's of their own. The probe (probes/futexspin.bpf.h) keys each spinning
wait inside a futex syscall by the syscall's futex word as well
(`RawProbe.futex_kernel`, a breakdown of rows of `RawProbe.contention`).
Where that word is a user-space lock's (`userlocks.lock_words`), the waits
move: out of the kernel lock (naming.name_locks) and into the user-space
lock (userlocks.name_futexes), which lists them per kernel lock name
(`Lock.kernel_spin`). Both sides take the same `charges`, so the time moves
exactly once. Where the word is not known (no futex syscall, interrupt
context, a word that is no recorded lock's) the kernel lock keeps its waits.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Iterable

from lockscope.model.probedata import Contention, FutexKernelWait, RawProbe

Key = tuple[int, int, int]          # (kernel lock, flags, stack) of a RawProbe.contention row


def _key(e) -> Key:
    return (e.lock, e.flags, e.stack)


def charges(raw: RawProbe, words: set[tuple[int, int]]) -> list[FutexKernelWait]:
    """The futex-internal waits on the words (tgid, uaddr) of `words`, each at
    most what raw.contention holds of its (lock, flags, stack): a record keeps
    the heaviest aggregates of each kind, and a row whose kernel aggregate was
    left out (or whose kernel map was full) moves nothing."""
    left: dict[Key, list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in raw.contention:
        rest = left[_key(e)]
        rest[0] += e.count
        rest[1] += e.total_ns
        rest[2] += e.untimed
    out = []
    for r in sorted(raw.futex_kernel or [], key=lambda r: -r.total_ns):
        rest = left.get(_key(r))
        if (r.tgid, r.uaddr) not in words or rest is None:
            continue
        n, ns, untimed = min(r.count, rest[0]), min(r.total_ns, rest[1]), min(r.untimed, rest[2])
        if n <= 0 and ns <= 0:
            continue
        rest[0] -= n
        rest[1] -= ns
        rest[2] -= untimed
        out.append(replace(r, count=n, total_ns=ns, untimed=untimed))
    return out


def remaining(raw: RawProbe, charged: Iterable[FutexKernelWait]) -> dict[int, list[Contention]]:
    """raw.contention by lock address less the charged waits; an aggregate
    left with no wait is dropped, and so is an address left with none."""
    taken: dict[Key, list[int]] = defaultdict(lambda: [0, 0, 0])
    for c in charged:
        t = taken[_key(c)]
        t[0] += c.count
        t[1] += c.total_ns
        t[2] += c.untimed
    out: dict[int, list[Contention]] = {}
    for e in raw.contention:
        t = taken.get(_key(e))
        if t:
            n, ns, untimed = min(t[0], e.count), min(t[1], e.total_ns), min(t[2], e.untimed)
            t[0] -= n
            t[1] -= ns
            t[2] -= untimed
            e = replace(e, count=e.count - n, total_ns=e.total_ns - ns, untimed=e.untimed - untimed)
            if e.count <= 0 and e.total_ns <= 0:
                continue
        out.setdefault(e.lock, []).append(e)
    return out


def split(total: int, weights: list[float]) -> list[int]:
    """`total` in integer parts proportional to `weights` (equal parts when
    all are 0), adding up to it exactly (largest remainders)."""
    if not weights:
        return []
    s = sum(weights)
    exact = [total * w / s for w in weights] if s > 0 else [total / len(weights)] * len(weights)
    parts = [int(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: parts[i] - exact[i])[:total - sum(parts)]:
        parts[i] += 1
    return parts
