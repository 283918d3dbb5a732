"""Per-instance or shared: which threads waited on each lock address (the
probe's sampled (lock, thread) pairs, contention.bpf.c `waiters`), and what
that says about a named lock: one global lock, one object shared by the
workers, or one per worker (or file)."""
from __future__ import annotations

from lockscope.model.probedata import RawProbe
from lockscope.model.record import Lock

GLOBAL = "global"          # static data of the kernel image or a module: one variable
SHARED = "shared"          # an instance waited on by several threads
PER_THREAD = "per-thread"  # several instances, each waited on by one thread
ONE_THREAD = "one-thread"  # one instance, one thread seen waiting


def threads_by_address(raw: RawProbe) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for w in raw.waiters or []:
        out.setdefault(w.lock, set()).add(w.tid)
    return out


def classify(addrs: set[int], by_addr: dict[int, set[int]], static: bool) -> tuple[int | None, int | None, str | None]:
    """(threads seen waiting, most threads on one instance, sharing) of a
    lock's addresses; (None, None, None) without samples (or GLOBAL)."""
    seen = [by_addr[a] for a in addrs if a in by_addr]
    if not seen:
        return None, None, GLOBAL if static else None
    threads = set().union(*seen)
    most = max(len(s) for s in seen)
    if static:
        how = GLOBAL
    elif most > 1:
        how = SHARED
    else:
        how = PER_THREAD if len(threads) > 1 else ONE_THREAD
    return len(threads), most, how


def clause(lk: Lock, workers: int) -> str | None:
    """What the waiters say about the lock, as a clause of the diagnosis."""
    n, how = lk.waiters, lk.sharing
    if how is None:
        return None
    by = (f", waited on by all {n} workers" if n == workers else
          f", waited on by {n} thread{'s' if n != 1 else ''}") if n else ""
    if how == GLOBAL:
        return f"one global lock{by}"
    if how == SHARED:
        if lk.instances == 1:
            return f"the same {lk.lock_class} of one shared {lk.object or 'object'}{by}"
        return f"{lk.instances} instances, each shared by up to {lk.shared_by} threads{by.replace(', waited', '; waited')}"
    if how == PER_THREAD:
        return f"one per worker ({lk.instances} instances, each waited on by one thread)"
    return "one instance, waited on by one thread (the other side holds it)"
