"""Who waits for whom: the probe's wake-ups (sched_waking: waker thread ->
woken thread, with the futex the woken thread slept on and the sleep time
that wake-up ended) as a wait-for graph between roles (wPerf, OSDI'18), the
roles on the path of the measured work, and who ended each condition
variable or semaphore wait."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Callable

from lockscope.model.record import RoleEdge

NOT_TRACED = " (not traced)"
IRQ = "(interrupt or idle)"      # woken with no task running: a timer, an interrupt
PATH_SHARE = 0.10                # a role that ends this much of the workers' waits is on their path


def _weight(w) -> int:
    return w.wait_ns or w.count


def estimate_waits(wakes: list, futex_ns: dict[tuple, int]) -> list:
    """The wake-ups with the sleep time they ended estimated from the futex
    waits where the probe could not see it: a thread is often woken on its
    way to sleep, before it switched out (the probe then records 0), and
    sleeps anyway until it runs again. A futex wake-up gets its share, by
    count, of the woken thread's measured wait on that futex
    (`futex_ns`: (tid, uaddr) -> ns); other wake-ups keep what the probe
    measured."""
    counts: dict[tuple, int] = defaultdict(int)
    for w in wakes:
        if w.uaddr:
            counts[(w.wakee_tid, w.uaddr)] += w.count
    out = []
    for w in wakes:
        key = (w.wakee_tid, w.uaddr)
        if w.uaddr and futex_ns.get(key) and counts[key]:
            w = replace(w, wait_ns=max(w.wait_ns, round(futex_ns[key] * w.count / counts[key])))
        out.append(w)
    return out


def handoff_lock_parts(wakes: list, waits: list[tuple[int, int]], working: set[int]) -> dict[tuple, float]:
    """(tid, uaddr) -> the part of that thread's waits on that futex ended by
    a working peer (another working thread of a worker role), by the sleep
    time the wake-ups ended; waits with no wake-up recorded (time-outs) get 0."""
    want = set(waits)
    peer: dict[tuple, int] = defaultdict(int)
    total: dict[tuple, int] = defaultdict(int)
    for w in wakes:
        key = (w.wakee_tid, w.uaddr or 0)
        if key not in want:
            continue
        total[key] += _weight(w)
        if w.waker_tid in working and w.waker_tid != w.wakee_tid:
            peer[key] += _weight(w)
    return {k: peer[k] / total[k] for k in want if total.get(k)}


def waker_role(w, role_of: dict[int, str], name_of: Callable[[str], str]) -> str:
    if not w.waker_tid:
        return IRQ
    if w.waker_tid in role_of:
        return role_of[w.waker_tid]
    return name_of(w.waker_comm) + NOT_TRACED


def role_edges(wakes: list, role_of: dict[int, str], name_of: Callable[[str], str]) -> list[RoleEdge]:
    """Wake-ups between roles, heaviest first (by the sleep time they ended);
    a waker that is not traced is named by `name_of(its comm)`."""
    acc: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for w in wakes:
        wakee = role_of.get(w.wakee_tid)
        if wakee is None:
            continue
        a = acc[(waker_role(w, role_of, name_of), wakee)]
        a[0] += w.count
        a[1] += w.wait_ns
    edges = [RoleEdge(waker=k[0], wakee=k[1], count=v[0], wait_ns=v[1], traced=not k[0].endswith(NOT_TRACED)
                      and k[0] != IRQ) for k, v in acc.items()]
    return sorted(edges, key=lambda e: (-e.wait_ns, -e.count))


def path_roles(edges: list[RoleEdge], workers: set[str]) -> set[str]:
    """The worker roles and the traced roles they wait for: a role whose
    wake-ups end at least PATH_SHARE of the sleep time the worker roles were
    woken from (a client blocked on its server is explained by the server).
    `edges`: the wake-ups of the threads that do the work (roles.py leaves
    out a worker role's threads that only wait, such as a joining main)."""
    into = [e for e in edges if e.wakee in workers]
    total = sum(e.wait_ns for e in into)
    out = set(workers)
    for e in into:
        if e.traced and total and e.wait_ns >= PATH_SHARE * total:
            out.add(e.waker)
    return out
