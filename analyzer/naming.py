"""Naming contended locks, best tier first:

1. verified: the address is a lock field of an object the probe reached
   (a file or directory of the workload, its superblock, its mm, ...);
2. inferred: a rule of the knowledge base matches the lock type and stack;
3. site: lock type plus the first frame outside the locking code.

Input is the `raw` section of a run record (probedata.RawProbe: aggregated
probe output with symbolized stacks), so naming can be recomputed and tested
offline. The waits add up into named locks in lockacc.py, shared with the
user-space locks of userlocks.py.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from lockscope.analyzer.knowledge import Knowledge, default as default_knowledge
from lockscope.analyzer.lockacc import MAX_FRAMES, LockAcc, heaviest_first, spread, wait_share
from lockscope.analyzer.slab import consistent as slab_consistent
from lockscope.jsondata import format_addr
from lockscope.probedata import Contention, RawProbe, SlabEntry
from lockscope.record import Lock, OffCpu, StackSummary

LCB_F_SPIN, LCB_F_READ, LCB_F_WRITE, LCB_F_RT, LCB_F_PERCPU, LCB_F_MUTEX = 1, 2, 4, 8, 16, 32
LS_F_SLEPT = 1 << 16
SCRATCH = "<scratch>"
NO_STACK = "[no stack sampled]"


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


@dataclass(frozen=True)
class Verified:
    lock_class: str
    name: str
    object: str


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


def verified_table(raw: RawProbe) -> dict[int, Verified]:
    """Lock address -> verified name, from the objects the iterators reached."""
    scratch = raw.scratch
    mounts = raw.mounts
    objects = raw.objects
    table: dict[int, Verified] = {}

    def put(a: int | None, cls: str, obj: str, suffix: str = "") -> None:
        if a and a not in table:
            table[a] = Verified(cls, f"{cls} of {obj}{suffix}", obj)

    for f in objects.files:
        path, fstype, lk = f.path, f.fstype, f.addresses
        dev = f.dev
        where = mounts.get(dev)
        sb = f"{fstype} at {display_path(where, scratch)}" if where else \
            f"{fstype} (dev {dev >> 20}:{dev & 0xFFFFF})"
        shown = display_path(path, scratch)
        detail = f" ({fstype}, {_file_type(f.mode)})"
        put(lk.get("i_rwsem"), "inode->i_rwsem", shown, detail)
        put(lk.get("i_lock"), "inode->i_lock", shown, detail)
        put(lk.get("i_mmap_rwsem"), "mapping->i_mmap_rwsem", shown, detail)
        put(lk.get("invalidate_lock"), "mapping->invalidate_lock", shown, detail)
        put(lk.get("d_lock"), "dentry->d_lockref.lock", shown)
        if path.startswith("/"):
            parent = display_path(os.path.dirname(path.rstrip("/")) or "/", scratch)
            put(lk.get("parent_i_rwsem"), "inode->i_rwsem", parent, f" ({fstype}, dir)")
            put(lk.get("parent_d_lock"), "dentry->d_lockref.lock", parent)
        put(lk.get("s_vfs_rename_mutex"), "sb->s_vfs_rename_mutex", sb)
        put(lk.get("s_inode_list_lock"), "sb->s_inode_list_lock", sb)
        put(lk.get("s_umount"), "sb->s_umount", sb)
        if fstype == "tmpfs":
            put(lk.get("shmem_stat_lock"), "sbinfo->stat_lock", sb)
            put(lk.get("shmem_shrinklist_lock"), "sbinfo->shrinklist_lock", sb)
        for key, cls, per_inode in _FS_PRIVATE.get(fstype, ()):
            if per_inode:
                put(lk.get(key), cls, shown, detail)
            else:
                put(lk.get(key), cls, sb)
    _add_wait_locks(table, raw.layout)
    for t in objects.tasks:
        # named by command, not pid, so that the name is the same in every run
        # of a sweep; the pid is in the object, and processes that share a
        # command count as instances of one name
        comm, proc = t.comm, f"{t.comm} (pid {t.tgid})"
        for field_, cls in (("mmap_lock", "mm->mmap_lock"), ("page_table_lock", "mm->page_table_lock"),
                            ("file_lock", "files->file_lock"), ("fs_lock", "fs_struct lock"),
                            ("siglock", "sighand->siglock"), ("pi_lock", "task->pi_lock")):
            a = t.addresses.get(field_)
            if a and a not in table:
                table[a] = Verified(cls, f"{cls} of {comm}", proc)
        a = t.addresses.get("rq_lock")
        if a and a not in table:
            cpu = "?" if t.cpu is None else t.cpu
            table[a] = Verified("rq->__lock", f"rq->__lock (runqueue of CPU {cpu})", f"runqueue of CPU {cpu}")
        a = t.addresses.get("lru_lock")
        if a and a not in table:
            table[a] = Verified("lruvec->lru_lock", f"lruvec->lru_lock of the memory cgroup of {comm} (node 0)",
                                f"memory cgroup of {proc}, node 0")
    return table


# file-system private locks the object iterator computes through
# sb->s_fs_info (per file system) and the fs inode around the VFS inode:
# (record key, lock class, per inode: named after the file, else after the
# file system)
_FS_PRIVATE = {
    "ext4": (
        ("ext4_s_orphan_lock", "ext4_sb_info->s_orphan_lock", False),
        ("ext4_s_md_lock", "ext4_sb_info->s_md_lock", False),
        ("ext4_s_es_lock", "ext4_sb_info->s_es_lock", False),
        ("jbd2_j_state_lock", "journal_t->j_state_lock", False),
        ("jbd2_j_list_lock", "journal_t->j_list_lock", False),
        ("jbd2_j_checkpoint_mutex", "journal_t->j_checkpoint_mutex", False),
        ("jbd2_j_barrier", "journal_t->j_barrier", False),
        ("jbd2_j_history_lock", "journal_t->j_history_lock", False),
        ("jbd2_j_revoke_lock", "journal_t->j_revoke_lock", False),
        ("jbd2_j_abort_mutex", "journal_t->j_abort_mutex", False),
        ("ext4_i_data_sem", "ext4_inode_info->i_data_sem", True),
        ("ext4_i_raw_lock", "ext4_inode_info->i_raw_lock", True),
        ("ext4_i_es_lock", "ext4_inode_info->i_es_lock", True),
        ("ext4_xattr_sem", "ext4_inode_info->xattr_sem", True),
    ),
    "xfs": (
        ("xfs_m_sb_lock", "xfs_mount->m_sb_lock", False),
        ("xfs_l_icloglock", "xlog->l_icloglock", False),
        ("xfs_xc_ctx_lock", "xfs_cil->xc_ctx_lock", False),
        ("xfs_xc_push_lock", "xfs_cil->xc_push_lock", False),
        ("xfs_i_lock", "xfs_inode->i_lock (ILOCK)", True),
        ("xfs_i_flags_lock", "xfs_inode->i_flags_lock", True),
    ),
    "btrfs": (
        ("btrfs_trans_lock", "btrfs_fs_info->trans_lock", False),
        ("btrfs_tree_root_node_lock", "extent_buffer->lock (root tree root node)", False),
        ("btrfs_root_node_lock", "extent_buffer->lock (subvolume root node)", False),
        ("btrfs_root_log_mutex", "btrfs_root->log_mutex", False),
        ("btrfs_inode_lock", "btrfs_inode->lock", True),
    ),
}


def slab_table(raw: RawProbe) -> dict[int, SlabEntry]:
    """Lock address -> its slab object and lock field, for the addresses
    the probe resolved to a typed slab cache (see analyzer/slab.py)."""
    return {e.addr: e for e in (raw.slab.entries if raw.slab else []) if e.lock_field}


def _slab_verified(e: SlabEntry | None, family: str) -> Verified | None:
    """A verified name for a lock in a slab object, when the BTF field at its
    offset is a lock of the family the contention event reported."""
    if not e or not e.lock_field or not slab_consistent(e.lock or "", family):
        return None
    return Verified(e.lock_field, f"{e.lock_field} ({e.cache} object)", f"{e.cache} object")


# lock classes that are a struct rw_semaphore or a struct mutex: their
# internal wait_lock (a raw spinlock) is named after them
_SLEEPING_LOCK_TYPE = {
    "inode->i_rwsem": "rw_semaphore", "mapping->i_mmap_rwsem": "rw_semaphore",
    "mapping->invalidate_lock": "rw_semaphore", "sb->s_umount": "rw_semaphore",
    "mm->mmap_lock": "rw_semaphore", "sb->s_vfs_rename_mutex": "mutex",
    "ext4_sb_info->s_orphan_lock": "mutex", "journal_t->j_checkpoint_mutex": "mutex",
    "journal_t->j_barrier": "mutex", "journal_t->j_abort_mutex": "mutex",
    "ext4_inode_info->i_data_sem": "rw_semaphore", "ext4_inode_info->xattr_sem": "rw_semaphore",
    "xfs_cil->xc_ctx_lock": "rw_semaphore", "xfs_inode->i_lock (ILOCK)": "rw_semaphore",
    "extent_buffer->lock (root tree root node)": "rw_semaphore",
    "extent_buffer->lock (subvolume root node)": "rw_semaphore", "btrfs_root->log_mutex": "mutex",
}


def _add_wait_locks(table: dict[int, Verified], layout: dict) -> None:
    for addr, v in list(table.items()):
        off = layout.get(f"{_SLEEPING_LOCK_TYPE.get(v.lock_class, '')}.wait_lock")
        if off is not None and addr + off not in table:
            cls = f"{v.lock_class}.wait_lock"
            table[addr + off] = Verified(cls, cls + v.name[len(v.lock_class):], v.object)


def _vote(entries: list[Contention], raw: RawProbe, kb: Knowledge):
    """The rule matching the most wait among an address's stacks: one stack
    can mislead when a lock is inlined into many callers."""
    votes: dict[str, list] = {}
    for e in entries:
        rule = kb.infer(lock_kind(e.flags)[0], raw.frames(e.stack))
        if rule:
            votes.setdefault(rule.name, [rule, 0])[1] += e.total_ns + 1
    return max(votes.values(), key=lambda v: v[1])[0] if votes else None


def _add_stacks(acc: LockAcc, entries: list[Contention], raw: RawProbe, kb: Knowledge) -> None:
    """Add one address's waits to its lock's stacks, the unsampled ones
    spread over the sampled stacks of the same address."""
    for sh in spread(entries, lambda e: bool(raw.frames(e.stack))):
        fr = raw.frames(sh.entry.stack)
        key = tuple(kb.caller_frames(fr)[:MAX_FRAMES]) if fr else ()
        acc.add_stack(key, kb.syscall(fr) if fr else None, sh.count, sh.wait_ns, sh.sampled)


def _lock_of(addr: int, entries: list[Contention], raw: RawProbe, groups: dict[str, LockAcc],
             verified: dict[int, Verified], slabs: dict[int, SlabEntry], kb: Knowledge) -> LockAcc:
    """The named lock an address's waits add up to: verified, inferred or site."""
    with_stack = [e for e in entries if raw.frames(e.stack)]
    kind = lock_kind(entries[0].flags)[0]
    v = verified.get(addr) or _slab_verified(slabs.get(addr), kind)
    if v:
        acc = groups.get(v.name) or LockAcc(v.name, v.lock_class, "verified", kind)
        acc.object = acc.object or v.object
        return acc
    rule = _vote(with_stack, raw, kb)
    if rule:
        acc = groups.get(rule.name) or LockAcc(rule.name, rule.lock_class, "inferred", kind)
        acc.component, acc.explain, acc.rule = rule.component, rule.explain, rule.ref or rule.name
        return acc
    site = kb.site(raw.frames(with_stack[0].stack)) if with_stack else NO_STACK
    name = f"{kind} @ {site}"
    return groups.get(name) or LockAcc(name, name, "site", kind)


def name_locks(raw: RawProbe, workers: int, window_ns: int, kb: Knowledge | None = None) -> list[Lock]:
    """Group the probe's (lock, flags, stack) aggregates into named locks,
    heaviest first."""
    kb = kb or default_knowledge()
    verified = verified_table(raw)
    slabs = slab_table(raw)
    groups: dict[str, LockAcc] = {}
    for addr, entries in raw.by_lock().items():
        entries.sort(key=lambda e: -e.total_ns)
        acc = _lock_of(addr, entries, raw, groups, verified, slabs, kb)
        groups[acc.name] = acc
        acc.addresses.add(addr)
        for e in entries:
            acc.add(e.count, e.total_ns, e.max_ns, lock_kind(e.flags)[1])
        _add_stacks(acc, entries, raw, kb)
    return heaviest_first([acc.to_lock(workers, window_ns, lambda k: k[0] if k else NO_STACK, format_addr)
                           for acc in groups.values()])


NAMED_TIERS = ("verified", "inferred")


def named_share(locks: list[Lock]) -> float | None:
    """The share of lock wait time attributed to a verified or inferred name
    (not an address or a bare call site); None when there was no lock wait."""
    total = sum(lk.wait_ns for lk in locks)
    if total <= 0:
        return None
    return sum(lk.wait_ns for lk in locks if lk.tier in NAMED_TIERS) / total


SPIN_MODE = "optimistic spin (sampled)"


def _caller_match(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def spinning_samples(raw: RawProbe, kb: Knowledge):
    """(sample, its frames) of the CPU samples inside untraced rwsem
    spinning, outside any traced wait."""
    for smp in raw.cpu_samples:
        fr = raw.sample_frames(smp.stack)
        if not smp.in_lock_wait and fr and kb.untraced_spinning(fr):
            yield smp, fr


def add_sampled_spin(locks: list[Lock], raw: RawProbe, workers: int, window_ns: int,
                     kb: Knowledge | None = None) -> list[Lock]:
    """Add rwsem optimistic spinning, which fires no tracepoint, estimated from
    CPU samples: a sample inside the spin (and outside any traced wait) counts
    one sample period for the rwsem whose traced waits come from the same
    calling context; without one, for the lock the rules name."""
    kb = kb or default_knowledge()
    period = raw.sample_period_ns or 0
    if not period:
        return locks
    by_name = {lk.name: lk for lk in locks}
    for smp, fr in spinning_samples(raw, kb):
        callers = kb.callers_after_lock(fr)
        best, score = None, 0
        for lk in locks:
            if lk.kind != "rwsem":
                continue
            m = max((_caller_match(callers, st.frames) for st in lk.stacks), default=0)
            if m > score or (m == score and m and lk.wait_ns > best.wait_ns):
                best, score = lk, m
        if best is None:
            rule = kb.infer("rwsem", fr)
            name = rule.name if rule else f"rwsem @ {callers[0] if callers else '[unknown]'}"
            best = by_name.get(name)
            if best is None:
                best = Lock(name=name, lock_class=rule.lock_class if rule else name,
                            tier="inferred" if rule else "site", kind="rwsem",
                            component=rule.component if rule else None, explain=rule.explain if rule else None,
                            rule=(rule.ref or rule.name) if rule else None, instances=0,
                            stacks=[StackSummary(frames=callers[:MAX_FRAMES],
                                                 site=callers[0] if callers else "[unknown]",
                                                 syscall=kb.syscall(fr), count=0, wait_ns=0)])
                locks.append(best)
                by_name[name] = best
        ns = smp.count * period
        best.sampled_spin_ns += ns
        best.wait_ns += ns
        best.modes[SPIN_MODE] = best.modes.get(SPIN_MODE, 0) + ns
    for lk in locks:
        lk.wait_share = wait_share(lk.wait_ns, workers, window_ns)
    return heaviest_first(locks)


def offcpu_class(state: int, in_lock_wait: bool) -> str:
    if in_lock_wait:
        return "lock"          # already counted as a lock wait
    if state == 0:
        return "preempted"     # runnable, waiting for a CPU
    if state & 0x2:
        return "blocked"       # uninterruptible (D): I/O, page lock, journal...
    if state & 0x1:
        return "sleep"         # interruptible (S): waiting for an event
    if state & 0x80:
        return "exit"
    return "other"


def classify_offcpu(frames: list[str], state: int | None = None, kb: Knowledge | None = None) -> str:
    """The class of an off-CPU wait that is not a lock wait, from its kernel
    stack at switch-out (the [[offcpu]] rules of locks.toml): block I/O,
    journal commit wait, page lock / writeback, RCU synchronize, pipe/socket
    wait, sleep, ...; a runnable task (state 0) is preempted; a stack no rule
    matches falls back to the task state (blocked, sleep, other)."""
    kb = kb or default_knowledge()
    if state == 0:
        return "preempted"
    rule = kb.offcpu_rule(frames)
    if rule:
        return rule.wait_class
    return offcpu_class(state, False) if state is not None else "other"


def offcpu_summary(raw: RawProbe, workers: int, window_ns: int, kb: Knowledge | None = None,
                   limit: int = 20) -> list[OffCpu]:
    kb = kb or default_knowledge()
    groups: dict[tuple, OffCpu] = {}
    heaviest: dict[tuple, int] = {}
    for e in raw.offcpu:
        fr = raw.frames(e.stack)
        cls = "lock" if e.in_lock_wait else classify_offcpu(fr, e.state, kb)
        site = kb.site(fr, off_cpu=True)
        key = (cls, site)
        g = groups.get(key)
        if g is None:
            g = groups[key] = OffCpu(wait_class=cls, state=e.state, in_lock_wait=e.in_lock_wait,
                                     site=site)
            heaviest[key] = -1
        g.count += e.count
        g.wait_ns += e.total_ns
        g.max_ns = max(g.max_ns, e.max_ns)
        if e.total_ns > heaviest[key]:
            heaviest[key] = e.total_ns
            g.frames = kb.caller_frames(fr, off_cpu=True)[:MAX_FRAMES]
    out = sorted(groups.values(), key=lambda g: -g.wait_ns)
    for g in out:
        g.wait_share = wait_share(g.wait_ns, workers, window_ns)
    return out[:limit]
