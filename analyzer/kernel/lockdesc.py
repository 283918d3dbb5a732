"""How a kernel lock and the object it lives in are described: the lock's
family and mode from the contention tracepoint's flags, a path shown
relative to the scratch root, and what a file's lock fields are named
after. Shared by naming.py and objlocks.py."""
from __future__ import annotations

import os
import stat

from lockscope.model.probedata import FileObject

LCB_F_SPIN, LCB_F_READ, LCB_F_WRITE, LCB_F_RT, LCB_F_PERCPU, LCB_F_MUTEX = 1, 2, 4, 8, 16, 32
LS_F_SLEPT = 1 << 16
SCRATCH = "<scratch>"


def lock_kind(flags: int) -> tuple[str, str]:
    """(family, mode) from lock:contention_begin flags."""
    f = flags & 0xFFFF
    if f & LCB_F_MUTEX:
        return "mutex", "sleep" if flags & LS_F_SLEPT else "spin"
    if f & LCB_F_RT:
        return "rtmutex", ""
    if f & LCB_F_PERCPU:
        return "percpu-rwsem", "write" if f & LCB_F_WRITE else "read"
    if f & LCB_F_SPIN:
        if f & LCB_F_READ:
            return "rwlock", "read"
        if f & LCB_F_WRITE:
            return "rwlock", "write"
        return "spinlock", ""
    if f & LCB_F_READ:
        return "rwsem", "read"
    if f & LCB_F_WRITE:
        return "rwsem", "write"
    if f == 0:
        return "semaphore", ""
    return f"unknown(0x{f:x})", ""


def display_path(path: str, scratch: str | None) -> str:
    if scratch and (path == scratch or path.startswith(scratch.rstrip("/") + "/")):
        return SCRATCH + path[len(scratch.rstrip("/")):]
    return path


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"), (stat.S_ISFIFO, "pipe"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "char device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISLNK, "symlink")):
        if test(mode):
            return name
    return "inode"


def fs_label(fstype: str, dev: int, mounts: dict[int, str], scratch: str | None) -> str:
    """A file system as named: `tmpfs at /dev/shm` (its mount point, from
    the record's mounts), or by its device where it is not mounted there."""
    where = mounts.get(dev)
    return f"{fstype} at {display_path(where, scratch)}" if where else f"{fstype} (dev {dev >> 20}:{dev & 0xFFFFF})"


def file_names(f: FileObject, mounts: dict[int, str], scratch: str | None) -> dict[str, tuple[str, str] | None]:
    """What a file's lock fields are named after (lockfields.NAMED): the
    object and the suffix of the name; None where the record cannot say."""
    path, fstype = f.path, f.fstype
    sb = fs_label(fstype, f.dev, mounts, scratch)
    shown = display_path(path, scratch)
    parent = display_path(os.path.dirname(path.rstrip("/")) or "/", scratch) if path.startswith("/") else None
    return {"file": (shown, f" ({fstype}, {_file_type(f.mode)})"), "file_name": (shown, ""),
            "parent_dir": (parent, f" ({fstype}, dir)") if parent else None,
            "parent_dir_name": (parent, "") if parent else None, "fs": (sb, "")}
