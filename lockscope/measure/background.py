"""What else the machine did over a timed window: the CPU time of every
process outside the measured ones, read from /proc/PID/stat at the window's
start and end, split into other programs, kernel threads and lockscope's
own processes, with the hypervisor's steal from /proc/stat. Shares are of
all the machine's CPUs over the window (record.Background).

The measured processes are the trees of the given roots (the workload's
driver, the command, its --target); everything else is background. A
process's own time counts (utime + stime), and for processes other than
lockscope the time of children they reaped in the window (cutime +
cstime: a shell loop of short commands); lockscope reaps the measured
command, so its children's time is not its own. A child reaped in the window
brings its whole life into its parent's cutime: what it had used by the
window's start is taken off again."""
from __future__ import annotations

import os
from dataclasses import dataclass

from lockscope.measure import cpustat
from lockscope.model.record import Background

TOP = 3                       # the heaviest other processes named
KTHREADD = 2


@dataclass
class Proc:
    ppid: int
    start: int                # starttime, clock ticks after boot: tells a reused pid apart
    own: int                  # utime + stime, clock ticks
    children: int             # cutime + cstime
    comm: str


def _read(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None           # gone meanwhile
    lp, rp = text.find("("), text.rfind(")")
    rest = text[rp + 2:].split()
    try:
        return Proc(int(rest[1]), int(rest[19]), int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14]),
                    text[lp + 1:rp])
    except (IndexError, ValueError):
        return None


@dataclass
class Snapshot:
    procs: dict[int, Proc]
    cpu: dict[int, list[int]]
    t_ticks: int              # /proc/stat's total over all CPUs


def snapshot() -> Snapshot:
    procs = {}
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            p = _read(int(e.name))
            if p:
                procs[int(e.name)] = p
    cpu = cpustat.sample()
    return Snapshot(procs, cpu, sum(sum(v) for v in cpu.values()))


def _trees(procs: dict[int, Proc], roots: set[int]) -> set[int]:
    """roots and their descendants"""
    kids: dict[int, list[int]] = {}
    for pid, p in procs.items():
        kids.setdefault(p.ppid, []).append(pid)
    out, todo = set(), [r for r in roots if r]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo += kids.get(pid, [])
    return out


def measure(before: Snapshot, after: Snapshot, roots: set[int]) -> Background:
    """The background between two snapshots, the trees of `roots` measured."""
    whole = after.t_ticks - before.t_ticks
    ncpu = len(after.cpu) or 1
    if whole <= 0:
        return Background(cpus=ncpu)
    both = {**before.procs, **after.procs}
    measured = _trees(both, roots)
    me = os.getpid()
    ours = _trees(both, {me}) - measured
    other, kernel, own = 0, 0, 0
    by_comm: dict[str, int] = {}
    before_reap: dict[int, int] = {}          # parent -> its children's time before the window, reaped in it
    for pid, b in before.procs.items():
        a = after.procs.get(pid)
        if a is None or a.start != b.start:
            before_reap[b.ppid] = before_reap.get(b.ppid, 0) + b.own + b.children
    for pid, a in after.procs.items():
        if pid in measured:
            continue
        b = before.procs.get(pid)
        same = b is not None and b.start == a.start
        used = a.own - (b.own if same else 0)
        if pid != me:
            used += max(0, a.children - (b.children if same else 0) - before_reap.get(pid, 0))
        if pid in ours:
            own += used
        elif pid == KTHREADD or a.ppid == KTHREADD:
            kernel += used
        else:
            other += used
            by_comm[a.comm] = by_comm.get(a.comm, 0) + used
    steal = cpustat.breakdown(before.cpu, after.cpu).steal
    # /proc/PID/stat and /proc/stat count in the same USER_HZ ticks
    top = sorted(((t, c) for c, t in by_comm.items() if t > 0), reverse=True)[:TOP]
    def share(t: int) -> float:
        return round(min(1.0, max(0.0, t / whole)), 4)
    return Background(other=share(other), lockscope=share(own), steal=steal, kernel=share(kernel), cpus=ncpu,
                      top=[f"{c} {t / whole:.0%}" for t, c in top])

