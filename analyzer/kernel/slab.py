"""Locks inside slab objects: the probe reports the slab cache and object
start of each contended address it could resolve (kmem.bpf.c); the cache's
object type (locks.toml [slab]) and the kernel's BTF give the lock field at
the offset. Run at record time, on the machine the probe ran on; the result
is kept in the record's raw section, so naming stays offline."""
from __future__ import annotations

import dataclasses

from . import btf
from .knowledge import Knowledge, default as default_knowledge
from lockscope.model.probedata import Slab

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
            if typ in kb.slab_objects and e.head:
                e.object, e.object_id = _ipc_object(bytes.fromhex(e.head), typ, kb.slab_objects[typ], path)
        out.entries.append(e)
    return out


def _ipc_object(head: bytes, struct: str, spec: dict[str, str], path) -> tuple[str | None, int | None]:
    """(`SysV message queue (key IPC_PRIVATE)`, its id): the kind, the key
    and the id of the struct kern_ipc_perm at `spec["perm"]` of a SysV IPC
    object, from its first bytes (None where they do not reach them)."""
    perm = spec["perm"]
    try:
        _, offs = btf.struct_locks((), ((struct, perm), ("kern_ipc_perm", "id"), ("kern_ipc_perm", "key")), path)
    except btf.BtfUnavailable:
        return None, None
    base, id_at, key_at = offs[(struct, perm)], offs[("kern_ipc_perm", "id")], offs[("kern_ipc_perm", "key")]
    if base is None or id_at is None or key_at is None or base + max(id_at, key_at) + 4 > len(head):
        return None, None
    ipc_id = int.from_bytes(head[base + id_at:base + id_at + 4], "little", signed=True)
    key = int.from_bytes(head[base + key_at:base + key_at + 4], "little")
    return f"{spec['label']} (key {'IPC_PRIVATE' if key == 0 else f'0x{key:08x}'})", ipc_id


def _fits(struct: str, object_size: int, path) -> bool:
    """Whether a struct fits an object of `object_size` bytes (unknown: yes)."""
    try:
        size = btf.struct_size(struct, path)
    except btf.BtfUnavailable:
        return True
    return not size or not object_size or size <= object_size
