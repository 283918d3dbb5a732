"""File-lock waits named as locks: POSIX record locks, OFD locks, flock(2)
and leases, by the lock waited for (probes/filelocks.bpf.c: the held lock
at the root of the kernel's blocker tree), its file and range, with the
processes that held it.

"POSIX write lock on <scratch>/db [0–EOF]": kind `file lock`, tier verified
(the kernel's own struct file_lock and inode say what and where); the file's
path comes from the object walk of the workload's open files (by device and
inode number), else from the kernel's dentries as the probe read them (below
the file system's mount point), else the inode is named by its device and
number."""
from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import NamedTuple

from . import naming
from .lockdesc import display_path
from ..lockacc import MAX_FRAMES, LockAcc, heaviest_first
from ..user import unwind, userlocks
from ..user.addrspace import AddressSpace, parse_maps
from lockscope.model.jsondata import format_addr, from_dict, from_list
from lockscope.model.loaderrows import SleepStackCopy
from lockscope.model.probedata import FileLockProbe, FileLockRelease, FileLockWait, RawProbe
from lockscope.model.record import Holder, Lock

KIND = "file lock"
WAIT_CLASS = "file lock wait"     # its sleeps' off-CPU class (locks.toml)
COMPONENT = "file locks"
FL_POSIX, FL_FLOCK, FL_LEASE, FL_OFDLCK = 1, 2, 32, 1024
FLK_BUSY = 1 << 20                # probes/filelocks_types.h: a busy wait (a failed F_SETLK, retried later)
FLK_SLEEP = 1 << 21               # and a sleep of a thread that takes SQLite's lock bytes (sqlitesleeps.bpf.h)
# a sleep is SQLite's busy wait where one of the first frames of its user stack is SQLite's: in its
# library (Debian's libsqlite3, which Python's sqlite3 module uses too), or a function of a static copy
# that kept its symbols (SQLite's own functions: sqlite3*, sqliteDefaultBusyCallback); the busy
# handler sleeps at most a few frames below the library's call of it (SQLite's default one: unixSleep
# -> nanosleep; a program's own handler, called by SQLite, -> usleep -> clock_nanosleep)
SQLITE_FRAMES = 8
SQLITE_LIBRARY = re.compile(r"^libsqlite3[.-]")
SQLITE_FUNCTION = re.compile(r"^(sqlite3|sqliteDefaultBusyCallback)")
LIBC = re.compile(r"^libc[.-]")
# SQLite's unix VFS locks bytes of the database file's lock-byte page, never blocking (F_SETLK):
# PENDING_BYTE 0x40000000, RESERVED_BYTE after it, then the 510 SHARED bytes (os_unix.c, sqliteInt.h);
# in WAL mode, bytes 120-127 of the -shm file (the WAL-index locks)
SQLITE_LOCK_BYTES = (0x40000000, 0x40000000 + 2 + 510 - 1)
SQLITE_WAL_LOCK_BYTES = (120, 127)
F_RDLCK, F_WRLCK = 0, 1
OFFSET_MAX = (1 << 63) - 1
EXPLAIN = {
    "POSIX": "a POSIX record lock (fcntl F_SETLKW, lockf): owned by a process, released when it closes any "
             "descriptor of the file; a waiter sleeps until the range is free",
    "OFD": "an open file description lock (fcntl F_OFD_SETLKW): owned by the open file, shared by the "
           "threads and children that use it",
    "flock": "a whole-file flock(2) lock, owned by the open file",
    "lease": "a file lease (fcntl F_SETLEASE): an opener waits while the holder is told to give it up",
    "SQLite": "SQLite's database file lock (the lock bytes its unix VFS takes with non-blocking F_SETLK): a "
              "connection that finds it held gets SQLITE_BUSY, sleeps in its busy handler and tries again; the "
              "wait runs from the first failed try to the lock taken",
}


def lock_kind(flags: int) -> str:
    """The kind of lock a flc_flags value says: OFD, lease, flock or POSIX."""
    if flags & FL_OFDLCK:
        return "OFD"
    if flags & FL_LEASE:
        return "lease"
    if flags & FL_FLOCK:
        return "flock"
    return "POSIX"


def lock_range(start: int, end: int) -> str:
    """`[0–EOF]`, `[100–199]` (bytes, inclusive, as /proc/locks shows them)."""
    return f"[{start}–{'EOF' if end >= OFFSET_MAX else end}]"


def file_of(raw: RawProbe, dev: int, ino: int, fs_path: str | None = None) -> str:
    """The path of the file (dev, ino) among the objects the probe walked,
    shown relative to the scratch root; else its path below its file
    system's root as the probe read it from the kernel's dentries, under
    that file system's mount point; else its device and inode number."""
    for f in raw.objects.files:
        if f.dev == dev and f.ino == ino and f.path:
            return display_path(f.path, raw.scratch)
    if fs_path and dev in raw.mounts:
        return display_path(os.path.join(raw.mounts[dev], fs_path), raw.scratch)
    return f"inode {ino} on dev {dev >> 20}:{dev & 0xFFFFF}"


def sqlite_lock(w: FileLockWait, path: str) -> str | None:
    """"database" or "WAL-index" where the held range is SQLite's (its lock
    bytes of a database file, or of its -shm file), else None."""
    lo, hi = SQLITE_LOCK_BYTES
    if lo <= w.start <= hi and w.end <= hi:
        return "database"
    lo, hi = SQLITE_WAL_LOCK_BYTES
    if path.endswith("-shm") and lo <= w.start <= hi and w.end <= hi:
        return "WAL-index"
    return None


def lock_name(w: FileLockWait, path: str) -> tuple[str, str]:
    """(name, class) of the held lock a wait was for."""
    kind = lock_kind(w.flags)
    sqlite = sqlite_lock(w, path) if kind in ("POSIX", "OFD") else None
    if sqlite == "database":
        return f"SQLite database lock of {path}", "SQLite database lock"
    if sqlite:
        return f"SQLite WAL-index lock of {path.removesuffix('-shm')}", "SQLite WAL-index lock"
    if kind == "flock":
        mode = "LOCK_EX" if w.type == F_WRLCK else "LOCK_SH"
        return f"flock({mode}) on {path}", "flock"
    if kind == "lease":
        return f"{'write' if w.type == F_WRLCK else 'read'} lease of {path}", "file lease"
    mode = "write" if w.type == F_WRLCK else "read"
    return f"{kind} {mode} lock on {path} {lock_range(w.start, w.end)}", f"{kind} record lock"


def name_file_locks(raw: RawProbe, workers: int, window_ns: int, role_of=None) -> list[Lock]:
    """The file-lock waits of the record's raw section as named locks,
    heaviest first, each with the processes that held it (by process name:
    the same program's holders are one row whatever their pids)."""
    if raw.file_lock_probe is not None and not raw.file_lock_probe.attached:
        return _unnamed(raw, workers, window_ns, role_of)
    groups: dict[str, LockAcc] = {}
    held: dict[str, dict[str, list]] = defaultdict(dict)
    inodes: dict[str, set[int]] = defaultdict(set)
    for w in raw.file_lock_waits or []:
        path = file_of(raw, w.dev, w.ino, w.fs_path)
        name, cls = lock_name(w, path)
        acc = groups.get(name)
        if acc is None:
            acc = groups[name] = LockAcc(name, cls, "verified", KIND, object=path,
                                         component=COMPONENT,
                                         explain=EXPLAIN["SQLite" if cls.startswith("SQLite") else lock_kind(w.flags)],
                                         rule="filelock tracepoints: the held lock's struct file_lock")
        acc.addresses.add(w.inode)        # the file's inode: the time series keeps its waits under it
        inodes[name].add(w.inode)
        acc.add(w.count, w.total_ns, w.max_ns,
                "busy" if w.flags & FLK_BUSY else "write" if w.type == F_WRLCK else "read")
        if w.stack:          # a SQLite thread's busy sleep: its user stack, the busy handler's call
            acc.add_stack(tuple(w.stack[:MAX_FRAMES]), "nanosleep", w.count, w.total_ns, w.count)
        if role_of is not None:
            acc.roles[role_of(w.tid) or f"pid {w.tgid}"] += w.total_ns
        who = w.holder_comm or (f"pid {w.holder_tgid}" if w.holder_tgid > 0 else "")
        if who:
            h = held[name].setdefault(who, [0, 0, set()])
            h[0] += w.count
            h[1] += w.total_ns
            h[2].add(w.holder_tgid)
    locks = heaviest_first([acc.to_lock(workers, window_ns, sqlite_caller, format_addr) for acc in groups.values()])
    for lk in locks:
        _holders(lk, held.get(lk.name, {}),
                 [r for r in raw.file_lock_releases or [] if r.inode in inodes[lk.name] and r.stack])
    return locks


def release_stack(pids: set[int], releases: list[FileLockRelease]) -> list[str]:
    """Where the processes `pids` let go of the file's lock while others
    waited: the stack of their most frequent release site, or []."""
    sites: dict[tuple, int] = defaultdict(int)
    for r in releases:
        if r.tgid in pids:
            sites[tuple(r.stack)] += r.count
    return list(max(sites, key=sites.get)) if sites else []


def _holders(lk: Lock, held: dict[str, list], releases: list[FileLockRelease]) -> None:
    """The processes whose held lock the waits were for, heaviest first: each
    wait's holder is known from its blocker, so they cover every wait with
    one (holders_cover); each with its release site's stack where its
    releases with waiters were copied."""
    total = sum(h[1] for h in held.values())
    lk.holders = [Holder(site=who, stack=release_stack(pids, releases), share=round(ns / total, 4) if total else 0.0, holds=n, hold_ns=ns,
                         who=f"{who} (pid{'s' if len(pids) > 1 else ''} "
                             f"{', '.join(str(p) for p in sorted(pids))})")
                  for who, (n, ns, pids) in sorted(held.items(), key=lambda kv: -kv[1][1])]
    counted = sum(h[0] for h in held.values())
    lk.holders_cover = round(min(1.0, counted / lk.count), 4) if lk.count else None
    if not lk.holders:
        lk.holder_note = "holder not recorded: the kernel had no blocker for these waits"


def _unnamed(raw: RawProbe, workers: int, window_ns: int, role_of) -> list[Lock]:
    """Without the file-lock probe: the sleeps whose kernel stack is a
    file-lock wait, as one lock of tier site (their time is a lock wait's
    all the same, never lost)."""
    acc = LockAcc(f"{WAIT_CLASS} (not named: the file-lock probe did not load)", WAIT_CLASS, "site", KIND,
                  component=COMPONENT, explain="sleeps in the kernel's file-lock wait, by their off-CPU stack")
    for e in raw.offcpu:
        if not e.in_lock_wait and naming.classify_offcpu(raw.frames(e.stack), e.state) == WAIT_CLASS:
            acc.add(e.count, e.total_ns, e.max_ns, "")
            if role_of is not None:
                acc.roles[role_of(e.tid) or f"pid {e.tid}"] += e.total_ns
    return [acc.to_lock(workers, window_ns, lambda k: "")] if acc.count else []


def file_lock_warnings(raw: RawProbe | None) -> list[str]:
    probe = raw.file_lock_probe if raw else None
    if probe is None:
        return []
    if probe.attached:
        c = probe.counters
        lost = c.get("stats_map_full", 0) + c.get("open_map_full", 0)
        out = [f"file-lock waits: {lost} not counted (the probe's maps were full)"] if lost else []
        if c.get("sqlite_sleeps_undecided"):
            out.append(f"{c['sqlite_sleeps_undecided']} sleeps ({c['sqlite_sleeps_undecided_ns'] / 1e6:.1f} ms) of "
                       "threads that take SQLite's locks not told apart from the program's own sleeps (their user "
                       "stacks not copied: the copies' room was spent, or the process's memory maps not read); "
                       "left out of SQLite's lock")
        return out
    return [f"file-lock waits not named by file (their sleeps are one unnamed file-lock wait, by their off-CPU "
            f"stacks): {probe.reason}"]


def _sqlite(frame: str) -> bool:
    """Whether a symbolized frame is SQLite's: in its library, or a
    function of SQLite's by name (a static copy with its symbols)."""
    return bool(SQLITE_LIBRARY.match(userlocks.frame_file(frame))
                or SQLITE_FUNCTION.match(userlocks.frame_function(frame)))


def sqlite_caller(frames: tuple) -> str:
    """The site of a SQLite busy sleep: the program's function that called
    into SQLite (the first frame above SQLite's outermost one below it), ''
    where the stack ends inside SQLite."""
    inside = False
    for f in frames:
        if _sqlite(f):
            inside = True
        elif inside:
            return userlocks.frame_function(f)
    return ""


class Unwound(NamedTuple):
    """A stack copy unwound: its frames from the caller of the C library's
    call (the sleep or the unlock: clock_nanosleep <- usleep, fcntl64), and
    whether one of its first SQLITE_FRAMES frames is SQLite's."""
    frames: list[str]
    sqlite: bool


def release_site(stack: list[str]) -> str:
    """Where a file lock's holder let go, from its release stack: the
    program's function that called into SQLite, where the release was
    SQLite's, else the innermost frame of the program's own code."""
    return sqlite_caller(tuple(stack)) or userlocks.site(stack)


def _unwound(data: dict) -> dict[int, Unwound]:
    """Copy id -> its stack, unwound with the ELF CFI from the copy of the
    thread's registers and stack top in its process's memory maps (a copy
    whose process's maps were not read is left out)."""
    spaces = {int(t): AddressSpace(parse_maps(rows)) for t, rows in (data.get("user_maps") or {}).items()}
    out: dict[int, Unwound] = {}
    for c in from_list(SleepStackCopy, data.get("file_lock_stack_copies") or []):
        space = spaces.get(c.tgid)
        if space is None:
            continue
        frames = [space.symbolize(a) for a in unwind.unwind(space, *c.regs())]
        sqlite = any(_sqlite(f) for f in frames[:SQLITE_FRAMES])
        while len(frames) > 1 and LIBC.match(userlocks.frame_file(frames[0])):
            frames = frames[1:]
        out[c.id] = Unwound(frames, sqlite)
    return out


def _decide_sleeps(waits: list[FileLockWait], stacks: dict[int, Unwound]) \
        -> tuple[list[FileLockWait], dict[str, int]]:
    """The waits with the sleeps of threads that take SQLite's lock bytes
    decided by their user stacks: SQLite's busy waits kept (with their
    stack), the program's own sleeps left out; and what could not be decided
    (no copy: their room spent; the copy not unwound: the process's maps not
    read) as {"sleeps": n, "ns": total}."""
    kept, undecided = [], {"sleeps": 0, "ns": 0}
    for w in waits:
        if not w.flags & FLK_SLEEP:
            kept.append(w)
        elif w.copy in stacks:
            if stacks[w.copy].sqlite:
                w.stack = stacks[w.copy].frames
                kept.append(w)
        else:
            undecided["sleeps"] += w.count
            undecided["ns"] += w.total_ns
    return kept, undecided if undecided["sleeps"] else {}


def resolve(data: dict) -> dict:
    """The RawProbe fields of the probe's file-lock keys (none where the
    loader had no file-lock probe): SQLite's sleeps decided (_decide_sleeps),
    the releases' stacks unwound."""
    if "file_lock_probe" not in data:
        return {}
    probe = from_dict(FileLockProbe, data["file_lock_probe"])
    stacks = _unwound(data)
    waits, undecided = _decide_sleeps(from_list(FileLockWait, data.get("file_lock_waits", [])), stacks)
    if undecided:
        probe.counters["sqlite_sleeps_undecided"] = undecided["sleeps"]
        probe.counters["sqlite_sleeps_undecided_ns"] = undecided["ns"]
    releases = from_list(FileLockRelease, data.get("file_lock_releases") or [])
    for r in releases:
        if r.copy in stacks:
            r.stack = stacks[r.copy].frames
    return {"file_lock_probe": probe, "file_lock_waits": waits, "file_lock_releases": releases}
