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
            path=btf.VMLINUX) -> Slab:
    """The probe's `slab` output with, per entry, the object type, the
    offset and the lock field there (when the cache has a known type and a
    lock field starts at the offset). Only `addresses` are kept if given."""
    kb = kb or default_knowledge()
    out = Slab(status=slab.status, reason=slab.reason)
    entries = [dataclasses.replace(e) for e in slab.entries if addresses is None or e.addr in addresses]
    wanted = tuple(sorted({kb.slab_types[e.cache] for e in entries if e.cache in kb.slab_types}))
    for e in entries:
        typ = kb.slab_types.get(e.cache)
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
