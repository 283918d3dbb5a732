"""What the owner of a kernel mutex or rwsem, or of a glibc pthread mutex, was
doing when waiters began to wait for it (probes/owners.bpf.h; record /3,
`Lock.owners`).

A sampled waiter reads the lock's owner word at contention_begin: the owning
task, on a CPU (running its critical section: a mutex waiter spins only then)
or off CPU (its switch-out stack, task state and the lock it waits on, kept
by the off-CPU probe for tracked threads), or an rwsem held by readers. This
covers the waits no release ends (holders.py sees only those a wake-up
ended): a mutex waiter that spins until the owner lets go. A pthread
mutex's waiter reads the owner's tid from the mutex (__owner) as it goes
to sleep: the holder's thread, and what it is doing, from the same
off-CPU record. A look that
finds the lock free (released already: a mutex waiter begins before its
first trylock) is not counted.

- `resolve(data)`: at record time, the looks as kept (`probe.raw.owners`);
  `stacks(data)`: the off-CPU stacks they refer to (kept with the others).
- `attach(locks, raw)`: each named kernel lock gets what its owners were
  doing, by share of the looks, heaviest first.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from .holders import LOCK, MIN_SHARE, ON_CPU, PREEMPTED, UNKNOWN, lock_names, off_cpu_doing
from .kernel import naming
from .kernel.knowledge import Knowledge
from .kernel.naming import default_knowledge
from lockscope.model.holddata import (KERNEL_SPACE, OWNER_NONE, OWNER_OFF_CPU, OWNER_READERS, OWNER_RUNNING,
                                      OWNER_UNTRACKED, OwnerLook)
from lockscope.model.jsondata import from_list
from lockscope.model.probedata import RawProbe
from lockscope.model.record import Lock, OwnerSeen

GLIBC_MUTEX = "pthread_mutex"   # keeps its owner's tid (__owner), read by the waiter
OWNER_MIN = 0.5              # the owner doing one thing as this part of the waits began: the diagnosis says so
TOP_OWNERS = 6               # what the owners did, kept per lock
READERS = "readers"
FIXED = {
    OWNER_RUNNING: ("on CPU", ON_CPU),
    OWNER_UNTRACKED: ("off CPU (a thread not traced)", UNKNOWN),
    OWNER_READERS: ("held by readers (no one owner)", READERS),
}


def resolve(data: dict) -> dict:
    """The owner looks of the probe's data event, as kept in the record."""
    if "owners" not in data:
        return {}
    return {"owners": sorted(from_list(OwnerLook, data["owners"]), key=lambda o: -o.count)}


def stacks(data: dict) -> set[int]:
    """The off-CPU kernel stacks of the owners looked at."""
    return {int(o.get("stack", -2)) for o in data.get("owners", []) if o.get("how") == OWNER_OFF_CPU}


def attach(locks: list[Lock], raw: RawProbe | None, kb: Knowledge | None = None) -> None:
    """Each kernel lock and glibc pthread mutex of `locks` with owner looks
    in `raw` gets Lock.owners (the looks at other futex locks read a word
    that is no owner's tid: left out)."""
    if raw is None or not raw.owners:
        return
    kb = kb or default_knowledge()
    looks = raw.owners
    kernel = naming.address_names(raw, {o.lock for o in looks if o.lock >= KERNEL_SPACE})
    name_of = lock_names(locks, raw, {o.act_lock for o in looks if (o.act_lock or 0) >= KERNEL_SPACE})
    mutexes = {lk.name for lk in locks if lk.kind == GLIBC_MUTEX}
    by_name: dict[str, list[OwnerLook]] = defaultdict(list)
    for o in looks:
        name = kernel.get(o.lock) if o.lock >= KERNEL_SPACE else name_of(o.lock, o.tgid)
        if name and (o.lock >= KERNEL_SPACE or name in mutexes):
            by_name[name].append(o)
    for lk in locks:
        if lk.name in by_name:
            lk.owners = _seen(by_name[lk.name], raw, kb, name_of)


def _seen(looks: list[OwnerLook], raw: RawProbe, kb: Knowledge, name_of) -> list[OwnerSeen]:
    counts: Counter = Counter()
    who: dict[tuple, Counter] = defaultdict(Counter)
    frames: dict[tuple, list[str]] = {}
    for o in looks:
        if o.how == OWNER_NONE:      # released already (a mutex waiter begins before its trylock)
            continue
        if o.how == OWNER_OFF_CPU:
            fr = raw.frames(o.stack)
            part = off_cpu_doing(fr, o.state, o.act_lock, o.owner_tgid, kb, name_of)
            # a preemption's stack is the thread's last walked one (offcpu.bpf.h), maybe another's
            if fr and o.state and part not in frames:
                frames[part] = kb.caller_frames(fr, off_cpu=True)[:12]
        else:
            part = FIXED.get(o.how, ("not known", UNKNOWN))
        counts[part] += o.count
        if o.owner_comm:
            who[part][o.owner_comm] += o.count
    total = sum(counts.values()) or 1
    out = [OwnerSeen(doing=name, wait_class=cls, share=round(n / total, 4), looks=n,
                     who=max(who[(name, cls)], key=who[(name, cls)].get) if who[(name, cls)] else "",
                     frames=frames.get((name, cls), []))
           for (name, cls), n in counts.most_common() if n / total >= MIN_SHARE]
    return out[:TOP_OWNERS]


def note(lk: Lock, top: int = 3) -> str:
    """The owners' line of a lock: what they did as waits began."""
    parts = []
    for o in lk.owners[:top]:
        parts.append(f"{o.doing} {o.share:.0%}" + (f" ({o.who})" if o.who and o.wait_class != LOCK else ""))
    looks = sum(o.looks for o in lk.owners)
    return f"owner as waits began: {', '.join(parts)} ({looks:,} wait{'s' if looks != 1 else ''} looked at)"


def clause(lk: Lock) -> str | None:
    """What the diagnosis says of a lock's owners: when, as most of its waits
    began (OWNER_MIN), the owner was not running its critical section but
    preempted (lock-holder preemption) or asleep; else None."""
    if not lk.owners:
        return None
    top = lk.owners[0]
    if top.share < OWNER_MIN or top.wait_class in (ON_CPU, UNKNOWN, READERS):
        return None
    if top.wait_class == PREEMPTED:
        return (f"its owner was preempted (runnable, waiting for a CPU) as {top.share:.0%} of its waits began "
                f"(lock-holder preemption: more runnable threads than CPUs)")
    what = f"waiting on {top.doing}" if top.wait_class == LOCK else f"off CPU in {top.doing}"
    return f"its owner was {what} as {top.share:.0%} of its waits began"

