"""What each sleep of a traced thread is: a lock wait, idle (waiting for
work), I/O, a page or journal wait, preempted, or another wait.

The table is data (sleepkinds.toml): the kind of every off-CPU class of
locks.toml, and the user-space primitive of a futex sleep by the C library
function it came from. A futex sleep of a condition variable or semaphore
("handoff") is decided per wait by who woke it (analyzer/roles.py)."""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

from lockscope import tables
from lockscope.globs import matcher

TABLE_FILE = Path(__file__).with_name("sleepkinds.toml")

LOCK, IDLE, IO, STORAGE, PREEMPTED, OTHER = "lock", "idle", "io", "storage", "preempted", "other"
KINDS = (LOCK, IDLE, IO, STORAGE, PREEMPTED, OTHER)      # the kinds a role's time is split into
FUTEX = "futex"          # class kind: decided by the futex primitive
HANDOFF = "handoff"      # primitive kind: a lock or idle, by who woke the wait
LABELS = {LOCK: "lock waits", IDLE: "idle", IO: "block I/O", STORAGE: "page/journal waits",
          PREEMPTED: "preempted", OTHER: "other waits"}

FUTEX_LOCK_PI, FUTEX_LOCK_PI2 = 6, 13
SPIN_DEPTH = 2           # a spin is the innermost frame, or the one a helper it calls returns to
UNKNOWN_PRIMITIVE = "futex"   # a futex wait no rule recognises (a program's own futex)


@dataclass(frozen=True)
class FutexRule:
    primitive: str
    functions: tuple[str, ...]
    kind: str
    words: tuple[int, ...] = (0,)     # offsets of the object's futex words
    align: int = 4                     # the object's alignment
    within: tuple[str, ...] = ()       # only under one of these (an outer library frame)
    own_word: bool = False             # a waiter sleeps on a futex word of its own, not the lock's

    def matches(self, function: str, outer: list[str] = ()) -> bool:
        if not matcher(self.functions)(function):
            return False
        within = matcher(self.within)
        return not self.within or any(within(f.lstrip("_")) for f in outer)


@dataclass(frozen=True)
class _SpinRow:
    """[[spin]]: a FutexRule of CPU samples, with where its spin goes."""
    primitive: str
    functions: tuple[str, ...]
    kind: str = LOCK
    within: tuple[str, ...] = ()
    files: tuple[str, ...] = ()      # files whose frames count as a runtime's when looking for a spin
    attach: str = ""                 # "kind": the spin goes to the heaviest lock of its primitive's kind

    def __post_init__(self):
        if self.attach not in ("", "kind"):
            raise ValueError(f'attach is "kind" or left out, not {self.attach!r}')


@dataclass(frozen=True)
class _File:
    """sleepkinds.toml."""
    classes: dict[str, str]
    futex: list[FutexRule]
    spin: list[_SpinRow] = field(default_factory=list)


class SleepKinds:
    def __init__(self, path: Path = TABLE_FILE):
        t = tables.load(path, _File)
        for name, kind in t.classes.items():
            if kind not in KINDS + (FUTEX,):
                raise tables.error(path, tables.where("classes"), f"{name}: unknown sleep kind {kind!r}")
        for i, r in enumerate(t.futex):
            if r.kind not in (LOCK, IDLE, HANDOFF):
                raise tables.error(path, tables.where("futex", i, r.primitive), f"unknown sleep kind {r.kind!r}")
        self.classes: dict[str, str] = t.classes
        self.futex_rules = [dataclasses.replace(r, words=tuple(sorted(r.words, reverse=True))) for r in t.futex]
        self.spin_rules = [FutexRule(r.primitive, r.functions, r.kind, within=r.within) for r in t.spin]
        # primitives whose spin goes to the heaviest lock of that kind ([[spin]] attach = "kind")
        self.spin_by_kind = {r.primitive for r in t.spin if r.attach == "kind"}
        # files whose frames count as a runtime's when looking for a spin ([[spin]] files)
        self.spin_files = {f for r in t.spin for f in r.files}

    def class_kind(self, wait_class: str) -> str:
        """The kind of an off-CPU class (naming.classify_offcpu's result)."""
        return self.classes.get(wait_class, OTHER)

    def futex_primitive(self, op: int, runtime_functions: list[str]) -> tuple[str, str]:
        """(primitive, kind) of a futex wait: its op, then the library
        functions of its user stack (innermost first, names as symbolized
        and demangled)."""
        if op in (FUTEX_LOCK_PI, FUTEX_LOCK_PI2):
            return "pthread_mutex", LOCK
        for i, fn in enumerate(runtime_functions):
            name = fn.lstrip("_")
            for rule in self.futex_rules:
                if rule.matches(name, runtime_functions[i + 1:]):
                    return rule.primitive, rule.kind
        return UNKNOWN_PRIMITIVE, HANDOFF

    def spinning(self, runtime_functions: list[str]) -> str | None:
        """The primitive whose acquire path a CPU sample spins in, by the
        library functions on top of its user stack (innermost first), or
        None: [[spin]]."""
        for i, fn in enumerate(runtime_functions[:SPIN_DEPTH]):
            name = fn.lstrip("_")
            for rule in self.spin_rules:
                if rule.matches(name, runtime_functions[i + 1:]):
                    return rule.primitive if rule.kind == LOCK else None      # idle, or traced already
        return None

    def object_start(self, primitive: str, addr: int) -> int:
        """The start of the lock object a futex word at `addr` (an address,
        or an offset in an aligned object) belongs to: one entry per lock
        object, however many futex words it has (a glibc rwlock's two)."""
        for rule in self.futex_rules:
            if rule.primitive == primitive:
                for w in rule.words:
                    if addr >= w and (addr - w) % rule.align == 0:
                        return addr - w
                break
        return addr

    def own_word(self, primitive: str) -> bool:
        """Whether a waiter of this primitive sleeps on a futex word of its
        own (Go 1.24+'s runtime.lock2: the waiting M's semaphore): the word
        names the waiter, not the lock, which is then named by its site."""
        return any(r.own_word for r in self.futex_rules if r.primitive == primitive)

    def primitive_kind(self, primitive: str) -> str:
        """A futex no rule recognises (a program's or a runtime's own: a
        static Go or Rust binary parking its threads) is decided like a
        condition variable: a lock wait when a working peer woke it."""
        for rule in self.futex_rules:
            if rule.primitive == primitive:
                return rule.kind
        return HANDOFF


@functools.lru_cache(maxsize=1)
def default() -> SleepKinds:
    return SleepKinds()
