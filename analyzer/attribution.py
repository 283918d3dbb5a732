"""Where the lost capacity goes: each named lock, and each class of off-CPU
time that is not a lock wait, in worker-equivalents (wait time over the
window), and the root cause of a collapse: the wait that grew most across it.

Off-CPU time spent inside a sleeping-lock wait is already part of that lock's
wait time and is not counted again; so is the off-CPU time of the futex waits
that user-space locks are made of.

One vocabulary: a wait is a lock (`LOCK`) or not (`NONLOCK`: off-CPU time
outside lock waits, by class), in every result here."""
from __future__ import annotations

from dataclasses import dataclass, field

from . import holders, sleepkinds
from .kernel import sharing
from lockscope.model.record import OffCpu, RunRecord

LOCK = "lock"                    # Wait.type of a lock wait
NONLOCK = "nonlock"              # Wait.type of off-CPU time outside lock waits

USER_SPACE = "user space"        # Lock.component of the user-space (futex) locks
FUTEX_WAIT = "futex wait"        # the off-CPU class of sleeps in the futex syscall
OTHER_CPU = "CPU of other roles"  # Wait.lock_class of the CPU other roles took from the workers
MIN_SHOWN = 0.001                # CPU of another role below this share of the window is not a line

WAIT_LABELS = {
    "preempted": "off-CPU: preempted (runnable, waiting for a CPU)",
    "accept wait": "off-CPU: accept wait",
    "blocked": "off-CPU: blocked (uninterruptible: I/O, page or journal waits)",
    "sleep": "off-CPU: sleeping (interruptible: waiting for an event)",
    "exit": "off-CPU: exiting",
    "other": "off-CPU: other states",
}


@dataclass
class Wait:
    name: str
    type: str                     # LOCK | NONLOCK
    worker_equivalents: float     # wait time / window: how many workers' worth of time it takes
    wait_share: float             # worker_equivalents / workers
    wait_ns: int = 0
    tier: str | None = None       # locks: verified | inferred | site
    kind: str | None = None       # locks: mutex, rwsem, spinlock, pthread_mutex, ...
    lock_class: str | None = None  # locks: the lock's class; other waits: the off-CPU class
    instances: int | None = None  # locks: distinct addresses
    sharing: str | None = None    # locks: one global lock, shared, one per worker (analyzer/kernel/sharing.py)

    @property
    def is_lock(self) -> bool:
        return self.type == LOCK

    @property
    def category(self) -> str:
        """What the attribution calls its class: a lock's type, or the
        off-CPU class of another wait."""
        return (self.kind or "unknown") if self.is_lock else (self.lock_class or "other")


def waits(rec: RunRecord) -> dict[str, Wait]:
    """Every wait of a point by name, locks first. A record with roles
    (schema /2) counts only what is lost to the measured work: the lock
    waits of the roles on its path, the other non-idle waits of the worker
    roles, and the CPU that other roles took from them; an older record
    counts every traced task as a worker."""
    if not rec.probe.attached or rec.probe.window_s <= 0:
        return {}
    if rec.roles:
        return _role_waits(rec)
    window_ns = rec.probe.window_s * 1e9
    out: dict[str, Wait] = {}
    for lk in rec.locks:
        out[lk.name] = _lock_wait(lk, lk.wait_ns, rec.workers, window_ns)
    _add_nonlock(out, _nonlock(rec)[0], rec.workers, window_ns)
    return out


def _plain_nonlock(rec: RunRecord) -> dict[str, int]:
    """Off-CPU time outside lock waits by class, of a record without roles
    (every traced task a worker)."""
    by_class: dict[str, int] = {}
    kinds = sleepkinds.default()
    for o in rec.offcpu:
        if o.in_lock_wait or o.wait_class == "lock" or kinds.class_kind(o.wait_class) == sleepkinds.LOCK:
            continue             # already part of its lock's wait time (a file lock's too): counted once, there
        cls = nonlock_class(o)
        by_class[cls] = by_class.get(cls, 0) + o.wait_ns
    # a user-space lock's wait is its thread's sleep in the futex syscall, which
    # off-CPU time also has (class "futex wait"): counted once, under the lock;
    # what is left there (pthread_join, condition variables) stays a non-lock wait; the
    # kernel spinning inside its futex calls (Lock.kernel_spin) was on CPU, no sleep
    user_ns = sum(lk.wait_ns - sum(k.wait_ns for k in lk.kernel_spin)
                  for lk in rec.locks if lk.component == USER_SPACE)
    if user_ns and FUTEX_WAIT in by_class:
        by_class[FUTEX_WAIT] = max(0, by_class[FUTEX_WAIT] - user_ns)
        if not by_class[FUTEX_WAIT]:
            del by_class[FUTEX_WAIT]
    return by_class


def _lock_wait(lk, ns: float, workers: int, window_ns: float, capacity: float | None = None) -> Wait:
    """`capacity`: the workers the share is of (see capacity()), else `workers`."""
    we = ns / window_ns
    return Wait(lk.name, LOCK, we, we / (capacity or workers), int(ns), lk.tier, lk.kind, lk.lock_class,
                lk.instances, sharing.clause(lk, workers))


def _add_nonlock(out: dict[str, Wait], by_class: dict[str, int], workers: float, window_ns: float) -> None:
    for cls, ns in by_class.items():
        name = WAIT_LABELS.get(cls, f"off-CPU: {cls}")
        we = ns / window_ns
        out[name] = Wait(name, NONLOCK, we, we / workers, ns, lock_class=cls)


def other_roles_cpu(rec: RunRecord) -> dict[str, int]:
    """CPU time other roles took from the worker roles: the workers' time
    runnable but off CPU (preempted), split over the roles that are not
    workers in proportion to their CPU time, at most each one's CPU time;
    what is left is preemption by the workers themselves (more workers than
    CPUs) or by tasks that were not traced."""
    preempted = sum(r.preempted_ns for r in rec.roles if r.worker)
    others = {r.name: r.on_cpu_ns for r in rec.roles if not r.worker and r.on_cpu_ns}
    total = sum(others.values())
    if not preempted or not total:
        return {}
    return {name: int(min(ns, preempted * ns / total)) for name, ns in others.items()}


def capacity(rec: RunRecord) -> float:
    """The workers a share of worker time is a share of: the point's
    workers, or the worker roles' busy time (on CPU or waiting, not idle)
    where it exceeds workers x window. A server forking a process per
    connection and per message (Exim) keeps more tasks busy at once than it
    has clients, and their waits would read above 100%; a server's idle
    background threads (PostgreSQL's, MariaDB's) change nothing."""
    window_ns = rec.probe.window_s * 1e9
    busy = sum(r.on_cpu_ns + r.lock_ns + r.io_ns + r.storage_ns + r.preempted_ns + r.other_ns
               for r in rec.roles if r.worker)
    return max(float(rec.workers), busy / window_ns if window_ns > 0 else 0.0)


def cpus_of(rec: RunRecord) -> int:
    """The CPUs a point's workers could run on (the ideal speedup's cap)."""
    return len(rec.cpus) or rec.host.cpus_allowed or rec.workers


def _nonlock(rec: RunRecord) -> tuple[dict[str, int], dict[str, int], int, int]:
    """Off-CPU time of the workers outside lock waits by class, the CPU
    other roles took from them (by role), the time-sharing taken out of
    their preemption (see time_sharing), and then the preemption the
    machine's other work took (see background_preempted)."""
    if rec.roles:
        workers = rec.worker_roles
        by_class: dict[str, int] = {}
        for o in rec.offcpu:
            if o.role not in workers or o.in_lock_wait or o.kind in (sleepkinds.IDLE, sleepkinds.FUTEX,
                                                                     sleepkinds.LOCK):
                continue             # idle, or a futex sleep (counted under its lock or idle)
            cls = nonlock_class(o)
            by_class[cls] = by_class.get(cls, 0) + o.wait_ns
        stolen = other_roles_cpu(rec)
        if stolen and "preempted" in by_class:
            by_class["preempted"] = max(0, by_class["preempted"] - sum(stolen.values()))
    else:
        by_class, stolen = _plain_nonlock(rec), {}
    over = capacity(rec) - cpus_of(rec)
    shared = int(min(by_class.get("preempted", 0), over * rec.probe.window_s * 1e9)) if over > 0 else 0
    if shared:
        by_class["preempted"] -= shared
    # the background is a share of all the machine's CPUs: on the workers' CPUs (all, or the --cpus
    # subset), spread evenly, that share of their time
    noise = rec.background.noise if rec.background is not None else 0.0
    taken = int(min(by_class.get("preempted", 0), noise * cpus_of(rec) * rec.probe.window_s * 1e9))
    if taken:
        by_class["preempted"] -= taken
    return {c: ns for c, ns in by_class.items() if ns > 0}, stolen, shared, taken


def time_sharing(rec: RunRecord) -> float:
    """The share of worker time the workers spent preempted because more of
    them were runnable than there are CPUs: with W busy workers on C CPUs,
    W - C of them wait for a CPU at any moment, up to (W - C) x window in
    all. That time is not lost capacity (the ideal speedup counts the CPUs,
    not the workers) and no lock caused it; it is left out of the waits and
    the attribution (so "preempted" there is what is left: preemption by
    wake-ups, by untraced tasks), and shown apart. 0 where W <= C."""
    window_ns = rec.probe.window_s * 1e9
    if not rec.probe.attached or window_ns <= 0:
        return 0.0
    return _nonlock(rec)[2] / window_ns / capacity(rec)


def background_preempted(rec: RunRecord) -> float:
    """The share of worker time the workers spent preempted by the machine's
    other work: the CPU that processes outside the measured ones, lockscope's
    own and the hypervisor's steal took over the window (rec.background), up
    to the workers' preemption left after the time-sharing. That CPU was
    not the program's to lose to any of its locks: it is left out of the
    waits and the attribution, and shown with the background (beside
    `stress-ng --cpu 1`, 4 workers of a lock-bound program on 2 CPUs had
    "preempted" ranked above their lock). 0 without a measured background."""
    window_ns = rec.probe.window_s * 1e9
    if not rec.probe.attached or window_ns <= 0:
        return 0.0
    return _nonlock(rec)[3] / window_ns / capacity(rec)


def _role_waits(rec: RunRecord) -> dict[str, Wait]:
    window_ns = rec.probe.window_s * 1e9
    path = {r.name for r in rec.roles if r.path}
    cap = capacity(rec)
    out: dict[str, Wait] = {}
    for lk in rec.locks:
        # user-space locks by the waiting thread's role; kernel locks have no
        # per-thread split and count whole
        ns = sum(v for role, v in lk.roles.items() if role in path) if lk.roles else lk.wait_ns
        if ns > 0:
            out[lk.name] = _lock_wait(lk, ns, rec.workers, window_ns, cap)
    by_class, stolen, _, _ = _nonlock(rec)
    _add_nonlock(out, by_class, cap, window_ns)
    for role, ns in stolen.items():
        if ns < MIN_SHOWN * window_ns:
            continue
        name = f"CPU used by {role}"
        we = ns / window_ns
        out[name] = Wait(name, NONLOCK, we, we / cap, ns, lock_class=OTHER_CPU)
    return out


def nonlock_class(o: OffCpu) -> str:
    """The class of off-CPU time outside lock waits, as the record has it:
    classified by its switch-out stack when the run was recorded
    (naming.classify_offcpu: block I/O, journal commit wait, ...), else by
    the task state (preempted, blocked, sleep)."""
    return o.wait_class


@dataclass
class RootCause:
    wait: Wait                    # the wait at the collapse point
    growth: float                 # worker-equivalents gained from the point before
    explained_share: float        # growth / lost capacity gained, capped at 1
    explained_share_raw: float    # uncapped (waits can overlap or exceed the loss)
    from_workers: int
    at_workers: int
    # the chain behind a lock (analyzer/holders.py): what its holders did while others waited,
    # through other locks; `via` the locks it passes, `cause` what it ends in (None: no chain)
    chain: list[holders.Step] = field(default_factory=list)
    via: list[str] = field(default_factory=list)
    cause: str | None = None
    # over repeated runs (analyzer/analyze.py): in how many of them this wait grew most
    first_in: int = 1
    repeats: int = 1
    # a second wait the repeats cannot tell apart from this one (the interval of
    # their paired growths' difference reaches 0), or None
    tied_with: str | None = None
    # explains under CONTRIBUTOR_BELOW of the lost capacity gained: a contributor, and
    # what holds the larger part, in words
    contributor: bool = False
    larger_part: str | None = None
    # over repeated runs: the lock's top holder and in how many repeats it was (analyzer/repeats.HolderCount)
    holder: object | None = None


CONTRIBUTOR_BELOW = 0.33     # a wait explaining less of the loss gained is a contributor, not the cause


def growths(before: RunRecord, at: RunRecord) -> dict[str, tuple[Wait, float]]:
    """Every wait of `at` with its worker-equivalents gained from `before`."""
    wb, wa = waits(before), waits(at)
    return {name: (w, w.worker_equivalents - (wb[name].worker_equivalents if name in wb else 0.0))
            for name, w in wa.items()}


def root_cause(before: RunRecord, at: RunRecord, lost_before: float, lost_at: float) -> RootCause | None:
    """The wait whose worker-equivalents grow most from `before` to `at`."""
    best, growth = None, 0.0
    for name, (w, g) in growths(before, at).items():
        if g > growth:
            best, growth = w, g
    if best is None:
        return None
    gained = lost_at - lost_before
    raw = growth / gained if gained > 0 else 0.0
    rc = RootCause(best, growth, min(1.0, raw), raw, before.workers, at.workers)
    if best.is_lock:
        locks = {lk.name: lk for lk in at.locks}
        if best.name in locks:
            rc.chain = holders.chain(locks[best.name], locks)
        if holders.cause_clause(rc.chain):
            rc.via = [s.lock for s in rc.chain]
            rc.cause = holders.cause_of(rc.chain)
    return rc


# ---- attribution of lost capacity -----------------------------------------

MAX_ITEMS = 12          # heavier items are listed, the rest of the locks summed as one


@dataclass
class AttributionItem:
    wait: Wait
    share_of_loss: float          # attributed / lost capacity (0 when nothing was lost)
    attributed: float = 0.0       # worker-equivalents of the loss given to it: measured x Attribution.scale


@dataclass
class Attribution:
    """Lost capacity of one point split into waits (PointView has the
    point's ideal, speedup and lost capacity): the items' attributed
    worker-equivalents plus `unexplained` add up to the loss, never more."""
    items: list[AttributionItem] = field(default_factory=list)
    explained: float = 0.0        # worker-equivalents of the items, at most the loss
    unexplained: float = 0.0      # the loss the waits do not cover
    waits_exceed_loss: bool = False
    measured: bool = False        # whether lock waits were measured at all
    measured_total: float = 0.0   # the waits' worker-equivalents as measured
    scale: float = 1.0            # attributed = measured x scale (< 1 when the waits exceed the loss)

    @property
    def scaling_note(self) -> str | None:
        if not self.waits_exceed_loss:
            return None
        return (f"the measured waits ({self.measured_total:.2f} worker-equivalents) exceed the loss; "
                f"each is scaled by {self.scale:.2f} so that they add up to it (waits overlap: a "
                f"thread waiting on one lock while others wait too, or time that other workers "
                f"made up for)")


def _other_locks(rest: list[Wait]) -> Wait:
    """The locks past MAX_ITEMS, summed as one lock wait."""
    return Wait(f"{len(rest)} other locks", LOCK, sum(w.worker_equivalents for w in rest),
                sum(w.wait_share for w in rest), sum(w.wait_ns for w in rest), kind="various")


def attribute(rec: RunRecord, lost_capacity: float) -> Attribution:
    """Lost capacity of one point (ideal - speedup, in workers) split into
    each named lock, each class of off-CPU time outside lock waits, the CPU
    other roles took, and the unexplained remainder, all in
    worker-equivalents (wait time / window).

    No double counting: off-CPU time inside a lock wait is part of that
    lock's wait and appears only there. Waits are measured, the loss is
    derived from throughput, and the two add up: when the waits exceed the
    loss (waits that overlap useful work of other workers, or a single
    worker that waits but has lost nothing), every item is scaled by
    loss / measured, the unexplained part is 0 and `waits_exceed_loss` says
    so; with no loss at all nothing is attributed."""
    ws = sorted(waits(rec).values(), key=lambda w: -w.worker_equivalents)
    locks = [w for w in ws if w.is_lock]
    if len(locks) > MAX_ITEMS:
        rest = locks[MAX_ITEMS:]
        ws = [w for w in ws if w not in rest] + [_other_locks(rest)]
    total = sum(w.worker_equivalents for w in ws)
    loss = max(0.0, lost_capacity)
    scale = min(1.0, loss / total) if total > 0 else 1.0
    items = [AttributionItem(w, w.worker_equivalents * scale / loss if loss > 0 else 0.0,
                             w.worker_equivalents * scale) for w in ws]
    return Attribution(items, min(total, loss), max(0.0, loss - total), total > loss,
                       bool(rec.probe.attached), total, scale)


@dataclass
class WhatIfPoint:
    workers: int
    ops_per_sec: float
    capped: bool                  # the bound met the ideal throughput
    low: float | None = None      # with repeats: the 95% interval of the bound over them
    high: float | None = None


@dataclass
class WhatIf:
    name: str                     # the wait removed (the root cause)
    curve: list[WhatIfPoint]

    FORMULA = ("X'(N) = X(N) * N / (N - we(N)), capped at the ideal X(1) * ideal(N); "
               "we(N): worker-equivalents of the wait at N workers")

    @property
    def label(self) -> str:
        return f"upper bound: {self.name} removed"


def whatif(points: list[tuple[int, float, float, float]], name: str,
           ideal_tput: list[float]) -> WhatIf:
    """Upper bound of the curve with the wait `name` removed.

    points: (workers, ops_per_sec, workers' worth of time W, worker-equivalents
    of the wait we). If the time the workers spent in that wait were spent
    working at the rate they work the rest of the time:

        X'(N) = X(N) * W / (W - we(N)),   capped at the ideal X(1) * ideal(N)

    An upper bound: it assumes the freed time meets no other wait (the next
    lock in line usually takes part of it)."""
    out = []
    for (w, x, cap_w, we), ideal in zip(points, ideal_tput):
        x2 = x * cap_w / (cap_w - we) if cap_w - we > 1e-9 else float("inf")
        out.append(WhatIfPoint(w, min(x2, ideal) if ideal > 0 else x2, ideal > 0 and x2 > ideal))
    return WhatIf(name, out)
