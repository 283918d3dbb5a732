"""The probe's raw data as kept in a run record (`probe.raw`): the declared
schema of what the loader's emitters write (probes/loader.c, collect.c, objects.c,
kmem.c, futex.c, holders.c, tasks.c, usdt.c, jvmmon.c, gomutex.c,
pyframes.c, ktext.c, series.c and layout.c: every `jw_` writer of probes/),
after the runner has kept the heaviest aggregates and symbolized their
stacks.
Built once from JSON (`jsondata.from_dict(RawProbe, ...)`, or of one part);
every reader (naming, userlocks, folded, timeview) reads these attributes.
Addresses are ints here and `"0x..."` text in JSON (jsondata.parse_addr).
Documented in README.md, "Run record"."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from lockscope.model.holddata import OwnerLook, PythonProcess, PythonWait, Release, ReleaseActivity
from lockscope.model.ktextdata import TextCall
from lockscope.model.jsondata import HEX, KernelObject, format_addr, optional, parse_addr
from lockscope.model.usdtdata import JvmProcess, UsdtAttached, UsdtProbe, UsdtStack, UsdtWait  # noqa: F401 (the schema's parts)

MAX_RAW_ENTRIES = 2000       # aggregates of each kind kept in a record, heaviest first


@dataclass
class Contention:
    """Traced lock waits of one (lock address, flags, kernel stack)."""
    lock: int = field(metadata=HEX)
    flags: int = 0               # lock:contention_begin flags (naming.lock_kind)
    stack: int = -1              # a key of RawProbe.stacks; negative: not sampled or lost
    count: int = 0
    total_ns: int = 0            # estimated when some waits were not timed (untimed)
    max_ns: int = 0              # of the timed waits
    # waits counted but not timed (the probe's --timed-rate): the timed ones stand for them
    untimed: int = field(default=0, metadata={"omit_empty": True})


@dataclass
class OffCpuWait:
    """Time off CPU of the workload's tasks by (kernel stack, task state, thread)."""
    stack: int = -1
    state: int = 0
    in_lock_wait: bool = False   # asleep inside a traced lock wait (counted there)
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    tid: Optional[int] = optional()   # the thread (absent in records before issue 9)


@dataclass
class CpuSample:
    stack: int = -1              # a key of RawProbe.sample_stacks; -3: in user space
    in_lock_wait: bool = False
    count: int = 0
    tgid: int = field(default=0, metadata={"omit_empty": True})
    tid: int = field(default=0, metadata={"omit_empty": True})
    # its user stack: a key of RawProbe.sample_user_stacks ("tgid:id"; user-space locks traced)
    user_stack: Optional[str] = optional()


@dataclass
class FileObject(KernelObject):
    """A file or directory the object iterator reached, with the addresses of
    its lock fields (and of the inode, superblock...) by the probe's key:
    `i_rwsem`, `s_vfs_rename_mutex`, `jbd2_j_state_lock`, ..."""
    path: str = ""
    tgid: int = 0
    fd: int = 0
    ino: int = 0
    mode: int = 0
    dev: int = 0                 # kernel dev_t (a key of RawProbe.mounts)
    fstype: str = "?"
    parent_ino: Optional[int] = None
    addresses: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskObject(KernelObject):
    """A process of the workload, with the addresses of its lock fields
    (`mmap_lock`, `siglock`, `pi_lock`, `rq_lock` of its CPU, ...)."""
    tgid: int = 0
    pid: int = 0
    ppid: Optional[int] = optional()      # the process that started it (since issue 44)
    comm: str = "?"
    cpu: Optional[int] = None
    addresses: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SuperBlockObject(KernelObject):
    """A mounted file system's superblock (every one the kernel has, since
    issue 44): `sb` and `s_fs_info` (its file system's own part) in
    `addresses`."""
    dev: int = 0                 # kernel dev_t (a key of RawProbe.mounts)
    fstype: str = "?"
    addresses: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Objects:
    dropped: int = 0
    walk_ns: Optional[list[int]] = optional()    # each snapshot's time (start, every interval, stop)
    files: list[FileObject] = field(default_factory=list)
    tasks: list[TaskObject] = field(default_factory=list)
    # every mounted file system's superblock (since issue 44; left out while empty)
    superblocks: list[SuperBlockObject] = field(default_factory=list, metadata={"omit_empty": True})


@dataclass
class Snapshot:
    """Cumulative waits at `t_ns` after the window's start: (lock address,
    ns) of the heaviest locks, (task state, ns) off CPU outside lock waits."""
    t_ns: int
    locks: list[tuple[int, int]] = field(default_factory=list)
    offcpu: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict) -> "Snapshot":
        return cls(t_ns=data["t_ns"], locks=[(parse_addr(a), ns) for a, ns in data.get("locks", [])],
                   offcpu=[(int(s), ns) for s, ns in data.get("offcpu", [])])

    def to_json(self) -> dict:
        return {"t_ns": self.t_ns, "locks": [[format_addr(a), ns] for a, ns in self.locks],
                "offcpu": [[s, ns] for s, ns in self.offcpu]}


@dataclass
class Series:
    """The time view's data: a snapshot every `interval_ns` (--series-ms)."""
    interval_ns: int = 0
    truncated: bool = False
    max_locks: int = 0
    snapshots: list[Snapshot] = field(default_factory=list)


@dataclass
class SlabEntry:
    """A contended address inside a slab object (kmem.c), and what
    analyzer/kernel/slab.py found at its offset."""
    addr: int = field(metadata=HEX)
    cache: str = ""
    size: int = 0
    object_size: int = 0
    base: Optional[int] = optional(hex=True)
    type: Optional[str] = optional()      # the cache's struct type
    offset: Optional[int] = optional()    # of addr in the object
    lock_field: Optional[str] = optional(json="field")
    lock: Optional[str] = optional()      # the BTF lock type there
    head: Optional[str] = optional()      # the object's first bytes, hex (kmem.c)
    object: Optional[str] = optional()    # what the object is, where its head says: a SysV IPC object's kind and key
    object_id: Optional[int] = optional()  # and its id (one per run where the key is IPC_PRIVATE)


@dataclass
class Slab:
    status: str = "unavailable"
    reason: Optional[str] = optional()
    entries: list[SlabEntry] = field(default_factory=list)
    btf: Optional[str] = optional()


@dataclass
class ObjLock:
    """A contended address that is a lock member of an object behind a file
    of the workload (analyzer/kernel/objlocks.py: typed by f_op, members from BTF)."""
    addr: int = field(metadata=HEX)
    struct: str = ""              # the object's struct type
    member: str = ""              # the lock's member path in it ("sk_lock.slock")
    lock: str = ""                # the BTF lock type there
    object: str = ""              # what the object is: "pipe:[1234] (fd 3 of prog)"
    kind: str = ""                # the file kind (fileobjects.toml) or inode, fs, file...
    component: Optional[str] = optional()


@dataclass
class ObjLocks:
    """What the walk behind the files found: the objects reached by kind, and
    the contended addresses among their lock members."""
    status: str = "unavailable"
    reason: Optional[str] = optional()
    kinds: dict[str, int] = field(default_factory=dict)
    entries: list[ObjLock] = field(default_factory=list)


@dataclass
class FutexProbe:
    attached: bool = False
    reason: Optional[str] = optional()
    open_at_stop: Optional[int] = optional()


@dataclass
class FutexWait:
    """Futex sleeps of one (process, thread, futex address, op, user stack)."""
    tgid: int
    uaddr: int = field(metadata=HEX)
    op: int = 0
    stack: int = -1              # frame-pointer stack id: "tgid:stack" is a key of RawProbe.user_stacks
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    tid: Optional[int] = optional()
    # RawProbe.user_stacks' key of the stack unwound from the probe's copy ("tgid:cfiN")
    user_stack: Optional[str] = optional()
    in_usdt: Optional[int] = optional()   # begun inside a wait of this usdt.toml entry: that wait's sleep


@dataclass
class FutexKernelWait:
    """Spinning waits on one kernel lock inside the futex syscalls of one
    process on one futex word (probes/futexspin.bpf.h): the futex hash
    bucket lock, a runqueue or pi_lock taken to wake a waiter. The same
    waits are in RawProbe.contention under (lock, flags, stack); these say
    which futex word the syscall worked on (its first argument)."""
    lock: int = field(metadata=HEX)
    tgid: int = 0
    uaddr: int = field(default=0, metadata=HEX)
    flags: int = 0
    stack: int = -1
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    untimed: int = field(default=0, metadata={"omit_empty": True})


@dataclass
class GoExecutable:
    """A Go executable of the tracked processes (probes/gomutex.c)."""
    path: str
    attached: bool = False
    reason: Optional[str] = optional()


@dataclass
class FileLockProbe:
    """Whether the file-lock probe loaded (probes/filelocks.bpf.c), and its
    event counters."""
    attached: bool = False
    reason: Optional[str] = optional()
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class FileLockWait:
    """Waits of one thread for one held file lock (probes/filelocks.bpf.c):
    the file (inode address, device, number), the held lock at the root of
    the kernel's blocker tree (its flc_flags kind bits, type, range) and the
    process that took it; named at record time (analyzer/kernel/filelocks.py)."""
    inode: int = field(metadata=HEX)
    ino: int = 0
    dev: int = 0                 # kernel dev_t of the file's superblock
    flags: int = 0               # FL_POSIX 1, FL_FLOCK 2, FL_LEASE 32, FL_OFDLCK 1024
    type: int = 0                # F_RDLCK 0, F_WRLCK 1
    start: int = 0               # the held lock's range (POSIX and OFD locks)
    end: int = 0
    holder_tgid: int = -1        # the held lock's flc_pid; -1: not known
    holder_comm: str = ""
    tid: int = 0                 # the waiting thread
    tgid: int = 0
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    # the file's path below its file system's root, from the kernel's dentries (since issue 44's
    # lease holders: a file no snapshot of the open files found)
    fs_path: Optional[str] = optional()
    # a sleep of a thread that takes SQLite's lock bytes (flags FLK_SLEEP): the id of the copy of its
    # user stack, which decides at record time whether it is SQLite's busy wait (then `stack`: its frames)
    copy: Optional[int] = optional()
    stack: Optional[list[str]] = optional()


@dataclass
class FileLockRelease:
    """Releases of a file's locks while others waited for it, by the
    releasing process and its release site: the copy of its user stack,
    unwound at record time (`stack`, the C library's frames left out)."""
    inode: int = field(metadata=HEX)
    tgid: int = 0
    copy: int = 0                # 0: not copied (the copies' room was spent)
    count: int = 0
    stack: Optional[list[str]] = optional()


@dataclass
class GoProbe:
    """Whether the Go sync.Mutex probe loaded, and what it attached to."""
    attached: bool = False
    reason: Optional[str] = optional()
    executables: list[GoExecutable] = field(default_factory=list)


@dataclass
class GoWait:
    """Goroutine parks on one sync semaphore from one user stack
    (gomutex.bpf.c); resolved at record time (analyzer/user/golocks.py)."""
    tgid: int
    sema: int = field(metadata=HEX)
    via: str = "sync.Mutex"      # the semacquire it came through
    stack: int = -1
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    ret: Optional[int] = optional(hex=True)      # the semacquire's return address: its caller
    kind: Optional[str] = optional()             # sync.Mutex, sync.RWMutex
    lock: Optional[int] = optional(hex=True)     # the lock object's address
    frames: Optional[list[str]] = optional()     # the user stack, symbolized
    symbol: Optional[str] = optional()           # a global lock's ELF symbol
    exe: Optional[str] = optional()


@dataclass
class FutexAddress:
    """Where a futex lives: region (object, file, heap, stack, anon,
    unmapped, unknown), and in a file its ELF symbol."""
    region: str = "unknown"
    file: Optional[str] = optional()
    symbol: Optional[str] = optional()
    symbol_offset: Optional[int] = optional()
    vaddr: Optional[int] = optional(hex=True)
    reason: Optional[str] = optional()


@dataclass
class TaskTimes:
    """One thread of the workload over the window (tasks.bpf.c): time on CPU,
    off CPU runnable (preempted, or not yet run) and asleep, switch-outs.
    Threads on or off CPU at stop count up to the stop time."""
    tid: int
    tgid: int = 0
    comm: str = ""
    process: str = ""            # the group leader's comm
    on_cpu_ns: int = 0
    preempted_ns: int = 0
    sleep_ns: int = 0
    switches: int = 0
    kernel: bool = field(default=False, metadata={"omit_empty": True})   # a kernel thread (PF_KTHREAD)

    @property
    def total_ns(self) -> int:
        return self.on_cpu_ns + self.preempted_ns + self.sleep_ns


@dataclass
class Wakeup:
    """Wake-ups of a workload thread (wakee) by one thread (waker; tid 0: an
    interrupt or the idle task), by the futex the wakee slept on (None: not
    in a futex wait): how many, and the wakee's time off CPU until them (0
    for a thread woken on its way to sleep, before it switched out)."""
    waker_tid: int
    waker_tgid: int = 0
    waker_comm: str = ""
    wakee_tid: int = 0
    uaddr: Optional[int] = optional(hex=True)
    count: int = 0
    wait_ns: int = 0


@dataclass
class Waiter:
    """A thread seen waiting on a lock address in the sampled waits (every
    rwsem, per-CPU rwsem and rt_mutex wait; one spin or mutex wait in
    RawProbe.waiter_every, at random): how many of the samples."""
    lock: int = field(metadata=HEX)
    tid: int = 0
    count: int = 0


@dataclass
class ModuleRange:
    """A loaded module's core allocation (/proc/modules)."""
    name: str
    start: int = field(metadata=HEX)
    size: int = 0


@dataclass
class KernelImage:
    """Where the running kernel's image keeps its static data (analyzer/kernel/kimage.py),
    and the names of the contended static addresses where a symbol table gave them."""
    text: int = field(metadata=HEX)               # runtime _text (the KASLR offset against a System.map)
    modules_start: int = field(default=0, metadata=HEX)
    data: list[int] = field(default_factory=list)  # [start, end) of .data (or of all static data)
    bss: list[int] = field(default_factory=list)   # [start, end) of .bss, when known apart
    bounds: str = ""                               # where the bounds came from
    modules: list[ModuleRange] = field(default_factory=list)
    symbols: dict[str, str] = field(default_factory=dict)   # "0x..." -> "var" or "var+0x8"
    symbols_from: Optional[str] = optional()      # /proc/kallsyms, or the --vmlinux file
    text_calls: list[TextCall] = field(default_factory=list, metadata={"omit_empty": True})  # since issue 29


@dataclass
class RawProbe:
    """The probe's aggregated output as kept in a run record."""
    contention: list[Contention] = field(default_factory=list)
    offcpu: list[OffCpuWait] = field(default_factory=list)
    cpu_samples: list[CpuSample] = field(default_factory=list)
    sample_period_ns: int = 0
    stacks: dict[int, list[str]] = field(default_factory=dict)          # kernel stacks, symbolized
    sample_stacks: dict[int, list[str]] = field(default_factory=dict)
    sample_user_stacks: Optional[dict[str, list[str]]] = optional()   # CpuSample.user_stack -> frames (issue 28)
    objects: Objects = field(default_factory=Objects)
    layout: dict[str, int] = field(default_factory=dict)                # "mutex.wait_lock": offset
    mounts: dict[int, str] = field(default_factory=dict)                # dev -> mount point
    scratch: Optional[str] = None
    series: Optional[Series] = optional()
    slab: Optional[Slab] = optional()
    objlocks: Optional[ObjLocks] = optional()     # since issue 11
    futex_probe: Optional[FutexProbe] = optional()
    futex: Optional[list[FutexWait]] = optional()
    user_stacks: Optional[dict[str, list[str]]] = optional()   # "pid:stack", or "pid:cfiN" (FutexWait.user_stack)
    futex_addresses: Optional[dict[str, FutexAddress]] = optional()  # "pid:0x..."
    futex_kernel: Optional[list[FutexKernelWait]] = optional()  # kernel waits spun in futex calls, by word (issue 25)
    tasks: Optional[list[TaskTimes]] = optional()      # per-thread times (since issue 9)
    wakeups: Optional[list[Wakeup]] = optional()       # who woke whom (since issue 9)
    kernel_image: Optional[KernelImage] = optional()   # static data bounds, symbols (since issue 11)
    waiters: Optional[list[Waiter]] = optional()       # sampled (lock, thread) pairs (since issue 11)
    waiter_every: Optional[int] = optional()
    go_probe: Optional[GoProbe] = optional()           # Go sync.Mutex waits (issue 16)
    go_waits: Optional[list[GoWait]] = optional()
    go_releases: Optional[list[GoWait]] = optional()  # the same waits by the releaser's stack (issue 27)
    usdt_probe: Optional[UsdtProbe] = optional()       # application lock waits from USDT probes (issue 10)
    usdt: Optional[list[UsdtWait]] = optional()
    holds: Optional[list[Release]] = optional()           # lock releases by site (issue 27)
    hold_activity: Optional[list[ReleaseActivity]] = optional()
    hold_stacks: Optional[dict[str, list[str]]] = optional()   # Release.site_stack -> frames
    owners: Optional[list[OwnerLook]] = optional()        # kernel mutex/rwsem owners looked at (issue 27)
    py_waits: Optional[list[PythonWait]] = optional()     # the GIL's waits by the waiter's Python stack (issue 28)
    python_processes: Optional[list[PythonProcess]] = optional()   # CPython interpreters found (issue 28)
    file_lock_probe: Optional[FileLockProbe] = optional()   # file-lock waits (issue 44)
    file_lock_waits: Optional[list[FileLockWait]] = optional()
    file_lock_releases: Optional[list[FileLockRelease]] = optional()   # the holders' release sites

    def by_lock(self) -> dict[int, list[Contention]]:
        """The contention aggregates of each lock address."""
        out: dict[int, list[Contention]] = {}
        for e in self.contention:
            out.setdefault(e.lock, []).append(e)
        return out

    def frames(self, stack: int) -> list[str]:
        return self.stacks.get(stack, [])

    def sample_frames(self, stack: int) -> list[str]:
        return self.sample_stacks.get(stack, [])

    def sample_user_frames(self, smp: CpuSample) -> list[str]:
        return (self.sample_user_stacks or {}).get(smp.user_stack or "", [])

    def user_frames(self, e: FutexWait) -> list[str]:
        return (self.user_stacks or {}).get(e.user_stack or f"{e.tgid}:{e.stack}", [])

    def futex_address(self, e: FutexWait) -> FutexAddress:
        return (self.futex_addresses or {}).get(futex_key(e), FutexAddress())


def futex_key(e: FutexWait) -> str:
    """A futex's key in RawProbe.futex_addresses and Lock.addresses."""
    return f"{e.tgid}:{format_addr(e.uaddr)}"


def heaviest(rows: list, key: str, limit: int = MAX_RAW_ENTRIES) -> list:
    """The `limit` heaviest aggregates by attribute `key`, heaviest first."""
    return sorted(rows, key=lambda e: -getattr(e, key))[:limit]


@dataclass
class ProgramStats:
    """One BPF program of the probe: runs the kernel's recursion guard
    skipped, and its run time and runs in the window, as the kernel's BPF
    stats counted them in a part of each second (ProbeCost.bpf_stats_share)
    and scaled to the window: lockscope's own cost (analyzer/cost.py)."""
    name: str
    recursion_misses: int = 0
    run_ns: int = field(default=0, metadata={"omit_empty": True})
    runs: int = field(default=0, metadata={"omit_empty": True})
    uprobe: bool = field(default=False, metadata={"omit_empty": True})   # a uprobe's: a trap at each run


@dataclass
class MapUse:
    """How full one BPF map was at stop."""
    entries: int = 0
    max_entries: int = 0
