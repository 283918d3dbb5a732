"""Locks of the objects behind the workload's open files, named by struct
and member: `pipe_inode_info->mutex of pipe:[1234] (fd 3 of prog)`.

The file iterator reports each file's f_op->release, private_data, i_flctx,
s_fs_info and socket (probes/objects.bpf.c). Here, at record time and on the
machine the probe ran on: the release function's text symbol gives the
file's kind, analyzer/kernel/fileobjects.toml the struct of each object, and the
kernel's BTF every lock member of that struct (analyzer/kernel/btf.py). The
contended addresses that are such members are kept in the record's raw
section (`objlocks`), so naming stays offline.
"""
from __future__ import annotations

import bisect
import ipaddress
import socket
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import btf
from .lockdesc import display_path, file_names, fs_label, lock_kind
from .slab import consistent
from lockscope import tables
from lockscope.model.probedata import Contention, FileObject, ObjLock, ObjLocks, Objects

TABLE_FILE = Path(__file__).with_name("fileobjects.toml")


@dataclass(frozen=True)
class Kind:
    name: str
    struct: str
    component: str


@dataclass(frozen=True)
class SockType:
    family: int
    struct: str
    label: str
    protocol: int | None = None      # None: any


@dataclass(frozen=True)
class FsTypes:
    sb: str
    inode: str
    vfs_inode: str = "vfs_inode"     # the member of `inode` that is its struct inode


@dataclass(frozen=True)
class _KindRow:
    """[kind.NAME]: the file's kind by its f_op->release functions."""
    release: tuple[str, ...]
    struct: str = ""
    component: str | None = None     # None: the kind's name


@dataclass(frozen=True)
class _File:
    """fileobjects.toml."""
    kind: dict[str, _KindRow] = field(default_factory=dict)
    socket: list[SockType] = field(default_factory=list)
    fs: dict[str, FsTypes] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    by_release: dict[str, Kind]
    sockets: tuple[SockType, ...]
    fs: dict[str, FsTypes]

    def socket(self, family: int, protocol: int) -> SockType | None:
        return next((s for s in self.sockets if s.family == family and s.protocol in (None, protocol)), None)


def load(path: Path | str = TABLE_FILE) -> Table:
    t = tables.load(path, _File)
    by_release = {fn: Kind(name, k.struct, name if k.component is None else k.component)
                  for name, k in t.kind.items() for fn in k.release}
    return Table(by_release, tuple(t.socket), t.fs)


@lru_cache(maxsize=None)
def default() -> Table:
    return load()


@dataclass
class View:
    """One typed object: a struct at an address, shown as `label`."""
    struct: str
    base: int
    label: str
    kind: str
    component: str | None = None


def _ipv4(n: int) -> str:
    # saddr/daddr come in network order, read as a little-endian u32
    return str(ipaddress.IPv4Address(n.to_bytes(4, "little")))


def socket_label(f: FileObject, st: SockType | None, scratch: str | None = None) -> str:
    e = f.extra
    family = e.get("sk_family", 0)
    if family == socket.AF_UNIX:
        path = e.get("unix_path")
        return f"unix {display_path(path, scratch)}" if path else "unix (unbound)"
    if family == socket.AF_INET:
        name = st.label if st else f"INET protocol {e.get('sk_protocol')}"
        here = f"{_ipv4(e.get('saddr', 0))}:{e.get('sport', 0)}"
        return f"{name} {here}" + (f" to {_ipv4(e['daddr'])}:{e.get('dport', 0)}" if e.get("daddr") else "")
    return f"{st.label if st else f'family {family}'} socket ({f.path})"


def _views(f: FileObject, kind: Kind | None, table: Table, comm: str | None, names: dict,
           offsets: dict, scratch: str | None) -> list[View]:
    """The typed objects behind one file, in naming order (first wins)."""
    a = f.addresses
    owner = f" (fd {f.fd} of {comm})" if comm else ""
    path, fs = names["file_name"][0], names["fs"][0]
    out: list[View] = []
    pd = a.get("private_data")
    if kind and kind.name == "socket" and a.get("sk"):
        st = table.socket(f.extra.get("sk_family", 0), f.extra.get("sk_protocol", 0))
        label = socket_label(f, st, scratch)
        out.append(View("sock", a["sk"], label, "socket", kind.component))
        if st:
            out.append(View(st.struct, a["sk"], label, "socket", kind.component))
        if pd:
            out.append(View("socket", pd, label, "socket", kind.component))
    elif kind and kind.struct and pd:
        out.append(View(kind.struct, pd, f"{path}{owner}", kind.name, kind.component))
    if a.get("i_flctx"):
        out.append(View("file_lock_context", a["i_flctx"], path, "file locks", "locks"))
    if a.get("inode"):
        out.append(View("inode", a["inode"], path, "inode"))
        fst = table.fs.get(f.fstype)
        off = offsets.get((fst.inode, fst.vfs_inode)) if fst else None
        if off is not None:
            out.append(View(fst.inode, a["inode"] - off, path, "inode", f.fstype))
    if a.get("sb"):
        out.append(View("super_block", a["sb"], fs, "fs"))
        fst = table.fs.get(f.fstype)
        if fst and a.get("s_fs_info"):
            out.append(View(fst.sb, a["s_fs_info"], fs, "fs", f.fstype))
    if a.get("file") and comm:
        out.append(View("file", a["file"], f"{path}{owner}", "file", "vfs"))
    return out


# the objects a thread holds (obj_task keys) and their structs
TASK_OBJECTS = (("task", "task_struct"), ("signal", "signal_struct"), ("mm", "mm_struct"),
                ("files", "files_struct"), ("fs", "fs_struct"), ("sighand", "sighand_struct"))


def _task_views(objects: Objects, table: Table, mounts: dict[int, str], scratch: str | None) -> list[View]:
    """The objects the workload's threads hold, named after the command (as
    naming's per-task names: the same in every run of a sweep); their IPC
    namespace (SysV IPC's ids); the file system of their working directory,
    where a program's files live even while none is open."""
    out, seen = [], set()
    for t in objects.tasks:
        views = [View(struct, t.addresses.get(key, 0), t.comm, "task", "sched" if key == "task" else None)
                 for key, struct in TASK_OBJECTS]
        ns = t.addresses.get("ipc_ns", 0)
        label = "the initial IPC namespace" if ns >= KERNEL_IMAGE else f"the IPC namespace of {t.comm}"
        views.append(View("ipc_namespace", ns, label, "IPC namespace", "IPC"))
        fstype = t.extra.get("cwd_fstype", "")
        fst = table.fs.get(fstype)
        if fst and t.addresses.get("cwd_sb"):
            fs = fs_label(fstype, t.extra.get("cwd_dev", 0), mounts, scratch)
            views += [View("super_block", t.addresses["cwd_sb"], fs, "fs"),
                      View(fst.sb, t.addresses.get("cwd_fs_info", 0), fs, "fs", fstype)]
        for v in views:
            if v.base and v.base not in seen:
                seen.add(v.base)
                out.append(v)
    return out


def _superblock_views(objects: Objects, table: Table, mounts: dict[int, str], scratch: str | None) -> list[View]:
    """Every mounted file system's superblock and its own part (a tmpfs's
    shmem_sb_info with its used_blocks counter, ...), wherever the program's
    files are: after the files' and working directories' views, which name
    the same objects first."""
    out = []
    for sb in objects.superblocks:
        fs = fs_label(sb.fstype, sb.dev, mounts, scratch)
        out.append(View("super_block", sb.addresses.get("sb", 0), fs, "fs"))
        fst = table.fs.get(sb.fstype)
        if fst and sb.addresses.get("s_fs_info"):
            out.append(View(fst.sb, sb.addresses["s_fs_info"], fs, "fs", sb.fstype))
    return out


def resolve(objects: Objects, contention: list[Contention], mounts: dict[int, str], scratch: str | None,
            symbolize, path=btf.VMLINUX) -> ObjLocks:
    """The contended addresses (of `contention`) that are lock members of the
    objects behind the files in `objects`, each with its struct, member and
    object; `symbolize(addr)` gives a kernel text symbol ("pipe_release+0x0")."""
    table = default()
    families: dict[int, set[str]] = {}
    for e in contention:
        families.setdefault(e.lock, set()).add(lock_kind(e.flags)[0])
    comms = {t.tgid: t.comm for t in objects.tasks}
    out = ObjLocks(status="ok")
    kinds: list[tuple[FileObject, Kind | None]] = []
    for f in objects.files:
        rel = f.addresses.get("f_release")
        kind = table.by_release.get(symbolize(rel).split("+")[0]) if rel else None
        kinds.append((f, kind))
        if f.tgid in comms:
            key = kind.name if kind else "other"
            out.kinds[key] = out.kinds.get(key, 0) + 1
    if not families:
        return out
    structs = {k.struct for _, k in kinds if k and k.struct} | {s.struct for s in table.sockets} | \
        {"sock", "socket", "file_lock_context", "inode", "super_block", "file"} | \
        {struct for _, struct in TASK_OBJECTS} | {"ipc_namespace"} | \
        {t.sb for t in table.fs.values()} | {t.inode for t in table.fs.values()}
    offsets = {(t.inode, t.vfs_inode) for t in table.fs.values()}
    try:
        locks, offs = btf.struct_locks(tuple(sorted(structs)), tuple(sorted(offsets)), path)
    except btf.BtfUnavailable as err:
        return ObjLocks(status="unavailable", reason=str(err), kinds=out.kinds)
    by_off: dict[str, dict[int, list[tuple[str, str]]]] = {}
    for s, ls in locks.items():
        d = by_off[s] = {}
        for off, p, lk in ls or ():
            d.setdefault(off, []).append((p.split(".", 1)[1] if "." in p else p, lk))
    found: dict[int, ObjLock] = {}
    addrs = sorted(families)
    span = {s: max(d, default=-1) for s, d in by_off.items()}
    views = [v for f, kind in kinds
             for v in _views(f, kind, table, comms.get(f.tgid), file_names(f, mounts, scratch), offs, scratch)]
    for v in views + _task_views(objects, table, mounts, scratch) + _superblock_views(objects, table, mounts, scratch):
        members = by_off.get(v.struct) or {}
        lo = bisect.bisect_left(addrs, v.base)
        hi = bisect.bisect_right(addrs, v.base + span.get(v.struct, -1))
        for addr in addrs[lo:hi]:
            fams = families[addr]
            if addr in found:
                continue
            hit = next(((m, lk) for m, lk in members.get(addr - v.base, ())
                        if any(consistent(lk, fam) for fam in fams)), None)
            if hit:
                found[addr] = ObjLock(addr=addr, struct=v.struct, member=hit[0], lock=hit[1], object=v.label,
                                      kind=v.kind, component=v.component)
    out.entries = sorted(found.values(), key=lambda e: e.addr)
    return out


# x86-64: the kernel image and modules are mapped from here up (the direct
# map, vmalloc and per-CPU areas, where objects live, lie below)
KERNEL_IMAGE = 0xFFFF_FFFF_8000_0000


def not_found_reason(objlocks: ObjLocks | None, addr: int | None = None) -> str | None:
    """Why a lock the walk did not name could not be found: a static lock
    (no object holds it), or the objects it looked in."""
    if objlocks is None:
        return None
    if addr is not None and addr >= KERNEL_IMAGE:
        return ("a static lock in the kernel image or a module (a global, not a member of an object; "
                "this kernel's kallsyms names no data)")
    if objlocks.status != "ok":
        return f"the objects behind the workload's files were not typed: {objlocks.reason or objlocks.status}"
    if not objlocks.kinds:
        return ("not a lock member of any object reached: no file of the workload was open at the object "
                "snapshots (start, every interval, stop), and it is no lock of its threads' task, mm, files, "
                "fs, signal or sighand objects, their IPC namespace or their working directory's file system")
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(objlocks.kinds.items(), key=lambda x: (-x[1], x[0])))
    return ("not a lock member of any object reached from the workload's files "
            f"({kinds}), their inodes, file systems or tasks")

