"""The processes `lockscope attach` profiles, found from /proc and cgroup v2
without touching them (no ptrace, no signal): by pid, by comm, or the
processes of a cgroup and its descendants. Each process is kept with its
start time, so that a pid reused after the target exited is not taken for
it."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lockscope.errors import UsageError

PROC = Path("/proc")
SYSTEM_WIDE = "system-wide"
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass
class Proc:
    tgid: int
    comm: str
    start: int                   # /proc/PID/stat field 22: start time in clock ticks since boot
    threads: int


@dataclass
class Targets:
    how: str                     # pid | comm | cgroup | system-wide
    value: str                   # what was asked: "123,456", a comm, a cgroup directory ("all": system-wide)
    procs: list[Proc] = field(default_factory=list)

    @property
    def threads(self) -> int:
        return sum(p.threads for p in self.procs)

    @property
    def label(self) -> str:
        """A default workload name: the comm of a single target, else what
        was asked for."""
        if self.how == "cgroup":
            return Path(self.value).name or "cgroup"
        if self.how == SYSTEM_WIDE:
            return "system"
        comms = sorted({p.comm for p in self.procs})
        return comms[0] if len(comms) == 1 else f"{self.how}-{self.value}"


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first)."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _comm(pid: int) -> str | None:
    try:
        return (PROC / str(pid) / "comm").read_text().rstrip("\n")
    except OSError:
        return None


def _tgid(pid: int) -> int | None:
    """The process a pid belongs to (a thread id gives its process)."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def process(pid: int) -> Proc | None:
    """A live process (not a zombie) by pid or by the id of one of its threads."""
    tgid = _tgid(pid)
    fields = _stat(tgid) if tgid else None
    comm = _comm(tgid) if tgid else None
    if not fields or comm is None or fields[0] in ("Z", "X"):
        return None
    try:
        threads = len(os.listdir(PROC / str(tgid) / "task"))
    except OSError:
        return None
    return Proc(tgid, comm, int(fields[19]), threads)


def alive(p: Proc) -> bool:
    """The process is still running (a zombie has exited; a new process
    with its pid started later)."""
    fields = _stat(p.tgid)
    return bool(fields) and fields[0] not in ("Z", "X") and int(fields[19]) == p.start


def children(tgids: set[int]) -> list[Proc]:
    """Live processes whose parent is one of `tgids`."""
    out = []
    for d in PROC.iterdir():
        if not d.name.isdigit():
            continue
        fields = _stat(int(d.name))
        if fields and fields[0] not in ("Z", "X") and int(fields[1]) in tgids:
            p = process(int(d.name))
            if p:
                out.append(p)
    return out


def descendants(roots: set[int]) -> set[int]:
    """`roots` and their live descendants (tgids), from one pass over /proc
    (a pass per generation, and a Proc read per child, cost a server that
    forks a process per connection most of lockscope's own CPU in its
    window)."""
    kids: dict[int, list[int]] = {}
    for d in PROC.iterdir():
        if not d.name.isdigit():
            continue
        fields = _stat(int(d.name))
        if fields and fields[0] not in ("Z", "X"):
            kids.setdefault(int(fields[1]), []).append(int(d.name))
    out, level = set(roots), set(roots)
    while level:
        level = {c for p in level for c in kids.get(p, ())} - out
        out |= level
    return out


def _all_pids() -> list[int]:
    return sorted(int(d.name) for d in PROC.iterdir() if d.name.isdigit())


def by_pids(text: str) -> Targets:
    try:
        pids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--pid {text!r}: expected process ids, comma-separated (e.g. 1234,5678)") from None
    if not pids or any(p <= 0 for p in pids):
        raise UsageError(f"--pid {text!r}: expected process ids, comma-separated (e.g. 1234,5678)")
    procs: dict[int, Proc] = {}
    for pid in pids:
        p = process(pid)
        if p is None:
            raise UsageError(f"--pid: no such process {pid}")
        procs.setdefault(p.tgid, p)
    return Targets("pid", ",".join(map(str, pids)), list(procs.values()))


def by_comm(name: str) -> Targets:
    me = os.getpid()
    procs = [p for pid in _all_pids() if pid != me and _comm(pid) == name and (p := process(pid)) and p.tgid == pid]
    if not procs:
        raise UsageError(f"--comm: no process named {name!r} (the name in /proc/PID/comm, at most 15 characters)")
    return Targets("comm", name, procs)


def cgroup2_root() -> Path:
    """Where cgroup v2 is mounted: /sys/fs/cgroup, or /sys/fs/cgroup/unified
    on a hybrid (v1 and v2) machine."""
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return Path(parts[1].replace("\\040", " "))
    except OSError:
        pass
    return CGROUP_ROOT


UNIT_SUFFIXES = (".service", ".scope", ".slice")
UNIT_SEARCH_DEPTH = 6            # system.slice/foo.service, user.slice/user-1000.slice/user@1000.service/app.slice/...


def unit_cgroups(name: str) -> list[Path]:
    """The cgroup v2 directories named `name` (a systemd unit: foo.service),
    at most UNIT_SEARCH_DEPTH levels down."""
    root = cgroup2_root()
    found = []
    for d, dirs, _ in os.walk(root):
        depth = len(Path(d).relative_to(root).parts)
        if depth >= UNIT_SEARCH_DEPTH:
            dirs.clear()
        found += [Path(d) / x for x in dirs if x == name]
    return sorted(found)


def is_unit_name(text: str) -> bool:
    """A bare systemd unit name (foo.service), not a path."""
    return "/" not in text and text.endswith(UNIT_SUFFIXES)


def cgroup_path(text: str) -> Path:
    """--cgroup's directory: absolute; relative to cgroup v2's mount; or a
    bare systemd unit name (postgresql.service) found below that mount."""
    path = Path(text)
    if path.is_absolute():
        return path
    if is_unit_name(text) and not (cgroup2_root() / text).exists():
        units = unit_cgroups(text)
        if len(units) > 1:
            raise UsageError(f"--cgroup: {len(units)} cgroups are named {text}: "
                             f"{', '.join(map(str, units[:4]))}; give the path of one")
        if units:
            return units[0]
    return cgroup2_root() / path


def by_cgroup(text: str) -> Targets:
    path = cgroup_path(text)
    # cgroup.controllers is cgroup v2's alone (v1 directories have cgroup.procs too)
    if not (path / "cgroup.procs").is_file() or not (path / "cgroup.controllers").is_file():
        if is_unit_name(text):
            raise UsageError(f"--cgroup: no cgroup named {text} below {cgroup2_root()} (a systemd unit that "
                             "is not running has none: `systemctl status` says where a running one is)")
        raise UsageError(f"--cgroup: {text} is not a cgroup v2 directory (cgroup v2 is mounted at "
                         f"{cgroup2_root()})")
    pids: set[int] = set()
    for d, _, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                pids.update(int(x) for x in (Path(d) / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                continue           # a child cgroup removed while walking
    procs = [p for pid in sorted(pids) if (p := process(pid))]
    if not procs:
        raise UsageError(f"--cgroup: {path} and the cgroups below it have no process")
    return Targets("cgroup", str(path), procs)


def system_wide() -> Targets:
    """Every task on the machine (the probe's --system-wide): no process to
    track; the idle tasks and kernel threads are roles that are never the
    work (analyzer/roles.py)."""
    return Targets(SYSTEM_WIDE, "all")


def resolve(pid: str | None, comm: str | None, cgroup: str | None) -> Targets:
    given = [(k, v) for k, v in (("pid", pid), ("comm", comm), ("cgroup", cgroup)) if v is not None]
    if len(given) != 1:
        raise UsageError("attach needs exactly one of --pid, --comm or --cgroup")
    how, value = given[0]
    return {"pid": by_pids, "comm": by_comm, "cgroup": by_cgroup}[how](value)


TARGET_SYNTAX = "pid:P[,P...], comm:NAME or cgroup:PATH"


def parse_spec(text: str) -> tuple[str, str]:
    """`--target` of run and sweep: 'pid:123,456', 'comm:postgres' or
    'cgroup:system.slice/foo.service' -> (how, value)."""
    how, sep, value = text.partition(":")
    if not sep or how not in ("pid", "comm", "cgroup") or not value:
        raise UsageError(f"--target {text!r}: expected {TARGET_SYNTAX}")
    return how, value


def from_spec(text: str) -> Targets:
    """The processes a `--target` names, now (no such process: exit 2)."""
    how, value = parse_spec(text)
    return resolve(*(value if how == k else None for k in ("pid", "comm", "cgroup")))


def tree(root: int, known: set[int] | None = None) -> set[int]:
    """`root` and its live descendants (tgids), added to `known`."""
    return descendants(set(known or ()) | {root})
