"""The lock fields the object iterators compute (lockfields.toml): one entry
per field, read by naming (verified names) and by probes/gen_lockfields.py
(the C struct members, the BPF reads and the keys the loader emits).

The generator loads this file by path at build time, before the package is
installed: it imports only the standard library and lockscope.tables (which
imports only the standard library), from this source tree then.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

if not __package__:      # loaded by path (probes/gen_lockfields.py): this tree's lockscope
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from lockscope import tables  # noqa: E402

TABLE_FILE = Path(__file__).with_name("lockfields.toml")
RECORDS = ("file", "task")
# lock types and their C types; a mutex or rw_semaphore has a wait_lock
LOCK_TYPES = {"mutex": "struct mutex", "rw_semaphore": "struct rw_semaphore", "spinlock": "spinlock_t",
              "raw_spinlock": "raw_spinlock_t", "rwlock": "rwlock_t"}
SLEEPING_TYPES = ("mutex", "rw_semaphore")
NAMED = ("file", "file_name", "parent_dir", "parent_dir_name", "fs", "process", "cpu", "memcg")


@dataclass(frozen=True)
class Base:
    """An object lock fields hang off, reached by hand-written BPF code."""
    name: str
    struct: str          # its C struct
    record: str          # "file" (struct obj_file) or "task" (struct obj_task)
    reached: str


@dataclass(frozen=True)
class LockField:
    """One lock field: where the probe finds it and how naming shows it."""
    key: str             # JSON key and struct member
    base: Base
    member: str          # C member path from the base
    type: str            # one of LOCK_TYPES
    lock_class: str
    named: str           # one of NAMED
    component: str
    explain: str
    fstype: str | None = None
    optional: bool = False
    old: str | None = None   # the member's name on older kernels

    @property
    def record(self) -> str:
        return self.base.record


@dataclass(frozen=True)
class Table:
    bases: dict[str, Base]
    fields: tuple[LockField, ...]

    def of_record(self, record: str) -> list[LockField]:
        return [f for f in self.fields if f.record == record]

    def sleeping_types(self) -> dict[str, str]:
        """Lock class -> mutex / rw_semaphore, for the classes with a wait_lock."""
        return {f.lock_class: f.type for f in self.fields if f.type in SLEEPING_TYPES}


def _one_of(value: str, allowed, what: str) -> None:
    if value not in allowed:
        raise ValueError(f"{what} {value!r} is not one of {list(allowed)}")


@dataclass(frozen=True)
class _BaseRow:
    """[base.NAME]"""
    struct: str
    record: str
    reached: str = ""

    def __post_init__(self):
        _one_of(self.record, RECORDS, "record")


@dataclass(frozen=True)
class _FieldRow:
    """[[field]]: a LockField, its base by name."""
    key: str
    base: str
    member: str
    type: str
    lock_class: str = field(metadata={"json": "class"})
    named: str
    component: str
    explain: str
    fstype: str | None = None
    optional: bool = False
    old: str | None = None

    def __post_init__(self):
        if not self.key.isidentifier() or not all(m.isidentifier() for m in self.member.split(".")):
            raise ValueError("key and member must be C identifiers")
        _one_of(self.type, LOCK_TYPES, "type")
        _one_of(self.named, NAMED, "named")


@dataclass(frozen=True)
class _File:
    """lockfields.toml."""
    base: dict[str, _BaseRow] = field(default_factory=dict)
    fields: list[_FieldRow] = field(default_factory=list, metadata={"json": "field"})


def load(path: Path | str = TABLE_FILE) -> Table:
    """Read and check a table of lock fields."""
    t = tables.load(path, _File)
    bases = {name: Base(name, b.struct, b.record, b.reached) for name, b in t.base.items()}
    fields, keys = [], set()
    for i, r in enumerate(t.fields):
        at = tables.where("field", i, r.key)
        if r.base not in bases:
            raise tables.error(path, at, f"base {r.base!r} is not one of {list(bases)}")
        if r.key in keys:
            raise tables.error(path, at, f"key {r.key!r}: a lock field named twice")
        keys.add(r.key)
        fields.append(LockField(**{**vars(r), "base": bases[r.base]}))
    return Table(bases, tuple(fields))


@lru_cache(maxsize=None)
def default() -> Table:
    """The table shipped with lockscope."""
    return load()
