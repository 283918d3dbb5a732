"""Who is a worker: the traced threads grouped into roles (process and
thread name, numbers folded), each role's time split into on-CPU, lock
waits, idle, I/O, page/journal waits, preempted and other waits, and the
roles that do the measured work found from the data.

A role does the measured work when it is busy (everything but idle) at
least WORKER_SHARE of the busiest user-space role's busy time; the record
says why each role was or was not counted. Kernel threads (kworker,
ksoftirqd, rcu_*, jbd2: the probe marks them, PF_KTHREAD) are roles of their
own, never the work (their CPU may still be time taken from the workers);
the idle tasks (pid 0) are not traced at all. Threads of different programs
with the same name are kept apart: a thread name that several programs use
is qualified by its program's (`nginx/worker`, `redis/worker`). With
`work` (the processes of a command run system-wide) the work is looked for
only among the command's roles and the roles that wake them (a server it
drives: wakeups.path_roles); another program busy on the same machine is a
role of its own, not the work. With `run --target` the command only
drives the load: its processes (`drivers`, by tgid) form roles of their
own, marked driver and never counted as the work, whatever their share. A thread "works" when it was on CPU at
least WORKING_SHARE of the time it was seen.

Sleeps get their kind from analyzer/sleepkinds.py; a condition variable or
semaphore wait ("handoff") is a lock wait only for a working thread of a
worker role woken by a working peer of a worker role (one that released
what it waited for); otherwise the thread was waiting for work: idle. The
wake-ups come from the probe (sched_waking, analyzer/wakeups.py)."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from . import sleepkinds, wakeups
from .kernel import filelocks, naming
from .user import runtimes, userlocks
from .sleepkinds import HANDOFF, IDLE, KINDS, LOCK, PREEMPTED
from lockscope.model.probedata import FutexWait, RawProbe
from lockscope.model.record import Role, RoleEdge

WORKER_SHARE = 0.5
WORKING_SHARE = 0.05

_NUMBER = re.compile(r"(?<=[^A-Za-z0-9])\d+")


def fold(name: str) -> str:
    """A thread or process name with its numbers folded: those after a
    separator, `worker-3` -> `worker-#`, `kworker/u4:2` -> `kworker/u4:#`;
    a number that is part of a word stays (`python3`, `jbd2/loop0-#`)."""
    return _NUMBER.sub("#", name)


def role_name(process: str, comm: str) -> str:
    """The role of a thread: its own name when it has one apart from its
    process's (`rocksdb:low` in db_bench), else the process name."""
    return fold(comm or process or "?")


def role_names(keys: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(process, thread name) -> the role's name: the thread's role_name,
    qualified by its program's folded name (`nginx/worker`) where threads of
    different programs would share it; a program's own main-thread name
    (comm = process) stays plain."""
    programs: dict[str, set[str]] = defaultdict(set)
    for process, comm in keys:
        programs[role_name(process, comm)].add(fold(process or comm or "?"))
    out = {}
    for process, comm in keys:
        name = role_name(process, comm)
        prog = fold(process or comm or "?")
        out[(process, comm)] = name if len(programs[name]) == 1 or prog == name else f"{prog}/{name}"
    return out


@dataclass
class ThreadTimes:
    tid: int
    tgid: int
    role: str
    process: str
    on_cpu_ns: int = 0
    kernel: bool = False         # a kernel thread: never the work
    kinds: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def seen_ns(self) -> int:
        return self.on_cpu_ns + sum(self.kinds.values())

    @property
    def busy_ns(self) -> int:
        return self.seen_ns - self.kinds.get(IDLE, 0)

    @property
    def working(self) -> bool:
        return self.seen_ns > 0 and self.on_cpu_ns >= WORKING_SHARE * self.seen_ns


@dataclass
class RoleAnalysis:
    roles: list[Role] = field(default_factory=list)
    threads: dict[int, ThreadTimes] = field(default_factory=dict)
    edges: list[RoleEdge] = field(default_factory=list)
    path: set[str] = field(default_factory=set)          # roles on the path of the measured work
    primitive: dict[tuple, str] = field(default_factory=dict)   # (tgid, uaddr, op) -> futex primitive
    lock_part: dict[tuple, float] = field(default_factory=dict)  # (tid, uaddr) -> share of a handoff wait that is a lock wait
    parents: set[int] = field(default_factory=set)       # tgids that started traced processes (waiting_parents)

    @property
    def workers(self) -> set[str]:
        return {r.name for r in self.roles if r.worker}

    def role_of(self, tid: int) -> str | None:
        t = self.threads.get(tid)
        return t.role if t else None

    def lock_fraction(self, e: FutexWait, primitive: str) -> float:
        """The part of a futex aggregate's wait that is a lock wait."""
        kind = sleepkinds.default().primitive_kind(primitive)
        if kind == HANDOFF:
            return self.lock_part.get((e.tid, e.uaddr), 0.0)
        return 1.0 if kind == LOCK else 0.0


def futex_primitives(raw: RawProbe) -> dict[tuple, str]:
    """The primitive of every futex (tgid, uaddr, op): from the C library
    frames of its heaviest sampled stack (a futex word belongs to one
    primitive; a mutex re-taken after a condition variable wait is still a
    mutex); a runtime's lock known by its address (runtimes.toml) is that."""
    table = sleepkinds.default()
    best: dict[tuple, tuple[float, str]] = {}
    for e in raw.futex or []:
        key = (e.tgid, e.uaddr, e.op)
        rl = runtimes.lock_at(raw.futex_address(e))
        if rl:                 # a runtime's lock by its address (CPython's GIL): that, whatever the frames
            best[key] = (float("inf"), rl.kind)
            continue
        frames = raw.user_frames(e)
        if not frames:
            best.setdefault(key, (-1, table.futex_primitive(e.op, [])[0]))
            continue
        prim = table.futex_primitive(e.op, userlocks.runtime_functions(frames))[0]
        if e.total_ns > best.get(key, (-1, ""))[0]:
            best[key] = (e.total_ns, prim)
    return {k: v[1] for k, v in best.items()}


DRIVER = " (driver)"


def _threads(raw: RawProbe, drivers: set[int]) -> dict[int, ThreadTimes]:
    out: dict[int, ThreadTimes] = {}
    names = role_names({(t.process, t.comm) for t in raw.tasks or []})
    for t in raw.tasks or []:
        # a driver's role is apart from the target's, even under the same name
        role = names[(t.process, t.comm)] + (DRIVER if t.tgid in drivers else "")
        th = out[t.tid] = ThreadTimes(t.tid, t.tgid, role, t.process, kernel=t.kernel)
        th.on_cpu_ns = t.on_cpu_ns
        th.kinds[PREEMPTED] += t.preempted_ns
    return out


def _thread(out: dict[int, ThreadTimes], tid: int, tgid: int) -> ThreadTimes:
    if tid not in out:
        # tid 0: the idle tasks (never tracked by the probe; never the work)
        out[tid] = (ThreadTimes(tid, 0, "[idle]", "[idle]", kernel=True) if tid == 0 else
                    ThreadTimes(tid, tgid, f"pid {tgid}", f"pid {tgid}"))
    return out[tid]


# what a process that started the traced processes waits on for their results: idle, like a join
PARENT_WAITS = ("pipe/socket wait",)


def waiting_parents(raw: RawProbe) -> set[int]:
    """The traced processes that started other traced processes (their
    real_parent, from the object walk): a parent reading its workers'
    results from a pipe or queue (Python's multiprocessing, xargs -P, a
    shell's `$(...)`) waits for work to finish, not for a resource; a
    wait is lost capacity where the waiter is one of the workers. Empty
    for records without the parent (older probes)."""
    tgids = {t.tgid for t in raw.objects.tasks}
    return {t.ppid for t in raw.objects.tasks if t.ppid and t.ppid != t.tgid and t.ppid in tgids}


def sleep_kind(cls: str, tgid: int, parents: set[int], table=None) -> str:
    """The kind of a sleep of class `cls` by a thread of process `tgid`
    (sleepkinds.toml's, but idle for a parent's wait on its workers)."""
    if cls in PARENT_WAITS and tgid in parents:
        return IDLE
    return (table or sleepkinds.default()).class_kind(cls)


def _add_sleeps(raw: RawProbe, threads: dict[int, ThreadTimes], primitive: dict[tuple, str],
                parents: set[int] = frozenset()) -> list[tuple]:
    """Kernel-side sleeps by class and futex sleeps by primitive, per
    thread; returns the handoff waits [(thread, FutexWait)] to decide."""
    table = sleepkinds.default()
    tgid_of = {t.tid: t.tgid for t in threads.values()}
    for e in raw.offcpu:
        if e.state == 0:
            continue             # preempted: from the thread's own times
        cls = "lock" if e.in_lock_wait else naming.classify_offcpu(raw.frames(e.stack), e.state)
        kind = sleep_kind(cls, tgid_of.get(e.tid, 0), parents, table)
        if kind == sleepkinds.FUTEX:
            continue             # counted from the futex waits below
        _thread(threads, e.tid, tgid_of.get(e.tid, 0)).kinds[kind] += e.total_ns
    handoffs = []
    for e in raw.futex or []:
        th = _thread(threads, e.tid, e.tgid)
        kind = table.primitive_kind(primitive.get((e.tgid, e.uaddr, e.op), sleepkinds.UNKNOWN_PRIMITIVE))
        if kind == HANDOFF:
            th.kinds[IDLE] += e.total_ns
            handoffs.append((th, e))
        else:
            th.kinds[kind] += e.total_ns
    return handoffs


def _add_busy_file_lock_waits(raw: RawProbe, threads: dict[int, ThreadTimes]) -> None:
    """A busy wait for a file lock (a failed F_SETLK tried again after a
    sleep: SQLite's busy handler) sleeps in nanosleep, a timed sleep that
    reads as idle: that time is the lock's wait, moved to it per thread."""
    for w in raw.file_lock_waits or []:
        th = threads.get(w.tid)
        if th is not None and w.flags & filelocks.FLK_BUSY:
            part = min(w.total_ns, max(0, th.kinds[IDLE]))
            th.kinds[IDLE] -= part
            th.kinds[LOCK] += part


def _choose_workers(roles: dict[str, list[ThreadTimes]], window_ns: int,
                    drivers: set[str], kernel: set[str] = frozenset(),
                    unrelated: set[str] = frozenset()) -> dict[str, tuple[bool, str]]:
    """role -> (counted as the measured work, why); `drivers`', the `kernel`
    threads' and `unrelated` programs' roles never are, and the busiest role
    is looked for among the others (user space) only."""
    busy = {r: sum(t.busy_ns for t in ts) for r, ts in roles.items()
            if r not in drivers and r not in kernel and r not in unrelated}
    top = max(busy.values(), default=0)
    we = (lambda ns: ns / window_ns) if window_ns else (lambda ns: 0.0)
    out = {}
    for r, b in busy.items():
        if top > 0 and b >= WORKER_SHARE * top:
            out[r] = (True, f"counted: busy {we(b):.2f} worker-equivalents"
                      + (" (the busiest role)" if b == top else f", at least {WORKER_SHARE:.0%} of the busiest role's {we(top):.2f}"))
        else:
            out[r] = (False, f"not counted: busy {we(b):.2f} worker-equivalents, under {WORKER_SHARE:.0%} of the "
                      f"busiest role's {we(top):.2f}" if top > 0 else "not counted: never busy")
    for r in drivers:
        b = sum(t.busy_ns for t in roles[r])
        out[r] = (False, f"not counted: the command, which only drives the load of the --target (busy "
                         f"{we(b):.2f} worker-equivalents)")
    for r in unrelated - drivers - kernel:
        out[r] = (False, f"not counted: another program, neither the one measured nor woken by it (system-wide; busy "
                         f"{we(sum(t.busy_ns for t in roles[r])):.2f} worker-equivalents)")
    for r in kernel - drivers:
        out[r] = (False, f"not counted: kernel threads (on CPU {we(sum(t.on_cpu_ns for t in roles[r])):.2f} "
                         "worker-equivalents)")
    return out


def _unrelated(by_role: dict[str, list[ThreadTimes]], work: set[int], wakes: list,
               role_of: dict[int, str]) -> set[str]:
    """System-wide with a command (`work`: its tgids): the roles that are
    neither the command's nor on its path (the traced roles that end at
    least wakeups.PATH_SHARE of its working threads' woken sleeps: a server
    it drives)."""
    ours = {r for r, ts in by_role.items() if any(t.tgid in work for t in ts)}
    if not ours:
        return set()
    # the wake-ups of its threads that work (not of a main thread that only
    # waits for them, which lockscope itself starts)
    working = {t.tid for ts in by_role.values() for t in ts if t.tgid in work and t.working}
    related = wakeups.path_roles(wakeups.role_edges([w for w in wakes if w.wakee_tid in working], role_of, fold),
                                 ours)
    return set(by_role) - related


def analyze(raw: RawProbe | None, window_ns: int, drivers: set[int] | None = None,
            work: set[int] | None = None) -> RoleAnalysis | None:
    """Roles, their time split and the roles that do the measured work;
    None when the probe recorded no per-thread data (older records).
    `drivers`: the tgids of a command that only drives the load (run
    --target): roles of their own, never the work. `work`: system-wide, the
    tgids of the command run (the work is among its roles and those it waits
    for); None: every user-space role may be the work."""
    if raw is None or raw.tasks is None:
        return None
    drivers = drivers or set()
    threads = _threads(raw, drivers)
    primitive = futex_primitives(raw)
    parents = waiting_parents(raw)
    handoffs = _add_sleeps(raw, threads, primitive, parents)
    _add_busy_file_lock_waits(raw, threads)
    by_role: dict[str, list[ThreadTimes]] = defaultdict(list)
    for t in threads.values():
        by_role[t.role].append(t)
    driver_roles = {t.role for t in threads.values() if t.tgid in drivers}
    kernel_roles = {r for r, ts in by_role.items() if all(t.kernel for t in ts)}
    futex_ns: dict[tuple, int] = defaultdict(int)
    for e in raw.futex or []:
        futex_ns[(e.tid, e.uaddr)] += e.total_ns
    wakes = wakeups.estimate_waits(raw.wakeups or [], futex_ns)
    role_of = {t.tid: t.role for t in threads.values()}
    unrelated = _unrelated(by_role, work, wakes, role_of) if work else set()
    chosen = _choose_workers(by_role, window_ns, driver_roles, kernel_roles, unrelated)
    workers = {r for r, (counted, _) in chosen.items() if counted}
    working = {t.tid for t in threads.values() if t.working and t.role in workers}
    lock_part = wakeups.handoff_lock_parts(wakes, [(th.tid, e.uaddr) for th, e in handoffs
                                                                if th.tid in working], working)
    for th, e in handoffs:
        part = e.total_ns * lock_part.get((th.tid, e.uaddr), 0.0)
        th.kinds[IDLE] -= part
        th.kinds[LOCK] += part
    roles = [_role(name, ts, *chosen[name], driver=name in driver_roles, kernel=name in kernel_roles)
             for name, ts in by_role.items()]
    roles.sort(key=lambda r: (not r.worker, -(r.on_cpu_ns + r.lock_ns + r.io_ns + r.storage_ns + r.other_ns)))
    edges = wakeups.role_edges(wakes, role_of, fold)
    # the path of the work: who wakes the threads that do it (not a main
    # thread that only waits for them)
    path = wakeups.path_roles(wakeups.role_edges([w for w in wakes if w.wakee_tid in working],
                                                 role_of, fold), workers)
    for r in roles:
        r.path = r.name in path
    return RoleAnalysis(roles, threads, edges, path, primitive, lock_part, parents)


def _role(name: str, threads: list[ThreadTimes], worker: bool, reason: str, driver: bool = False,
          kernel: bool = False) -> Role:
    k: dict[str, int] = defaultdict(int)
    for t in threads:
        for kind, ns in t.kinds.items():
            k[kind] += ns
    return Role(name=name, processes=sorted({t.process for t in threads}), threads=len(threads),
                pids=len({t.tgid for t in threads}), worker=worker, reason=reason, driver=driver, kernel=kernel,
                on_cpu_ns=sum(t.on_cpu_ns for t in threads),
                **{f"{kind}_ns": int(max(0, k.get(kind, 0))) for kind in KINDS})
