"""The run record: one JSON document per measured point, the single schema
every command reads and writes (documented in README.md, "Run record").

Records are dataclasses; `to_dict`/`from_dict` (jsondata.py) convert them to
and from JSON-ready dicts. A field whose JSON key differs from its Python name
says so in its metadata (`class` is a keyword); keys written only sometimes
are `omit_none`. The probe's raw data is typed in probedata.py. Files are
written atomically.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from lockscope import atomicio
from lockscope.model.jsondata import from_dict, optional, to_dict
from lockscope.model.probedata import MapUse, ProgramStats, RawProbe

SCHEMA = "lockscope.run/3"
# /1: no roles, wake-ups or sleep kinds; /2: no holders (both read as they are)
READS = ("lockscope.run/1", "lockscope.run/2", SCHEMA)
NO_FS = "none"                          # the fs of a point that made no file system
RUNS = "runs"                           # the folder of a results directory that holds the run records


def point_id(workload: str, fs: str, workers: int, repeat: int = 1) -> str:
    """A point's id, its record's file name: `MWRM-tmpfs-w2`; its second
    and later repeats (`sweep --repeat K`) `MWRM-tmpfs-w2-r2`, ..."""
    return f"{workload}-{fs}-w{workers}" + (f"-r{repeat}" if repeat > 1 else "")


def record_path(out: Path, pid: str) -> Path:
    """Where the record of point `pid` lives in results directory `out`."""
    return Path(out) / RUNS / f"{pid}.json"


@dataclass
class StackSummary:
    """One calling context of a lock: frames innermost first, lock-internal
    frames removed. Stacks are sampled in the kernel: `sampled` waits had
    this stack walked; `count` and `wait_ns` include the lock's unsampled
    waits, spread over its sampled stacks in proportion to their wait."""
    frames: list[str]
    site: str
    syscall: Optional[str]
    count: int
    wait_ns: int
    sampled: int = 0


@dataclass
class KernelSpin:
    """A user-space lock's waits spun on one kernel lock inside the futex
    syscalls on its words (the futex hash bucket lock, a runqueue lock taken
    to wake a waiter): part of the lock's count and wait_ns (analyzer/user/futexspin.py)."""
    name: str                    # the kernel lock, as it would be named on its own
    count: int = 0
    wait_ns: int = 0


@dataclass
class HolderTime:
    """One part of what a lock's holders did while others waited for it."""
    name: str                    # "on CPU", "preempted", an off-CPU class, another lock's name, "not recorded"
    wait_class: str = field(metadata={"json": "class"})   # on-cpu | preempted | lock | an off-CPU class | unknown
    share: float = 0.0           # of the holders' time over the waits their releases ended
    frames: list[str] = field(default_factory=list, metadata={"omit_empty": True})   # kernel stack, off CPU


@dataclass
class Holder:
    """The code that held a lock while others waited, by release site (the
    end of its critical section: the releaser's stack where it woke a
    waiter; analyzer/holders.py)."""
    site: str                    # innermost frame of the program's own code (kernel function for kernel locks)
    stack: list[str]
    share: float                 # of the lock's waits ended by a release, the part this site's releases ended
    holds: int                   # releases at this site that ended a wait
    hold_ns: int                 # held with a waiter asleep: the waits those releases ended
    who: str = ""                # the releasing threads' process (and thread) name
    while_holding: list[HolderTime] = field(default_factory=list)


@dataclass
class OwnerSeen:
    """What the owner of a kernel mutex or rwsem was doing when waiters began
    to wait for it (sampled looks at the lock's owner word; analyzer/owners.py)."""
    doing: str                   # "on CPU", "preempted", an off-CPU class, another lock's name, "readers", ...
    wait_class: str = field(metadata={"json": "class"})   # on-cpu | preempted | lock | an off-CPU class | ...
    share: float = 0.0           # of the looks
    looks: int = 0
    who: str = ""                # the owning thread's name (and "another process" where it was not the waiter's)
    frames: list[str] = field(default_factory=list, metadata={"omit_empty": True})   # kernel stack, off CPU


@dataclass
class Lock:
    name: str                    # e.g. "inode->i_rwsem of <scratch>/share (tmpfs, dir)"
    lock_class: str = field(metadata={"json": "class"})   # e.g. "inode->i_rwsem"
    tier: str = "site"           # verified | inferred | site
    kind: str = "unknown"        # mutex, rwsem, spinlock, rwlock, percpu-rwsem, rtmutex
    modes: dict[str, int] = field(default_factory=dict)   # wait_ns by mode: read/write/spin/sleep
    instances: int = 1           # distinct lock addresses behind this name
    addresses: list[str] = field(default_factory=list)
    count: int = 0
    wait_ns: int = 0             # traced wait time, plus sampled_spin_ns
    max_wait_ns: int = 0
    wait_share: float = 0.0      # wait_ns / (workers * window)
    sampled_spin_ns: int = 0     # rwsem optimistic spinning (no tracepoint), estimated from CPU samples
    object: Optional[str] = None  # the object the lock belongs to, when known
    component: Optional[str] = None
    explain: Optional[str] = None
    rule: Optional[str] = None   # inferred: the rule that named it
    stacks: list[StackSummary] = field(default_factory=list)
    # user-space locks: wait_ns by the role of the waiting thread (analyzer/roles.py)
    roles: dict[str, int] = field(default_factory=dict, metadata={"omit_empty": True})
    # kernel locks, from the sampled waiters (analyzer/kernel/sharing.py; absent in older records):
    # threads seen waiting, most on one instance, and global | shared | per-thread | one-thread
    waiters: Optional[int] = optional()
    shared_by: Optional[int] = optional()
    sharing: Optional[str] = optional()
    # user-space locks (since issue 25, absent in older records and when none): kernel locks
    # spun on inside the futex syscalls on this lock's words, heaviest first, counted in wait_ns
    kernel_spin: list[KernelSpin] = field(default_factory=list, metadata={"omit_empty": True})
    # who held it while others waited, by release site, heaviest first (record /3, issue 27);
    # holder_note says why there are none where a reason is known (spinlocks keep no owner)
    holders: list[Holder] = field(default_factory=list, metadata={"omit_empty": True})
    holder_note: Optional[str] = optional()
    # the part of its waits (by count) that a release ended: the holders see those only (a kernel
    # mutex waiter that spins until the owner lets go is woken by no one; a timed wait times out)
    holders_cover: Optional[float] = optional()
    # the part of its wait time until those releases; the rest passed after them, before the
    # woken waiter ran (wake-up latency), or in waits no release ended
    held_share: Optional[float] = optional()
    # kernel mutexes and rwsems: what the owner was doing as waits began, most looked-at first
    owners: list[OwnerSeen] = field(default_factory=list, metadata={"omit_empty": True})


@dataclass
class OffCpu:
    """Off-CPU time of the workload's tasks, by class and stack."""
    wait_class: str = field(metadata={"json": "class"})   # lock | preempted | a locks.toml [[offcpu]] class | sleep | blocked | other
    state: int = 0
    in_lock_wait: bool = False
    count: int = 0
    wait_ns: int = 0
    max_ns: int = 0
    wait_share: float = 0.0
    site: str = ""
    frames: list[str] = field(default_factory=list)
    role: Optional[str] = optional()      # the role of the threads (record /2)
    kind: Optional[str] = optional()      # sleep kind: lock, idle, io, storage, preempted, other, futex


@dataclass
class Role:
    """Threads of one role (process and thread name, numbers folded) and
    their time over the window by what they did (analyzer/roles.py)."""
    name: str
    processes: list[str] = field(default_factory=list)
    threads: int = 0
    pids: int = 0
    worker: bool = False         # counted as the measured work
    reason: str = ""             # why it is or is not counted
    path: bool = False           # on the path of the measured work: a worker role or one the workers wait for
    driver: bool = field(default=False, metadata={"omit_empty": True})   # run --target: the command that drives the load
    kernel: bool = field(default=False, metadata={"omit_empty": True})   # kernel threads (kworker, ksoftirqd, ...): never the work
    on_cpu_ns: int = 0
    lock_ns: int = 0
    idle_ns: int = 0
    io_ns: int = 0
    storage_ns: int = 0          # page-cache folio, writeback, journal
    preempted_ns: int = 0
    other_ns: int = 0

    @property
    def busy_ns(self) -> int:
        return self.on_cpu_ns + self.lock_ns + self.io_ns + self.storage_ns + self.preempted_ns + self.other_ns


@dataclass
class RoleEdge:
    """Wake-ups from one role to another: how many, and the sleep time of
    the woken threads they ended (the wait-for graph)."""
    waker: str
    wakee: str
    count: int = 0
    wait_ns: int = 0
    traced: bool = True          # the waker is a traced role (not an interrupt or another process)


@dataclass
class CpuBreakdown:
    """Shares of the measured CPUs' time over the timed window (sum to ~1)."""
    user: float = 0.0
    sys: float = 0.0
    idle: float = 0.0
    iowait: float = 0.0
    irq: float = 0.0
    steal: float = 0.0
    cpus: list[int] = field(default_factory=list)


@dataclass
class Background:
    """What else the machine did over a timed window, as shares of all its
    CPUs' time (lockscope/measure/background.py): CPU time of processes
    outside the measured ones, lockscope's own apart, and the hypervisor's
    steal. The noise a decision is made in."""
    other: float = 0.0               # processes outside the measured ones and lockscope's own
    lockscope: float = 0.0           # lockscope's own processes (the command, the probe's loader)
    steal: float = 0.0
    kernel: float = 0.0              # kernel threads (kworkers, a journal thread: possibly the workload's own)
    cpus: int = 0                    # the machine's CPUs the shares are of
    top: list[str] = field(default_factory=list)   # the heaviest others: "stress-ng-cpu 48%"

    @property
    def noise(self) -> float:
        """The share of the CPUs taken from the measured work by others."""
        return self.other + self.lockscope + self.steal

    def text(self) -> str:
        """"background: other processes 48% of the 2 CPUs (stress-ng-cpu 48%), ..."."""
        return (f"background: other processes {self.other:.0%} of the {self.cpus} CPUs"
                + (f" ({', '.join(self.top)})" if self.top and self.other >= 0.01 else "")
                + f", kernel threads {self.kernel:.0%}, lockscope {self.lockscope:.0%}, steal {self.steal:.0%}")


@dataclass
class WorkerResult:
    worker: int
    cpu: Optional[int] = None
    pid: Optional[int] = None
    ops: int = 0
    ran_out: bool = False


@dataclass
class Latency:
    """Latency of one operation type over the timed window (or one interval),
    from log2 histograms: buckets[i] counts operations that took
    [2**i, 2**(i+1)) ns (bucket 0: [0, 2) ns). Percentiles are estimated
    inside their bucket (within a factor of 2), max_ns is exact."""
    count: int = 0               # ops of this type
    timed: int = 0               # of which timed (cheap single-operation ops are sampled)
    mean_ns: int = 0
    p50_ns: int = 0
    p99_ns: int = 0
    max_ns: int = 0
    buckets: list[int] = field(default_factory=list)   # window only; empty per interval


@dataclass
class Interval:
    """One interval of the time series (`--interval`): t_s is its end, in
    seconds after the start of the timed window."""
    t_s: float
    interval_s: float
    ops: int
    ops_per_sec: float
    op_counts: dict[str, int] = field(default_factory=dict)
    latency: dict[str, Latency] = field(default_factory=dict)


@dataclass
class ProbeCost:
    """lockscope's own work during the window (analyzer/cost.py): the
    probe's programs' run time is in ProbeInfo.programs; the loader's CPU
    time, and the lockscope process's own (reading the probe's lines,
    progress, the workload's events)."""
    bpf_stats: bool = False        # the kernel counted the programs' run times
    reason: Optional[str] = optional()    # why it did not
    # the share of the window it counted them in (a part of each second: the counting costs two
    # clock reads a run); the programs' figures are scaled to the whole window
    bpf_stats_share: Optional[float] = optional()
    loader_cpu_ns: int = 0
    lockscope_cpu_ns: Optional[int] = optional()
    # one uprobe trap's price, measured by the loader at start (a no-op uprobe on a function of its
    # own, called with and without it); the reason where it was not
    uprobe_trap_ns: Optional[int] = optional()
    uprobe_trap_reason: Optional[str] = optional()
    # per period (about a second) of the window (since issue 43's budget)
    periods: list[CostPeriod] = field(default_factory=list, metadata={"omit_empty": True})
    # --max-overhead as a share of the CPUs, the steps shed to keep it, and whether the ladder
    # ran out while a period was still over it
    max_share: Optional[float] = optional()
    shed: list[ShedStep] = field(default_factory=list, metadata={"omit_empty": True})
    shed_exhausted: Optional[bool] = optional()


@dataclass
class CostPeriod:
    """The probe's cost in one period of the window (about a second): its
    programs' run time and their uprobes' traps, scaled from the stretch the
    kernel counted them in, and the loader's CPU time (probes/budget.c)."""
    t_ns: int                 # the period's end, from the window's start
    period_ns: int
    bpf_ns: int = 0
    runs: int = 0             # the programs' runs, scaled likewise
    traps_ns: int = 0
    loader_ns: int = 0
    level: int = 0            # steps of the budget's ladder taken before it ended


@dataclass
class ShedStep:
    """A sampling rate lowered to keep --max-overhead: `what` is the
    loader's knob (stack_rate, timed_rate: per second per CPU; objects_ms:
    the objects' snapshot period)."""
    t_ns: int                 # from the window's start
    what: str
    before: int
    after: int
    # it saved less than a tenth of what it aims at in the period after it (the programs' time
    # per run, the loader's CPU share): the rate went back
    given_back: Optional[bool] = optional()


@dataclass
class ProbeInfo:
    attached: bool = False
    reason: Optional[str] = None      # why not attached, when it is not
    window_s: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)   # events, drops, stale waits, futex_waits, lost_*
    programs: list[ProgramStats] = field(default_factory=list)
    maps: dict[str, MapUse] = field(default_factory=dict)
    cost: Optional[ProbeCost] = optional()     # absent in records before issue 43
    # aggregated probe output with stacks symbolized, kept so that names can
    # be recomputed offline (None, `{}` in JSON, when the probe did not run)
    raw: Optional[RawProbe] = field(default=None, metadata={"empty_is_none": True})


@dataclass
class Host:
    """The machine a point ran on."""
    kernel: Optional[str] = optional()
    machine: Optional[str] = optional()
    hostname: Optional[str] = optional()
    ncpus: Optional[int] = optional()
    cpus_allowed: Optional[int] = optional()
    cpu_model: Optional[str] = optional()


@dataclass
class CpuCpi:
    cpu: int
    cycles: int
    instructions: int
    cpi: Optional[float]


@dataclass
class Cpi:
    """Cycles per instruction over the timed window, or why not measured."""
    available: bool = False
    reason: Optional[str] = optional()
    value: Optional[float] = optional()
    cycles: Optional[int] = optional()
    instructions: Optional[int] = optional()
    cpus: Optional[list[int]] = optional()
    per_cpu: Optional[list[CpuCpi]] = optional()
    multiplexed: Optional[bool] = optional()
    scope: Optional[str] = optional()


# keys of fs_detail written for every mounted file system, and those added
# with the mkfs timing (absent from older records)
_FS_BASE = ("fstype", "description", "mountpoint", "mount_options", "device", "image", "dev", "kernel_dev")
_FS_LATER = ("mkfs", "mkfs_options", "image_size_bytes", "user_device", "journal", "kernel_mount_options",
             "mkfs_s", "mount_s")


@dataclass
class FsDetail:
    """Where a point ran (scratch.Mounted.describe): only `setup` ("none")
    without a file system; a key may be null (tmpfs has no device)."""
    setup: str = NO_FS
    fstype: Optional[str] = None
    description: Optional[str] = None
    mountpoint: Optional[str] = None
    mount_options: Optional[str] = None
    device: Optional[str] = None
    image: Optional[str] = None
    dev: Optional[str] = None             # "major:minor"
    kernel_dev: Optional[int] = None
    mkfs: Optional[list[str]] = None      # the command run ([] for tmpfs)
    mkfs_options: Optional[list[str]] = None
    image_size_bytes: Optional[int] = None
    user_device: Optional[bool] = None
    journal: Optional[str] = None
    kernel_mount_options: Optional[str] = None
    mkfs_s: Optional[float] = None
    mount_s: Optional[float] = None

    @classmethod
    def from_json(cls, data: dict) -> "FsDetail":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def to_json(self) -> dict:
        keys = ("setup",) + (_FS_BASE if self.mountpoint is not None else ()) + \
            (_FS_LATER if self.mkfs is not None else ())
        return {k: getattr(self, k) for k in keys}


@dataclass
class Application:
    """The program behind an application workload (lockscope/measure/apps.toml)."""
    name: str                             # the workload, e.g. rocksdb-readrandom
    package: str                          # the Debian package
    binary: str
    version: Optional[str] = optional()         # the package's version (dpkg), when known
    prepare: Optional[list[str]] = optional()   # run before the window, outside the probes
    prepare_s: Optional[float] = optional()


@dataclass
class AttachedProcess:
    pid: int
    comm: str
    threads: int                          # at the start of the window


@dataclass
class AttachInfo:
    """What `lockscope attach` profiled: processes it did not start."""
    how: str                              # pid | comm | cgroup | system-wide
    target: str                           # the pids, the comm or the cgroup directory asked for
    processes: list[AttachedProcess] = field(default_factory=list)   # at the start of the window
    threads: int = 0                      # their threads at the start
    ended: str = "duration"               # why the window ended: duration | exited (the targets did) | SIGINT | SIGTERM | SIGHUP
    exited: list[str] = field(default_factory=list)   # notes: targets that exited during the window


@dataclass
class RunRecord:
    id: str
    workload: str
    fs: str
    workers: int
    duration_s: float                 # the measured timed window
    ops: Optional[int]
    ops_per_sec: Optional[float]
    schema: str = SCHEMA
    created: str = ""
    lockscope_version: str = ""
    host: Host = field(default_factory=Host)
    kind: str = "builtin"             # builtin | command (an application workload is a command) | attach
    command: Optional[list[str]] = None
    throughput_unit: str = "ops/s"
    fs_detail: FsDetail = field(default_factory=FsDetail)
    cpus: list[int] = field(default_factory=list)
    oversubscribed: bool = False
    requested_duration_s: float = 0.0
    warmup_s: float = 0.0
    setup_s: float = 0.0
    per_worker: list[WorkerResult] = field(default_factory=list)
    cpu: CpuBreakdown = field(default_factory=CpuBreakdown)
    cpi: Cpi = field(default_factory=Cpi)
    locks: list[Lock] = field(default_factory=list)
    offcpu: list[OffCpu] = field(default_factory=list)
    probe: ProbeInfo = field(default_factory=ProbeInfo)
    warnings: list[str] = field(default_factory=list)
    # built-in workloads: parameters (--param, defaults filled in), ops of
    # each operation type and their latency over the timed window (empty
    # with --no-latency), and the time series (--interval; empty when off)
    params: dict[str, int | float | str] = field(default_factory=dict, metadata={"omit_empty": True})
    op_counts: dict[str, int] = field(default_factory=dict, metadata={"omit_empty": True})
    latency: dict[str, Latency] = field(default_factory=dict, metadata={"omit_empty": True})
    interval_s: float = field(default=0.0, metadata={"omit_empty": True})
    timeseries: list[Interval] = field(default_factory=list, metadata={"omit_empty": True})
    # application workloads (lockscope/measure/apps.toml): the program behind the command
    application: Optional[Application] = optional()
    # record /2: the traced threads by role, and who woke whom (analyzer/roles.py)
    roles: list[Role] = field(default_factory=list, metadata={"omit_empty": True})
    wait_for: list[RoleEdge] = field(default_factory=list, metadata={"omit_empty": True})
    # kind attach: the processes profiled (lockscope attach)
    attach: Optional[AttachInfo] = optional()
    # built-in workloads: the rate in the first part of the warm-up, before
    # the probes recorded (the driver's "reference" event), and the window's
    # rate over it (analyzer/probeeffect.py; absent in older records)
    reference_s: Optional[float] = optional()
    reference_ops: Optional[int] = optional()
    reference_ops_per_sec: Optional[float] = optional()
    probe_effect: Optional[float] = optional()
    # run/sweep --target: the processes counted as the work while the command drove the load
    target: Optional[AttachInfo] = optional()
    # sweep --repeat K: which of the point's K runs this is (None: the first, or the only one)
    repeat: Optional[int] = optional()
    # the machine's other work over the window (absent in older records)
    background: Optional[Background] = optional()

    @property
    def worker_roles(self) -> set[str]:
        return {r.name for r in self.roles if r.worker}


def save(record: RunRecord, path: Path) -> None:
    atomicio.write_json(path, to_dict(record))


def load(path: Path) -> RunRecord:
    """Read a run record; ValueError naming the file and what is wrong when it
    is not one (cut short, not JSON, a field missing or of the wrong type)."""
    with open(path) as f:
        text = f.read()
    if not text.strip():
        raise ValueError(f"{path}: empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        # lockscope ends every record with "}\n": one without it was cut
        how = "cut short" if not text.rstrip().endswith("}") else "not valid JSON"
        raise ValueError(f"{path}: {how} ({e.msg}: line {e.lineno} column {e.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a lockscope run record (a JSON {type(data).__name__}, not an object)")
    schema = data.get("schema", "")
    if not isinstance(schema, str):
        raise ValueError(f"{path}: not a lockscope run record (schema {schema!r})")
    if not schema.startswith("lockscope.run/"):
        raise ValueError(f"{path}: not a lockscope run record (schema {schema!r})")
    if schema not in READS:
        raise ValueError(f"{path}: run record schema {schema} is not supported "
                         f"(this lockscope reads {', '.join(READS)})")
    # /1 has none of /2's additions (roles, wait_for, Lock.roles, OffCpu.role
    # and kind): they read as empty, and the analysis counts every traced
    # task as a worker, as /1 did
    try:
        return from_dict(RunRecord, data)
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        raise ValueError(f"{path}: {e}") from None
