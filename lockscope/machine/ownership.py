"""What this lockscope made, written down as it makes it, so that lockscope
removes, unmounts, detaches or kills only that, never what merely looks like
its own by name (a user points --scratch at a disk that holds their data).

Each lockscope process that creates something keeps a ledger,
STATE_DIR/<pid>-<start>.json (written atomically after every change):
its owner (pid, start time in clock ticks since boot, the boot's id, the
command line) and, in the order they were made, the directories it created,
the mounts, the loop devices and the process groups it started. A clean exit
releases everything and removes the ledger. A killed lockscope leaves it:
its watchdog, the next run, or `lockscope doctor --clean` reclaim it once
its owner is dead (the pid gone, or alive with another start time or on
another boot, so a reused pid fools nothing). Reclaiming releases in
reverse order and checks each item first: a mount only while the same
source and type are mounted there, a loop device only while it is backed
by the recorded file, a process group only its members started after it
was recorded and only while its leader (if alive) is the one recorded, a
directory only with rmdir (empty: never a recursive delete).
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from lockscope import atomicio
from lockscope.machine.mounts import detach_loop, loops_backed_by, top_mount, umount

STATE_DIR = Path(os.environ.get("LOCKSCOPE_STATE", "/var/lib/lockscope/runs"))


# ---- who ------------------------------------------------------------------

def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: start time in clock ticks since boot."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Owner:
    pid: int
    start: int
    boot: str

    @classmethod
    def of(cls, pid: int) -> "Owner | None":
        start = start_time(pid)
        return cls(pid, start, boot_id()) if start is not None else None

    def alive(self) -> bool:
        return self.boot == boot_id() and start_time(self.pid) == self.start

    @property
    def ledger(self) -> Path:
        return STATE_DIR / f"{self.pid}-{self.start}.json"


# ---- the ledger of this process -------------------------------------------

@dataclass
class Ledger:
    owner: Owner
    command: list[str]
    items: list[dict] = field(default_factory=list)

    def save(self) -> None:
        if self.items:
            atomicio.write_json(self.owner.ledger, {"owner": asdict(self.owner), "command": self.command,
                                                    "items": self.items})
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.owner.ledger)


_ledger: Ledger | None = None


def _mine() -> Ledger:
    global _ledger
    if _ledger is None or _ledger.owner.pid != os.getpid():     # a forked child keeps no ledger of its parent's
        _ledger = Ledger(Owner.of(os.getpid()), list(sys.argv))
        atexit.register(_at_exit)
    return _ledger


def _at_exit() -> None:
    """A normal exit has released everything: what is gone leaves the ledger
    (and an empty ledger is removed); anything still there stays recorded
    for a reclaim."""
    if _ledger is not None and _ledger.owner.pid == os.getpid():
        _ledger.items = [i for i in _ledger.items if _present(i)]
        with contextlib.suppress(OSError):
            _ledger.save()


def made(kind: str, **what) -> dict:
    """Record something this process just made (kind: dir, mount, loop, group);
    returns the item to pass to `released`."""
    item = {"kind": kind, **what}
    ledger = _mine()
    ledger.items.append(item)
    ledger.save()
    return item


def released(item: dict) -> None:
    """This process released `item` itself."""
    ledger = _mine()
    if item in ledger.items:
        ledger.items.remove(item)
        ledger.save()


# ---- the system as it is now ------------------------------------------------

def group_members(pgid: int, since: int) -> list[int]:
    """Live processes of group `pgid` started at or after `since` (ticks);
    none if the group's leader is alive but is not the one recorded."""
    leader = start_time(pgid)
    if leader is not None and leader != since:
        return []
    out = []
    for d in Path("/proc").iterdir():
        fields = _stat(d.name) if d.name.isdigit() else None
        if fields and fields[0] != "Z" and int(fields[2]) == pgid and int(fields[19]) >= since:
            out.append(int(d.name))
    return out


def _present(item: dict) -> bool:
    """Whether `item` is still there as it was made."""
    kind = item["kind"]
    if kind == "mount":
        return top_mount(item["path"]) == (item["source"], item["fstype"])
    if kind == "loop":
        return bool(loops_backed_by(item["backing"]))
    if kind == "group":
        return bool(group_members(item["pgid"], item["start"]))
    if kind == "dir":
        return os.path.isdir(item["path"]) and not os.path.ismount(item["path"])
    return False


def describe(item: dict) -> str:
    kind = item["kind"]
    if kind == "mount":
        return f"{item['path']} ({item['fstype']})"
    if kind == "loop":
        return f"{', '.join(loops_backed_by(item['backing'])) or 'loop device'} ({item['backing']})"
    if kind == "group":
        return f"process group {item['pgid']}"
    return item["path"]


# ---- releasing ---------------------------------------------------------------

def kill_group(pgid: int, since: int) -> bool:
    for _ in range(40):
        members = group_members(pgid, since)
        if not members:
            return True
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    return not group_members(pgid, since)


DONE, ABSENT, FAILED = "done", "absent", "failed"


def release(item: dict) -> tuple[str, str]:
    """Release one item of a dead run's ledger after checking it is still
    what was made: (DONE, what was done), (ABSENT, "") when it is not there
    (gone already, not made yet, or no longer ours), or (FAILED, why)."""
    kind, what = item["kind"], describe(item)
    if not _present(item):
        return ABSENT, ""
    if kind == "group":
        ok, did = kill_group(item["pgid"], item["start"]), f"killed {what}"
    elif kind == "mount":
        how = umount(item["path"])
        ok, did = bool(how), f"{how} {what}"
    elif kind == "loop":
        ok, did = all([detach_loop(dev) for dev in loops_backed_by(item["backing"])]), f"detached {what}"
    else:
        try:
            os.rmdir(item["path"])
            ok, did = True, f"removed {what}"
        except OSError as e:
            if e.errno == errno.EBUSY:           # a mount of its own still on it: next time
                return FAILED, f"could not remove {what} (busy)"
            # not empty: something there was not made by lockscope's run; left as it is
            ok, did = True, f"left {what}: {e.strerror.lower()}"
    return (DONE, did) if ok else (FAILED, f"could not release {what}")


# ---- ledgers of other processes ---------------------------------------------

@dataclass
class RunState:
    owner: Owner
    command: list[str]
    items: list[dict]
    path: Path

    @property
    def alive(self) -> bool:
        return self.owner.alive()


def ledgers() -> list[RunState]:
    """Every ledger (this process's own included), oldest first; an
    unreadable one is skipped (nothing is released on a guess)."""
    out = []
    for path in sorted(STATE_DIR.glob("*.json"), key=lambda p: p.stat().st_mtime if p.exists() else 0):
        try:
            d = json.loads(path.read_text())
            owner = Owner(**d["owner"])
            out.append(RunState(owner, list(d.get("command", [])), list(d["items"]), path))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


@contextlib.contextmanager
def _reclaim_lock() -> Iterator[None]:
    """One reclaimer at a time (a watchdog and the next run may both try)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(STATE_DIR.parent / ".reclaim.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def reclaim_run(state: RunState, keep_absent: bool = False) -> list[str]:
    """Release what a dead run recorded, newest first; items that could not
    be released (and, with `keep_absent`, those not there yet: a mount or
    losetup the dead run had started may still complete) stay in its ledger
    for the next pass."""
    done, kept = [], []
    for item in reversed(state.items):
        status, what = release(item)
        if what:
            done.append(what)
        if status == FAILED or (status == ABSENT and keep_absent):
            kept.append(item)
    if kept:
        atomicio.write_json(state.path, {"owner": asdict(state.owner), "command": state.command,
                                         "items": list(reversed(kept))})
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(state.path)
    return done


def reclaim(owner: Owner | None = None, settle: float = 0.0) -> list[str]:
    """Release what dead lockscope runs left (only `owner`'s, if given);
    never anything of a run whose owner is alive. With `settle` (the
    watchdog, just after its lockscope died), pass again for that many
    seconds: a command the dead lockscope started (mount, losetup) may
    finish after the first pass. Returns what was done."""
    if not STATE_DIR.is_dir():
        return []
    done: list[str] = []
    deadline = time.monotonic() + settle
    while True:
        last = time.monotonic() >= deadline
        with _reclaim_lock():
            for state in ledgers():
                if state.alive or (owner is not None and state.owner != owner):
                    continue
                done += [f"{what} (run of pid {state.owner.pid})"
                         for what in reclaim_run(state, keep_absent=not last)]
        if last:
            return done
        time.sleep(0.1)


def survey() -> dict:
    """For doctor: what live runs hold (in use, never touched) and what dead
    runs left (released by `reclaim`)."""
    in_use, left = [], {"mounts": [], "loop_devices": [], "directories": [], "process_groups": []}
    key = {"mount": "mounts", "loop": "loop_devices", "dir": "directories", "group": "process_groups"}
    for state in ledgers():
        present = [i for i in state.items if _present(i)]
        if state.alive:
            in_use.append({"pid": state.owner.pid, "command": " ".join(state.command),
                           "items": [f"{i['kind']}: {describe(i)}" for i in present]})
        else:
            for i in present:
                left[key[i["kind"]]].append(describe(i))
    return {"in_use": in_use, "leftovers": left}


def live_pids() -> set[int]:
    """Processes of live runs: their owners and the members of their groups."""
    pids = set()
    for state in ledgers():
        if state.alive:
            pids.add(state.owner.pid)
            for i in state.items:
                if i["kind"] == "group":
                    pids.update(group_members(i["pgid"], i["start"]))
    return pids
