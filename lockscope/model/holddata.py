"""The holders part of the probe's raw data (probes/holders.bpf.h), as kept
in a run record (`probe.raw.holds`, `hold_activity`, `hold_stacks`): each
lock wait that a release ended, by lock and release site, and what the
releaser did during those waits. Addresses are ints here and "0x..." text
in JSON. Documented in README.md, "Run record"."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from lockscope.model.jsondata import HEX, optional
from lockscope.proberows import constant

KERNEL_SPACE = 1 << 63       # a kernel lock's address lies above, a futex word's below
USDT_LOCK = constant("USDT_LOCK_BIT")   # Release.lock of a USDT-named lock: this bit and a hash of its key


@dataclass
class Release:
    """Lock waits of one process ended by releases at one site: the
    releaser (the thread that woke the waiter) had held the lock until then.
    `wait_ns` is the waiters' time asleep until those releases; of it, the
    releaser spent `offcpu_ns` off CPU (by class: ReleaseActivity),
    `queued_ns` waiting for this lock itself, and `unseen_ns` where its
    spans are not known; the rest it was on CPU."""
    lock: int = field(metadata=HEX)   # kernel lock address, or futex word
    tgid: int = 0                     # the waiters' process
    stack: int = -2                   # probe stack id; negative: not sampled (spread over the sampled)
    # a user-space release walked with a stack copy of its own: the copy's number (not 0); a user-space
    # release without one is spread over the sampled (its frame-pointer stack may stand for many paths)
    sample: int = field(default=0, metadata={"omit_empty": True})
    # a release of CPython's GIL: the id of the releaser's Python stack (probe's py_stacks), 0: none
    py_stack: int = field(default=0, metadata={"omit_empty": True})
    count: int = 0
    wait_ns: int = 0
    offcpu_ns: int = 0
    queued_ns: int = 0
    unseen_ns: int = 0
    waker_tgid: int = 0
    waker_tid: int = 0
    waker_comm: str = ""
    site_stack: Optional[str] = optional()   # its key in RawProbe.hold_stacks (set at record time)
    # a lock the program's USDT probes name (lock: USDT_LOCK and a hash): its name (set at record time)
    usdt_lock: Optional[str] = optional()

    @property
    def kernel(self) -> bool:
        return self.lock >= KERNEL_SPACE


@dataclass
class ReleaseActivity:
    """The releaser's time off CPU during the waits its releases ended, by
    its kernel stack at the switch-out, task state (0: preempted) and the
    lock or futex word it waited on itself (None: none)."""
    lock: int = field(metadata=HEX)
    tgid: int = 0
    stack: int = -2
    sample: int = field(default=0, metadata={"omit_empty": True})   # as Release.sample
    py_stack: int = field(default=0, metadata={"omit_empty": True})   # as Release.py_stack
    act_stack: int = -1               # a key of RawProbe.stacks
    act_state: int = 0
    ns: int = 0
    act_lock: Optional[int] = optional(hex=True)
    act_usdt_lock: Optional[str] = optional()   # act_lock a USDT-named lock's id: its name (set at record time)


# OwnerLook.how (proberows.toml [[constant]] OWNER_*)
OWNER_RUNNING, OWNER_OFF_CPU, OWNER_UNTRACKED, OWNER_READERS, OWNER_NONE = (
    constant(f"OWNER_{n}") for n in ("RUNNING", "OFF_CPU", "UNTRACKED", "READERS", "NONE"))


@dataclass
class OwnerLook:
    """Looks at the owner of a kernel mutex or rwsem by the waiters of one
    process as they began to wait (probes/owners.bpf.h; the waits walked for
    a stack): what the owner did then, `how` (OWNER_*); off CPU, its
    switch-out stack, task state (0: preempted) and the lock or futex word
    it waited on itself."""
    lock: int = field(metadata=HEX)
    tgid: int = 0                     # the waiters' process
    how: int = OWNER_NONE
    count: int = 0
    owner_tgid: int = 0
    owner_tid: int = 0
    owner_comm: str = ""
    stack: int = -2                   # OWNER_OFF_CPU: a key of RawProbe.stacks
    state: int = 0
    act_lock: Optional[int] = optional(hex=True)


@dataclass
class PythonWait:
    """Waits for CPython's GIL of one process whose waiter was in one Python
    stack (probes/pyframes.bpf.h: read at the release that ended each wait):
    `frames` innermost first, `function (file.py:first line)`."""
    tgid: int = 0
    count: int = 0
    wait_ns: int = 0
    frames: list[str] = field(default_factory=list)


@dataclass
class PythonProcess:
    """A traced CPython process (probes/pyframes.c): its interpreter's file,
    version, where its layout came from ("table", or "the interpreter's debug
    offsets": 3.13's _Py_DebugOffsets), and why its frames are not read."""
    tgid: int = 0
    file: str = ""
    version: Optional[str] = optional()
    layout: Optional[str] = optional()
    reason: Optional[str] = optional()

