"""The lock fields the object iterators compute (lockfields.toml): one entry
per field, read by naming (verified names) and by probes/gen_lockfields.py
(the C struct members, the BPF reads and the keys the loader emits).

Only the standard library is imported here: the generator loads this file
by path at build time, before the package is installed.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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


def _field(entry: dict, bases: dict[str, Base]) -> LockField:
    def need(value, allowed, what):
        if value not in allowed:
            raise ValueError(f"lock field {entry.get('key')!r}: {what} {value!r} is not one of {list(allowed)}")
        return value

    if not entry["key"].isidentifier() or not all(m.isidentifier() for m in entry["member"].split(".")):
        raise ValueError(f"lock field {entry['key']!r}: key and member must be C identifiers")
    return LockField(key=entry["key"], base=bases[need(entry["base"], bases, "base")], member=entry["member"],
                     type=need(entry["type"], LOCK_TYPES, "type"), lock_class=entry["class"],
                     named=need(entry["named"], NAMED, "named"), component=entry["component"],
                     explain=entry["explain"], fstype=entry.get("fstype"),
                     optional=bool(entry.get("optional", False)), old=entry.get("old"))


def load(path: Path | str = TABLE_FILE) -> Table:
    """Read and check a table of lock fields."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    bases = {name: Base(name, b["struct"], b["record"], b.get("reached", ""))
             for name, b in data.get("base", {}).items()}
    for b in bases.values():
        if b.record not in RECORDS:
            raise ValueError(f"base {b.name!r}: record {b.record!r} is not one of {list(RECORDS)}")
    fields = tuple(_field(e, bases) for e in data.get("field", []))
    keys = [f.key for f in fields]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise ValueError(f"lock fields named twice: {sorted(dup)}")
    return Table(bases, fields)


@lru_cache(maxsize=None)
def default() -> Table:
    """The table shipped with lockscope."""
    return load()
