"""Locks inside slab objects: the probe reports the slab cache and object
start of each contended address it could resolve (kmem.bpf.c); the cache's
object type (locks.toml [slab]) and the kernel's BTF give the lock field at
the offset. Run at record time, on the machine the probe ran on; the result
is kept in the record's raw section, so naming stays offline."""
from __future__ import annotations

import dataclasses

from . import btf
from .knowledge import Knowledge, default as default_knowledge
from lockscope.probedata import Slab

# contention-tracepoint lock families that a BTF lock type can show up as
_FAMILIES = {
    "spinlock": {"spinlock"}, "rwlock": {"rwlock"}, "rwsem": {"rwsem"}, "mutex": {"mutex"},
    "percpu-rwsem": {"percpu-rwsem"}, "rtmutex": {"rtmutex"}, "semaphore": {"semaphore"},
    "seqlock": {"spinlock"},
}


def consistent(btf_lock: str, family: str) -> bool:
    """Whether a lock field of BTF type `btf_lock` can be the lock a
    contention event of `family` reported."""
    return family in _FAMILIES.get(btf_lock, ())


def resolve(slab: Slab, addresses: set[int] | None = None, kb: Knowledge | None = None,
            path=btf.VMLINUX, functions: dict[int, set[str]] | None = None) -> Slab:
    """The probe's `slab` output with, per entry, the object type, the
    offset and the lock field there (when the cache has a known type and a
    lock field starts at the offset). Only `addresses` are kept if given.
    `functions`: per address, the functions in its waits' stacks (an object
    of a generic kmalloc cache is typed by them: locks.toml [slab_site])."""
    kb = kb or default_knowledge()
    functions = functions or {}
    out = Slab(status=slab.status, reason=slab.reason)
    entries = [dataclasses.replace(e) for e in slab.entries if addresses is None or e.addr in addresses]
    types = {e.addr: kb.slab_type(e.cache, functions.get(e.addr, set())) for e in entries}
    for e in entries:
        if types[e.addr] and e.cache.startswith("kmalloc-") and not _fits(types[e.addr], e.object_size, path):
            types[e.addr] = None        # typed by its waits' functions, but too big for the object
    wanted = tuple(sorted({t for t in types.values() if t}))
    for e in entries:
        typ = types[e.addr]
        if typ and e.base:
            e.type = typ
            e.offset = e.addr - e.base
            try:
                hit = btf.lock_at(typ, e.offset, wanted, path)
            except btf.BtfUnavailable as err:
                out.btf = f"unavailable: {err}"
                hit = None
            if hit:
                e.lock_field, e.lock = hit
        out.entries.append(e)
    return out


def _fits(struct: str, object_size: int, path) -> bool:
    """Whether a struct fits an object of `object_size` bytes (unknown: yes)."""
    try:
        size = btf.struct_size(struct, path)
    except btf.BtfUnavailable:
        return True
    return not size or not object_size or size <= object_size
