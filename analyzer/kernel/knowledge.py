"""The lock knowledge base (locks.toml) and the stack-frame conventions it
defines: which frames are tracing or locking machinery, where a lock was
taken (its site), which syscall led there, and which rule names a lock."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from lockscope import tables
from lockscope.globs import matcher

RULES_FILE = Path(__file__).with_name("locks.toml")

# compiler-made clones keep the name of the function they came from
_SUFFIX = re.compile(r"(\.(constprop|isra|part|cold|llvm|lto_priv)(\.\d+)*)+$")
_IRQ_ENTRY = ("asm_sysvec_", "asm_common_interrupt", "handle_softirqs", "__irq_exit_rcu", "irq_exit_rcu",
              "__do_softirq", "do_softirq", "sysvec_", "common_interrupt")
_SYSCALL = re.compile(r"^(?:__x64_sys|__arm64_sys|__ia32_sys|__do_sys|__se_sys|__riscv_sys|__s390x_sys)_(\w+)$")


def function(frame: str) -> str:
    """'__mutex_lock.constprop.0+0x1f1' -> '__mutex_lock'"""
    return _SUFFIX.sub("", frame.split("+", 1)[0])


def own_functions(frames: list[str]) -> list[str]:
    """The functions of a stack (innermost first) up to an interrupt or
    softirq entry: the code that took the lock, not the code it interrupted."""
    out = []
    for fn in map(function, frames):
        if fn.startswith(_IRQ_ENTRY):
            break
        out.append(fn)
    return out


@dataclass(frozen=True)
class OffCpuRule:
    wait_class: str = field(metadata={"json": "class"})
    frames: tuple[str, ...]
    depth: int = 10
    explain: str = ""
    ref: str = ""

    def matches(self, fns: list[str]) -> bool:
        match = matcher(self.frames)
        return any(match(f) for f in fns[:self.depth])


@dataclass(frozen=True)
class Rule:
    name: str
    lock_class: str = field(metadata={"json": "class"})
    kinds: tuple[str, ...]
    site: tuple[str, ...] = ()
    frames: tuple[str, ...] = ()
    depth: int = 4
    component: str = ""
    explain: str = ""
    ref: str = ""
    # where the lock lives (analyzer/kernel/kimage.py): one variable of the kernel
    # image or a module (global), or a field of an object allocated at run
    # time (dynamic); neither: either can be (wait queues, percpu_counter)
    global_: bool = field(default=False, metadata={"json": "global"})
    dynamic: bool = False

    def __post_init__(self):
        if self.global_ and self.dynamic:
            raise ValueError("both global and dynamic")

    def fits(self, static: bool | None) -> bool:
        """Whether the lock can live where its address is (None: unknown)."""
        return static is None or not (self.global_ and not static or self.dynamic and static)

    def matches(self, kind: str, site: str, head: list[str]) -> bool:
        if kind not in self.kinds:
            return False
        if site and matcher(self.site)(site):
            return True
        match = matcher(self.frames)
        return any(match(f) for f in head[:self.depth])


@dataclass(frozen=True)
class Frames:
    """[frames]: the function patterns of each kind of machinery."""
    tracing: tuple[str, ...]
    lock_internal: tuple[str, ...]
    sched_internal: tuple[str, ...]
    entry: tuple[str, ...]
    untraced_spin: tuple[str, ...]


@dataclass(frozen=True)
class _File:
    """locks.toml."""
    frames: Frames
    rule: list[Rule]
    offcpu: list[OffCpuRule] = field(default_factory=list)
    slab: dict[str, str] = field(default_factory=dict)
    slab_site: dict[str, tuple[str, ...]] = field(default_factory=dict)
    slab_object: dict[str, dict[str, str]] = field(default_factory=dict)


class Knowledge:
    def __init__(self, path: Path = RULES_FILE):
        t = tables.load(path, _File)
        fr = t.frames
        self.tracing, self.lock_internal, self.sched_internal = fr.tracing, fr.lock_internal, fr.sched_internal
        self.entry, self.untraced_spin = fr.entry, fr.untraced_spin
        self.rules = t.rule
        self.offcpu_rules = t.offcpu
        # slab cache name -> the struct type of its objects
        self.slab_types: dict[str, str] = t.slab
        # objects of the generic kmalloc caches, typed by the functions their waits pass through
        self.slab_sites: dict[str, tuple[str, ...]] = t.slab_site
        self.slab_objects: dict[str, dict[str, str]] = t.slab_object

    def slab_type(self, cache: str, functions: set[str]) -> str | None:
        """The struct of an object of `cache`: by the cache's name, or, for
        a generic kmalloc cache, by the functions its lock's waits passed
        through ([slab_site])."""
        if cache in self.slab_types:
            return self.slab_types[cache]
        if cache.startswith("kmalloc-"):
            for struct, patterns in self.slab_sites.items():
                if any(self._any(fn, patterns) for fn in functions):
                    return struct
        return None

    @staticmethod
    def _any(name: str, patterns: tuple[str, ...]) -> bool:
        return matcher(patterns)(name)

    def functions(self, frames: list[str]) -> list[str]:
        """Function names, innermost first, without the probe's own frames."""
        return [fn for fn in map(function, frames) if not self._any(fn, self.tracing)]

    def caller_frames(self, frames: list[str], off_cpu: bool = False) -> list[str]:
        """Functions from the first frame outside the locking (and, off CPU,
        scheduler) code, cut at the syscall entry."""
        skip = self.lock_internal + (self.sched_internal if off_cpu else ())
        fns = self.functions(frames)
        i = 0
        while i < len(fns) and self._any(fns[i], skip):
            i += 1
        out = []
        for fn in fns[i:]:
            if self._any(fn, self.entry):
                break
            out.append(fn)
        return out

    def callers_after_lock(self, frames: list[str], depth: int = 16) -> list[str]:
        """For a CPU sample taken inside locking code: the functions after the
        outermost locking frame (helpers the spin calls, e.g. a hypervisor
        check, can sit on top), cut at the syscall entry."""
        fns = self.functions(frames)
        lock = [i for i, fn in enumerate(fns[:depth]) if self._any(fn, self.lock_internal + self.untraced_spin)]
        out = []
        for fn in fns[(lock[-1] + 1) if lock else 0:]:
            if self._any(fn, self.entry):
                break
            out.append(fn)
        return out

    def site(self, frames: list[str], off_cpu: bool = False) -> str:
        callers = self.caller_frames(frames, off_cpu)
        return callers[0] if callers else "[unknown]"

    @staticmethod
    def syscall(frames: list[str]) -> str | None:
        """The system call a stack runs in; '(interrupt)' is appended when an
        interrupt or softirq ran on top of it, '(kernel thread)' for kthreads."""
        in_irq = False
        for fn in map(function, frames):
            if fn.startswith(_IRQ_ENTRY):
                in_irq = True
            m = _SYSCALL.match(fn)
            if m:
                return m.group(1) + (" (interrupt)" if in_irq else "")
            if fn in ("ret_from_fork", "kthread"):
                return "(kernel thread)" + (" (interrupt)" if in_irq else "")
        return "(interrupt)" if in_irq else None

    def in_locking(self, frames: list[str]) -> bool:
        """Whether a kernel stack is inside the kernel's locking code."""
        return any(self._any(fn, self.lock_internal) for fn in self.functions(frames))

    def untraced_spinning(self, frames: list[str]) -> bool:
        return any(self._any(fn, self.untraced_spin) for fn in self.functions(frames))

    def offcpu_rule(self, frames: list[str]) -> OffCpuRule | None:
        """The first [[offcpu]] class whose frames match the switch-out stack."""
        fns = self.functions(frames)
        for rule in self.offcpu_rules:
            if rule.matches(fns):
                return rule
        return None

    def infer(self, kind: str, frames: list[str], static: bool | None = None) -> Rule | None:
        """The first rule matching the lock type and stack that can live
        where the address is (`static`: in static data of the kernel image or
        a module; None: unknown); failing that, the first one that matches
        regardless (the caller checks `fits`)."""
        site = self.site(frames)
        head = self.functions(frames)
        first = None
        for rule in self.rules:
            if rule.matches(kind, site, head):
                if rule.fits(static):
                    return rule
                first = first or rule
        return first


@functools.lru_cache(maxsize=1)
def default() -> Knowledge:
    return Knowledge()
