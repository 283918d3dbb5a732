"""Adding up the waits of one named lock, kernel (naming.py) or user space
(userlocks.py): its addresses, counts, wait, modes and stacks, the waits
counted without a stack spread over the sampled ones, and the `Lock` of the
run record it becomes, with its share of worker time."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from lockscope.model.record import KernelSpin, Lock, StackSummary

TOP_STACKS = 5               # stacks kept per lock, heaviest first
MAX_FRAMES = 24              # frames kept per stack
MAX_ADDRESSES = 16           # addresses listed per lock


def wait_share(wait_ns: float, workers: int, window_ns: float) -> float:
    """A wait's share of worker time: wait / (workers x window); 0 without a window."""
    denom = workers * window_ns if workers and window_ns else 0
    return wait_ns / denom if denom else 0.0


class Waits(Protocol):
    """One aggregate of the probe (a Contention or a FutexWait)."""
    count: int
    total_ns: int
    max_ns: int


@dataclass
class Share:
    """An aggregate's part of its lock's waits, unsampled waits included."""
    entry: Waits
    count: int
    wait_ns: int
    sampled: int                 # waits of it whose stack was walked
    max_ns: int                  # its longest wait, or of the unsampled ones


def spread(entries: list, sampled: Callable[[Waits], bool]) -> list[Share]:
    """Waits counted without a stack (the probe samples stack walks, or lost
    the stack) spread over the sampled aggregates of the same lock, in
    proportion to their wait (and count); unchanged where none was sampled."""
    walked = [e for e in entries if sampled(e)]
    if not walked:
        return [Share(e, e.count, e.total_ns, 0, e.max_ns) for e in entries]
    rest_max = max((e.max_ns for e in entries if not sampled(e)), default=0)
    s_wait = sum(e.total_ns for e in walked) or 1
    s_count = sum(e.count for e in walked) or 1
    wait_scale = sum(e.total_ns for e in entries) / s_wait
    count_scale = sum(e.count for e in entries) / s_count
    return [Share(e, round(e.count * count_scale), round(e.total_ns * wait_scale), e.count, max(e.max_ns, rest_max))
            for e in walked]


@dataclass
class StackAcc:
    count: int = 0
    wait_ns: int = 0
    sampled: int = 0
    syscall: Optional[str] = None


@dataclass
class LockAcc:
    """One named lock being added up from the probe's aggregates."""
    name: str
    cls: str
    tier: str
    kind: str
    addresses: set = field(default_factory=set)    # int (kernel) or "pid:0x..." (user space)
    count: int = 0
    wait: int = 0
    max: int = 0
    modes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    stacks: dict[tuple, StackAcc] = field(default_factory=dict)
    object: Optional[str] = None
    component: Optional[str] = None
    explain: Optional[str] = None
    rule: Optional[str] = None
    roles: dict[str, int] = field(default_factory=lambda: defaultdict(int))   # wait_ns by role of the waiter
    # user-space locks: kernel lock name -> [count, wait_ns] spun inside the futex syscalls on its words
    kernel_spin: dict[str, list[int]] = field(default_factory=dict)

    def add(self, count: int, wait_ns: int, max_ns: int, mode: str) -> None:
        self.count += count
        self.wait += wait_ns
        self.max = max(self.max, max_ns)
        if mode:
            self.modes[mode] += wait_ns

    def add_kernel_spin(self, name: str, count: int, wait_ns: int, max_ns: int) -> None:
        """Waits spun on kernel lock `name` inside the futex syscalls on this
        lock's words (analyzer/user/futexspin.py): part of its wait (its count
        stays the count of its own waits: a spin of the thread that wakes a
        waiter is no wait for the lock); its roles grow in proportion."""
        self.wait += wait_ns
        self.max = max(self.max, max_ns)
        part = self.kernel_spin.setdefault(name, [0, 0])
        part[0] += count
        part[1] += wait_ns
        total = sum(self.roles.values())
        if total:
            for role, ns in list(self.roles.items()):
                self.roles[role] += round(wait_ns * ns / total)

    def add_stack(self, frames: tuple, syscall: Optional[str], count: int, wait_ns: int, sampled: int) -> None:
        st = self.stacks.setdefault(frames, StackAcc(syscall=syscall))
        st.count += count
        st.wait_ns += wait_ns
        st.sampled += sampled

    def to_lock(self, workers: int, window_ns: int, site: Callable[[tuple], str],
                address: Callable = str) -> Lock:
        """The record's Lock: its TOP_STACKS heaviest stacks, each named by
        `site(frames)`, and its first addresses as `address(a)` text."""
        top = sorted(self.stacks.items(), key=lambda kv: -kv[1].wait_ns)[:TOP_STACKS]
        return Lock(
            name=self.name, lock_class=self.cls, tier=self.tier, kind=self.kind, modes=dict(self.modes),
            instances=len(self.addresses), addresses=[address(a) for a in sorted(self.addresses)][:MAX_ADDRESSES],
            count=self.count, wait_ns=self.wait, max_wait_ns=self.max,
            wait_share=wait_share(self.wait, workers, window_ns),
            object=self.object, component=self.component, explain=self.explain, rule=self.rule,
            roles={r: ns for r, ns in sorted(self.roles.items(), key=lambda kv: -kv[1]) if ns},
            kernel_spin=[KernelSpin(name=n, count=c, wait_ns=ns)
                         for n, (c, ns) in sorted(self.kernel_spin.items(), key=lambda kv: -kv[1][1])],
            stacks=[StackSummary(frames=list(k), site=site(k), syscall=v.syscall, count=v.count,
                                 wait_ns=v.wait_ns, sampled=v.sampled) for k, v in top])


def heaviest_first(locks: list[Lock]) -> list[Lock]:
    locks.sort(key=lambda lk: -lk.wait_ns)
    return locks
