"""Application lock names from USDT probes (probes/usdt.bpf.c).

The probe table (usdt.toml) is data: per program, the binaries (globs of the
executable's path) and the provider; per kind of lock wait, the start and
done probes, which argument names the lock (a string, or a number named by a
table such as PostgreSQL's lock tag types), which gives the mode, and the
lock kind. Here:

- `Table.probes_for(exe)`: the table's probes for an executable, with the
  attach cookie that tells usdt.bpf.c which table entry a probe is and which
  arguments to read (`cookie`);
- `resolve(data)`: the probe's waits as the record's raw form, each with its
  lock named from the table (while the table is at hand: records stay
  readable if the table changes);
- `name_usdt(raw, workers, window_ns)`: those waits as `Lock`s, tier
  verified (the program itself said which lock it waits for).

Which binaries: the executables of the processes lockscope tracks
(/proc/PID/exe, when tracked and again at the window's start and when
`attach` sees a new child); the probes are attached to the binary for every
process running it (pid -1, so backends forked later are covered) and
usdt.bpf.c counts only the tracked processes.
"""
from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from . import jvmframes, userlocks
from ..lockacc import LockAcc, heaviest_first
from lockscope import tables
from lockscope.model.jsondata import from_list
from lockscope.model.loaderrows import UsdtRow
from lockscope.model.probedata import JvmProcess, UsdtAttached, UsdtProbe, UsdtStack, UsdtWait, heaviest
from lockscope.model.record import Lock
from lockscope.proberows import constant

TABLE_FILE = Path(__file__).with_name("usdt.toml")
MAX_ENTRIES = 255            # the cookie's entry byte
NESTED_ENTRIES = constant("USDT_ENTRIES")
MAX_ARG = 12                 # USDT probes have at most 12 arguments
MAX_FUNC_ARG = 5             # an exported function's arguments usdt.bpf.c reads (registers)
MAX_VALUE = 31               # `only`: the cookie's 32-bit mask of name values
MAX_SUFFIXES = constant("USDT_SUFFIXES")
MAX_NAME = constant("USDT_NAME_LEN") - 1   # less its NUL
MAX_STACKS = 8               # call paths kept per wait in the record, heaviest first


@dataclass
class ProbeSpec:
    """One kind of lock wait of a program: from `start` to `done`."""
    entry: int                   # index over the whole table (the cookie's low byte)
    program: str
    component: str
    provider: str
    start: str
    done: str
    kind: str
    prefix: str = ""
    name_arg: int = 0            # 1-based; 0: the lock is named by prefix and kind alone
    name_string: bool = False
    mode_arg: int = 0
    names: dict[int, str] = field(default_factory=dict)
    modes: dict[int, str] = field(default_factory=dict)
    explain: str = ""
    sleeps_in: list[str] = field(default_factory=list)   # functions whose futex sleeps are this wait's
    # "usdt": start and done are USDT probes of `provider`; "function": exported
    # functions, probed at entry (MariaDB's thd_wait_begin/thd_wait_end)
    attach: str = "usdt"
    only: list[int] = field(default_factory=list)        # the name values that are lock waits ([]: all)
    name_len_arg: int = 0        # 1-based: the name string's length (a JVM's class name has no NUL)
    name_dots: bool = False      # "/" in the name string read as "." (a JVM's internal class names)
    # "hotspot_monitor": the name argument is a HotSpot ObjectMonitor *, named by
    # its object's class; "hotspot_park_blocker": the calling Java thread's park
    # blocker's class (usdt.bpf.c, with the JVM's layout from probes/jvmmon.c)
    name_from: str = ""
    name_suffixes: list[str] = field(default_factory=list)   # only names ending so are waits ([]: all)
    done_at_return: bool = False # the wait is done when `start` returns (done = "return")
    label: str = ""              # the start probe as the record names it, where not its symbol

    @property
    def cookie(self) -> int:
        """usdt.bpf.c's attach cookie: entry, name argument and type, mode
        argument, and the mask of the name values that are lock waits."""
        mask = sum(1 << v for v in self.only)
        c = constant
        return (self.entry | self.name_arg << c("USDT_COOKIE_NAME_ARG_SHIFT")
                | (c("USDT_COOKIE_NAME_STRING") if self.name_string else 0)
                | (c("USDT_COOKIE_HOTSPOT_MONITOR") if self.name_from == "hotspot_monitor" else 0)
                | (c("USDT_COOKIE_PARK_BLOCKER") if self.name_from == "hotspot_park_blocker" else 0)
                | (c("USDT_COOKIE_SUFFIXES") if self.name_suffixes else 0)
                | self.mode_arg << c("USDT_COOKIE_MODE_ARG_SHIFT") | self.name_len_arg << c("USDT_COOKIE_LEN_ARG_SHIFT")
                | mask << c("USDT_COOKIE_VALUES_SHIFT"))

    @property
    def probe_provider(self) -> str:
        """The provider lockscope-probe's usdt command takes: "-" for a function."""
        return "-" if self.attach == "function" else self.provider

    @property
    def probe(self) -> str:
        """The start probe as the record names it."""
        if self.label:
            return self.label
        return f"{self.start}()" if self.attach == "function" else f"{self.provider}:{self.start}"

    @property
    def attachments(self) -> list[tuple[str, str, int]]:
        """(what, names, cookie) of the usdt commands that attach this entry:
        its start, and its done probe or the return of its start function."""
        done = ("return", self.start, self.entry) if self.done_at_return else ("done", self.done, self.entry)
        return [("start", self.start, self.cookie), done]

    def lock_name(self, value: int, name: str) -> str:
        if not self.name_arg and not self.name_from:
            return self.prefix.strip() or self.kind
        if self.name_string or self.name_from:
            return self.prefix + ((name.replace("/", ".") if self.name_dots else name) or "[unreadable name]")
        return self.prefix + self.names.get(value, str(value))

    def mode_name(self, mode: int) -> str:
        return self.modes.get(mode, str(mode)) if self.mode_arg else ""


@dataclass
class Program:
    name: str
    component: str
    provider: str
    binaries: list[str]
    probes: list[ProbeSpec]
    # its lock implementation's release and wake-up functions: a release site lies past them
    release_frames: list[str] = field(default_factory=list)
    if_silent: str = ""          # said when its probes were attached and none fired

    def matches(self, exe: str) -> bool:
        return any(fnmatch.fnmatchcase(exe, g) for g in self.binaries)


@dataclass(frozen=True)
class _ProbeRow:
    """[[program.probe]]: a ProbeSpec as the table writes it."""
    start: str | list[str]       # a list: the function's names in the versions probed, tried in turn
    done: str                    # "return": when `start` (a function) returns
    kind: str
    provider: str | None = None  # None: the program's
    prefix: str = ""
    name_arg: int = 0
    name_string: bool = False
    mode_arg: int = 0
    names: dict[int, str] = field(default_factory=dict)
    modes: dict[int, str] = field(default_factory=dict)
    explain: str = ""
    sleeps_in: list[str] = field(default_factory=list)
    only: list[int] = field(default_factory=list)
    name_len_arg: int = 0
    name_dots: bool = False
    name_from: str = ""
    name_suffixes: list[str] = field(default_factory=list)
    label: str = ""

    @property
    def starts(self) -> str:
        """`start` as lockscope-probe's usdt command takes it: names joined by commas."""
        return self.start if isinstance(self.start, str) else ",".join(self.start)

    def check(self, attach: str) -> None:
        """ValueError where it cannot be probed as the program's `attach` says."""
        if not (isinstance(self.start, str) or self.start and all(isinstance(x, str) for x in self.start)):
            raise ValueError("start is a probe or function name, or a list of function names")
        top = MAX_FUNC_ARG if attach == "function" else MAX_ARG
        for arg in ("name_arg", "mode_arg", "name_len_arg"):
            if not 0 <= getattr(self, arg) <= top:
                raise ValueError(f"{arg} must be 1..{top}")
        if self.name_from not in ("", "hotspot_monitor", "hotspot_park_blocker") or \
                (self.name_from and attach != "function") or \
                (self.name_from == "hotspot_monitor" and not self.name_arg):
            raise ValueError(f'name_from is "hotspot_monitor" (an ObjectMonitor * argument, name_arg, of a '
                             f'function) or "hotspot_park_blocker", not {self.name_from!r}')
        if len(self.name_suffixes) > MAX_SUFFIXES or \
                any(not x or len(x) > MAX_NAME or " " in x for x in self.name_suffixes):
            raise ValueError(f"name_suffixes: at most {MAX_SUFFIXES}, each 1..{MAX_NAME} characters without spaces")
        if self.done == "return" and attach != "function":
            raise ValueError('done = "return" needs attach = "function"')
        if any(not 0 <= v <= MAX_VALUE for v in self.only) or (self.only and self.name_string):
            raise ValueError(f"only lists numeric name values 0..{MAX_VALUE}")


@dataclass(frozen=True)
class _ProgramRow:
    """[[program]]: a Program as the table writes it."""
    name: str
    binaries: list[str]
    component: str | None = None     # None: the name
    provider: str = ""
    attach: str = "usdt"             # "function": start and done are exported functions
    probe: list[_ProbeRow] = field(default_factory=list)
    release_frames: list[str] = field(default_factory=list)
    if_silent: str = ""

    def __post_init__(self):
        if self.attach not in ("usdt", "function"):
            raise ValueError(f"attach must be usdt or function, not {self.attach!r}")
        for j, q in enumerate(self.probe):
            try:
                q.check(self.attach)
            except ValueError as e:
                raise ValueError(f"{tables.where('program.probe', j, q.starts)}: {e}") from None


@dataclass(frozen=True)
class _File:
    """usdt.toml."""
    program: list[_ProgramRow] = field(default_factory=list)


@dataclass
class Table:
    programs: list[Program]

    @classmethod
    def load(cls, path: Path = TABLE_FILE) -> "Table":
        programs, entry = [], 0
        for p in tables.load(path, _File).program:
            component = p.name if p.component is None else p.component
            specs = []
            for q in p.probe:
                specs.append(ProbeSpec(
                    entry=entry, program=p.name, component=component,
                    provider=p.provider if q.provider is None else q.provider, start=q.starts, done=q.done,
                    kind=q.kind, prefix=q.prefix, name_arg=q.name_arg, name_string=q.name_string,
                    mode_arg=q.mode_arg, names=q.names, modes=q.modes, explain=q.explain,
                    sleeps_in=list(q.sleeps_in), attach=p.attach, only=list(q.only), name_len_arg=q.name_len_arg,
                    name_dots=q.name_dots, name_from=q.name_from, done_at_return=q.done == "return",
                    label=q.label, name_suffixes=list(q.name_suffixes)))
                entry += 1
            programs.append(Program(p.name, component, p.provider, list(p.binaries), specs,
                                    list(p.release_frames), p.if_silent))
        for limit, why in ((MAX_ENTRIES, ""), (NESTED_ENTRIES, ": usdt.bpf.c finds the wait a thread waits in "
                           "again after a nested one among that many (lockscope/proberows.toml USDT_ENTRIES)")):
            if entry > limit:
                raise tables.error(path, "[[program.probe]]", f"more than {limit} probes{why}")
        return cls(programs)

    def probes_for(self, exe: str) -> list[ProbeSpec]:
        return [s for p in self.programs if p.matches(exe) for s in p.probes]

    def release_frames(self, entry: int) -> frozenset[str]:
        """The release and wake-up functions of the program of probe `entry`."""
        return frozenset(f for p in self.programs if any(s.entry == entry for s in p.probes)
                         for f in p.release_frames)

    def entry(self, i: int) -> Optional[ProbeSpec]:
        for p in self.programs:
            for s in p.probes:
                if s.entry == i:
                    return s
        return None


@functools.lru_cache(maxsize=1)
def default() -> Table:
    return Table.load()


def mapped_code(pid: int) -> list[str]:
    """The files a process maps executable (its executable and shared
    libraries: a JVM's probes are in libjvm.so, not in bin/java), or []."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/") and parts[5] not in out \
                and not parts[5].endswith(" (deleted)"):
            out.append(parts[5])
    return out


def executable(pid: int) -> Optional[str]:
    """The path of a process's executable, or None (gone, kernel thread, deleted)."""
    try:
        exe = Path(f"/proc/{pid}/exe").readlink()
    except OSError:
        return None
    s = str(exe)
    return None if s.endswith(" (deleted)") else s


# ---- the record's raw form ---------------------------------------------------

def resolve(data: dict, table: Table | None = None) -> dict[str, Any]:
    """The "usdt_probe" and "usdt" parts of the probe's data event, as kept
    in the record's raw section (RawProbe.usdt_probe, RawProbe.usdt)."""
    if data.get("usdt_probe") is None:
        return {}
    probe = data["usdt_probe"]
    out: dict[str, Any] = {"usdt_probe": UsdtProbe(loaded=bool(probe.get("loaded")), reason=probe.get("reason"),
                                                   attached=from_list(UsdtAttached, probe.get("attached", [])),
                                                   jvms=from_list(JvmProcess, probe.get("jvms") or []))}
    table = table or default()
    waits: dict[tuple, UsdtWait] = {}
    objects: dict[tuple, set] = {}
    frames = jvmframes.resolve_stacks(data)
    paths: dict[tuple, dict[tuple, UsdtStack]] = {}
    for row in from_list(UsdtRow, data.get("usdt", [])):
        spec = table.entry(row.entry)
        if spec is None:
            continue
        lock, mode = spec.lock_name(row.value, row.name), spec.mode_name(row.mode)
        key = (row.tgid, row.entry, lock, mode)
        w = waits.get(key)
        if w is None:
            w = waits[key] = UsdtWait(tgid=row.tgid, entry=row.entry, lock=lock, kind=spec.kind,
                                      component=spec.component, mode=mode, probe=spec.probe,
                                      explain=spec.explain or None)
        w.count += row.count
        w.total_ns += row.total_ns
        w.max_ns = max(w.max_ns, row.max_ns)
        if spec.name_from == "hotspot_monitor":   # the value is the ObjectMonitor: its instances
            objects.setdefault(key, set()).add(row.value)
            w.instances = len(objects[key])
        if frames.get(row.stack):      # a call path with frames named
            fr = frames[row.stack]
            st = paths.setdefault(key, {}).setdefault(tuple(fr), UsdtStack(frames=fr))
            st.count += row.count
            st.total_ns += row.total_ns
    for key, by_path in paths.items():
        waits[key].stacks = heaviest(list(by_path.values()), "total_ns")[:MAX_STACKS]
    out["usdt"] = heaviest(list(waits.values()), "total_ns")
    return out


def name_usdt(raw, workers: int, window_ns: int) -> list[Lock]:
    """The USDT waits of a record's raw section as named locks, heaviest first."""
    groups: dict[str, LockAcc] = {}
    procs: dict[str, set] = {}
    instances: dict[str, int] = {}
    for w in raw.usdt or []:
        acc = groups.get(w.lock)
        if acc is None:
            acc = groups[w.lock] = LockAcc(
                w.lock, w.lock, "verified", w.kind, component=w.component,
                explain=w.explain or f"{w.component} {w.kind}: named by the program's probe {w.probe}",
                rule=f"usdt {w.probe}")
        acc.add(w.count, w.total_ns, w.max_ns, w.mode)
        for st in w.stacks or []:
            acc.add_stack(tuple(st.frames), None, st.count, st.total_ns, st.count)
        procs.setdefault(w.lock, set()).add(w.tgid)
        instances[w.lock] = instances.get(w.lock, 0) + (w.instances or 0)
    locks = []
    for name, acc in groups.items():
        lk = acc.to_lock(workers, window_ns, lambda k: jvmframes.site(list(k)))
        lk.instances = instances.get(name) or 1
        lk.roles = {}
        locks.append(lk)
    return heaviest_first(locks)


def folded_futexes(raw, table: Table | None = None):
    """The futex waits that are the sleep of a USDT-named wait, as a
    predicate for userlocks.name_futexes: in a process with waits of a table
    entry, a futex wait whose user stack passes through one of the entry's
    `sleeps_in` functions (PostgreSQL: an LWLock waiter sleeps on its
    semaphore in LWLockAcquire). None when no USDT wait was recorded."""
    if not getattr(raw, "usdt", None):
        return None
    table = table or default()
    funcs: dict[int, set[str]] = {}
    for w in raw.usdt:
        spec = table.entry(w.entry)
        if spec and spec.sleeps_in:
            funcs.setdefault(w.tgid, set()).update(spec.sleeps_in)
    if not funcs:
        return None

    def folded(e, frames: list[str]) -> bool:
        names = funcs.get(e.tgid)
        return bool(names) and any(userlocks.frame_function(f) in names for f in frames)
    return folded


def usdt_warnings(raw, table: Table | None = None) -> list[str]:
    """The probe not loaded; a program whose probes were attached but none
    of whose waits, nor any wait of its kinds, was seen, with its table's
    `if_silent` (a JVM fires its monitor probes only with
    -XX:+DTraceMonitorProbes, and names them otherwise only where EnterI's
    entry names them); a JVM whose monitors could not be named at EnterI."""
    probe = getattr(raw, "usdt_probe", None) if raw else None
    if probe and not probe.loaded:
        return [f"application lock names (USDT) not measured: {probe.reason or 'the USDT probe did not load'}"]
    if not probe:
        return []
    table = table or default()
    waits = getattr(raw, "usdt", None) or []
    seen, kinds = {w.entry for w in waits}, {w.kind for w in waits}
    out = []
    # the kinds named at a function of a JVM that was looked at (EnterI's Java
    # monitors): a silent program of these kinds needs no flag (or the JVM's
    # own warning below says why they were not named)
    named_kinds = {s.kind for p in table.programs for s in p.probes if s.name_from == "hotspot_monitor"} \
        if probe.jvms else set()    # None in records from before JVMs were looked at
    for p in table.programs:
        attached = any(a.probe == "start" and any(a.name == s.start and p.matches(a.path) for s in p.probes)
                       for a in probe.attached)
        if p.if_silent and attached and not seen & {s.entry for s in p.probes} \
                and not (kinds | named_kinds) & {s.kind for s in p.probes}:
            out.append(f"{p.name}: its lock-wait probes were attached but none fired: {p.if_silent}")
    for j in probe.jvms or []:
        if not j.named and not j.by_probes:
            out.append(f"Java monitors of process {j.tgid} not named by class: {j.reason or 'not read'} "
                       f"({j.file}); its monitors' waits show as pthread_cond @ os::PlatformEvent::park")
        elif not j.parks_named:
            out.append(f"java.util.concurrent locks of process {j.tgid} not named by class: its thread list or "
                       f"java.lang.Thread's parkBlocker offset was not found ({j.file}); their waits show as "
                       f"pthread_cond @ Parker::park")
    return out
