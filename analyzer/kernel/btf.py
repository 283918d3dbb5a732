"""The kernel's BTF, read through `bpftool -j btf dump file`: which lock
field of a struct lies at a byte offset (`shmem_inode_info.vfs_inode.i_rwsem`).

Used to name a lock inside a slab object from the object's type and the
lock's offset in it. A struct's lock fields are computed once per kernel and
kept in a small cache file (the whole dump is ~20 MB of JSON)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from lockscope import atomicio

VMLINUX = Path("/sys/kernel/btf/vmlinux")
# elements of a trailing flexible array (struct sem_array's sems[]) walked for their locks
FLEXIBLE_ELEMS = 64
TABLES_VERSION = 2           # the cached tables' layout (2: flexible arrays walked)

# lock types by struct or typedef name: a field of one of these is a lock
LOCK_TYPES = {
    "spinlock": "spinlock", "spinlock_t": "spinlock", "raw_spinlock": "spinlock", "raw_spinlock_t": "spinlock",
    "rwlock_t": "rwlock", "rw_semaphore": "rwsem", "mutex": "mutex", "percpu_rw_semaphore": "percpu-rwsem",
    "rt_mutex": "rtmutex", "rt_mutex_base": "rtmutex", "semaphore": "semaphore", "seqlock_t": "seqlock",
}
MAX_DEPTH = 8


class BtfUnavailable(Exception):
    pass


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lockscope" / "btf"


def _btf_key(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:20]


class Types:
    """BTF types by id, from bpftool's JSON dump."""

    def __init__(self, types: list[dict]):
        self.by_id = {t["id"]: t for t in types}
        self.structs: dict[str, dict] = {}
        for t in types:
            if t["kind"] in ("STRUCT", "UNION") and t.get("name") not in (None, "(anon)") and t.get("size"):
                self.structs.setdefault(t["name"], t)

    @classmethod
    def load(cls, path: Path = VMLINUX) -> "Types":
        bpftool = shutil.which("bpftool") or ("/usr/sbin/bpftool" if os.path.exists("/usr/sbin/bpftool") else None)
        if not bpftool:
            raise BtfUnavailable("bpftool is not installed")
        try:
            out = subprocess.run([bpftool, "-j", "btf", "dump", "file", str(path)], check=True,
                                 capture_output=True, timeout=120).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise BtfUnavailable(f"cannot dump {path}: {e}") from e
        return cls(json.loads(out)["types"])

    def _strip(self, tid: int) -> tuple[dict, str | None]:
        """The type behind typedefs and qualifiers, and the first lock type
        name seen on the way."""
        lock = None
        t = self.by_id.get(tid)
        while t is not None:
            name = t.get("name")
            if lock is None and name in LOCK_TYPES:
                lock = LOCK_TYPES[name]
            if t["kind"] in ("TYPEDEF", "CONST", "VOLATILE", "RESTRICT", "TYPE_TAG"):
                t = self.by_id.get(t["type_id"])
                continue
            return t, lock
        return {}, lock

    def size(self, t: dict) -> int:
        if t.get("kind") == "ARRAY":
            return self.size(self._strip(t["type_id"])[0]) * int(t.get("nr_elems", 0))
        return int(t.get("size", 0))

    def member_offset(self, struct: str, member: str) -> int | None:
        """Byte offset of a direct member (anonymous members searched
        through), or None."""
        t = self.structs.get(struct)
        return self._find(t, member, 0) if t is not None else None

    def _find(self, t: dict, member: str, base: int) -> int | None:
        for m in t.get("members", []):
            off = base + int(m["bits_offset"]) // 8
            if m.get("name") == member:
                return off
            if m.get("name") in (None, "(anon)"):
                mt = self._strip(m["type_id"])[0]
                hit = self._find(mt, member, off) if mt.get("kind") in ("STRUCT", "UNION") else None
                if hit is not None:
                    return hit
        return None

    def locks(self, struct: str) -> list[tuple[int, str, str]]:
        """Every lock field of a struct, nested ones included:
        (byte offset, path, lock type), outermost lock first at an offset."""
        t = self.structs.get(struct)
        out: list[tuple[int, str, str]] = []
        if t is not None:
            self._walk(t, 0, struct, out, 0)
        return out

    def _walk(self, t: dict, base: int, path: str, out: list, depth: int) -> None:
        if depth > MAX_DEPTH:
            return
        members = t.get("members", [])
        for m in members:
            mt, lock = self._strip(m["type_id"])
            off = base + int(m["bits_offset"]) // 8
            name = m.get("name")
            p = path if name in (None, "(anon)") else f"{path}.{name}"
            if lock:
                out.append((off, p, lock))
            if mt.get("kind") in ("STRUCT", "UNION"):
                self._walk(mt, off, p, out, depth + 1)
            elif mt.get("kind") == "ARRAY" and not lock:
                et, elock = self._strip(mt["type_id"])
                es = self.size(et)
                n = int(mt.get("nr_elems", 0))
                if not n and m is members[-1]:
                    n = FLEXIBLE_ELEMS                  # a trailing flexible array: its first elements
                if es and (elock or et.get("kind") in ("STRUCT", "UNION")) and n <= 64:
                    for i in range(n):
                        ep = f"{p}[{i}]"
                        if elock:
                            out.append((off + i * es, ep, elock))
                        if et.get("kind") in ("STRUCT", "UNION"):
                            self._walk(et, off + i * es, ep, out, depth + 1)


@functools.lru_cache(maxsize=4)
def _lock_tables(path: str, structs: tuple[str, ...]) -> dict[str, list]:
    p = Path(path)
    cache = _cache_dir() / f"{_btf_key(p)}-{TABLES_VERSION}.json"
    try:
        tables = json.loads(cache.read_text())
    except (OSError, ValueError):
        tables = {}
    missing = [s for s in structs if s not in tables]
    if missing:
        types = Types.load(p)
        for s in missing:
            if s.startswith("@"):      # "@struct.member": a member's offset
                struct, member = s[1:].split(".", 1)
                tables[s] = types.member_offset(struct, member)
            elif s.startswith("%"):    # "%struct": its size in bytes
                tables[s] = types.size(types.structs[s[1:]]) if s[1:] in types.structs else None
            else:
                tables[s] = types.locks(s) if s in types.structs else None
        try:
            atomicio.write_text(cache, json.dumps(tables))
        except OSError:
            pass
    return {s: tables.get(s) for s in structs}


def lock_at(struct: str, offset: int, structs: tuple[str, ...] = (), path: Path = VMLINUX) -> tuple[str, str] | None:
    """(field path, lock type) of the lock field at `offset` of `struct`, or
    None when no lock field starts there. `structs` names the other structs
    to compute in the same pass (one dump for all)."""
    key = tuple(sorted(set(structs) | {struct}))
    table = _lock_tables(str(path), key).get(struct)
    for off, p, lock in table or ():
        if off == offset:
            return p, lock
    return None


def struct_size(struct: str, path: Path = VMLINUX) -> int | None:
    """sizeof(struct) by the kernel's BTF (cached per kernel), None where
    the kernel lacks it."""
    return _lock_tables(str(path), (f"%{struct}",)).get(f"%{struct}")


def struct_locks(structs: tuple[str, ...], offsets: tuple[tuple[str, str], ...] = (),
                 path: Path = VMLINUX) -> tuple[dict[str, list | None], dict[tuple[str, str], int | None]]:
    """Every lock member of each struct (as Types.locks; None for a struct
    the kernel lacks) and the byte offsets of (struct, member) pairs, read
    in one pass and cached per kernel."""
    keys = tuple(sorted(set(structs) | {f"@{s}.{m}" for s, m in offsets}))
    tables = _lock_tables(str(path), keys)
    return ({s: tables.get(s) for s in structs}, {(s, m): tables.get(f"@{s}.{m}") for s, m in offsets})
