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

from dataclasses import dataclass
from typing import Callable

from .. import sleepkinds
from . import kimage, ktext, lockfields, objlocks, sharing
from .lockdesc import display_path, file_names, lock_kind  # noqa: F401 (display_path: naming's API)
from ..user import futexspin, usdt, userlocks
from .knowledge import Knowledge, default as default_knowledge
from ..lockacc import MAX_FRAMES, LockAcc, heaviest_first, spread, wait_share
from .lockfields import LockField
from ..user.userlocks import COMPONENT as USER_SPACE
from .slab import consistent as slab_consistent
from lockscope.model.jsondata import format_addr
from lockscope.model.probedata import Contention, ObjLock, RawProbe, SlabEntry, TaskObject
from lockscope.model.record import Lock, OffCpu, StackSummary

NO_STACK = "[no stack sampled]"


@dataclass(frozen=True)
class Verified:
    lock_class: str
    name: str
    object: str
    component: str | None = None
    explain: str | None = None


def _task_name(t: TaskObject, lf: LockField) -> Verified:
    # named by command, not pid, so that the name is the same in every run
    # of a sweep; the pid is in the object, and processes that share a
    # command count as instances of one name
    comm, proc = t.comm, f"{t.comm} (pid {t.tgid})"
    cls = lf.lock_class
    if lf.named == "cpu":
        cpu = "?" if t.cpu is None else t.cpu
        name, obj = f"{cls} (runqueue of CPU {cpu})", f"runqueue of CPU {cpu}"
    elif lf.named == "memcg":
        name, obj = f"{cls} of the memory cgroup of {comm} (node 0)", f"memory cgroup of {proc}, node 0"
    else:
        name, obj = f"{cls} of {comm}", proc
    return Verified(cls, name, obj, lf.component, lf.explain)


def verified_table(raw: RawProbe) -> dict[int, Verified]:
    """Lock address -> verified name, from the objects the iterators reached
    and the lock fields of analyzer/kernel/lockfields.toml."""
    scratch, mounts, objects = raw.scratch, raw.mounts, raw.objects
    fields = lockfields.default()
    table: dict[int, Verified] = {}
    for f in objects.files:
        names = file_names(f, mounts, scratch)
        for lf in fields.of_record("file"):
            a = f.addresses.get(lf.key)
            named = names[lf.named]
            if not a or a in table or named is None or lf.fstype not in (None, f.fstype):
                continue
            obj, suffix = named
            table[a] = Verified(lf.lock_class, f"{lf.lock_class} of {obj}{suffix}", obj, lf.component, lf.explain)
    _add_wait_locks(table, raw.layout)
    for t in objects.tasks:
        for lf in fields.of_record("task"):
            a = t.addresses.get(lf.key)
            if a and a not in table:
                table[a] = _task_name(t, lf)
    for e in raw.objlocks.entries if raw.objlocks else ():
        if e.addr not in table:
            table[e.addr] = _objlock_name(e)
    return table


def _objlock_name(e: ObjLock) -> Verified:
    """A lock member of an object behind a file, its member path from BTF
    (analyzer/kernel/objlocks.py): `pipe_inode_info->mutex of pipe:[1234] (fd 3 of prog)`."""
    cls = f"{e.struct}->{e.member}"
    return Verified(cls, f"{cls} of {e.object}", e.object, e.component,
                    f"{e.lock} member of the struct {e.struct} behind the workload's {e.kind} (kernel BTF)")


def slab_table(raw: RawProbe) -> dict[int, SlabEntry]:
    """Lock address -> its slab object and lock field, for the addresses
    the probe resolved to a typed slab cache (see analyzer/kernel/slab.py)."""
    return {e.addr: e for e in (raw.slab.entries if raw.slab else []) if e.lock_field}


def _slab_verified(e: SlabEntry | None, family: str) -> Verified | None:
    """A verified name for a lock in a slab object, when the BTF field at its
    offset is a lock of the family the contention event reported."""
    if not e or not e.lock_field or not slab_consistent(e.lock or "", family):
        return None
    if e.object:
        # named by kind and key, not by id: the same in every run of a sweep where the key is
        # fixed (one id per run otherwise); the id is in the object
        return Verified(e.lock_field, f"{e.lock_field} of a {e.object}",
                        f"{e.object}, id {e.object_id}, a {e.cache} object")
    return Verified(e.lock_field, f"{e.lock_field} ({e.cache} object)", f"{e.cache} object")


def _add_wait_locks(table: dict[int, Verified], layout: dict) -> None:
    """Name the internal wait_lock (a raw spinlock) of each named mutex and
    rw_semaphore after it."""
    sleeping = lockfields.default().sleeping_types()
    for addr, v in list(table.items()):
        off = layout.get(f"{sleeping.get(v.lock_class, '')}.wait_lock")
        if off is not None and addr + off not in table:
            cls = f"{v.lock_class}.wait_lock"
            explain = f"the spinlock of the waiter list inside {v.lock_class}" + (f" ({v.explain})" if v.explain else "")
            table[addr + off] = Verified(cls, cls + v.name[len(v.lock_class):], v.object, v.component, explain)


def _vote(entries: list[Contention], raw: RawProbe, kb: Knowledge, static: bool | None = None):
    """The rule matching the most wait among an address's stacks: one stack
    can mislead when a lock is inlined into many callers. Rules that can
    live where the address is (`static`, see Knowledge.infer) come first."""
    votes: dict[str, list] = {}
    for e in entries:
        rule = kb.infer(lock_kind(e.flags)[0], raw.frames(e.stack), static)
        if rule:
            votes.setdefault(rule.name, [rule, 0])[1] += e.total_ns + 1
    return max(votes.values(), key=lambda v: (v[0].fits(static), v[1]))[0] if votes else None


def _add_stacks(acc: LockAcc, entries: list[Contention], raw: RawProbe, kb: Knowledge) -> None:
    """Add one address's waits to its lock's stacks, the unsampled ones
    spread over the sampled stacks of the same address."""
    for sh in spread(entries, lambda e: bool(raw.frames(e.stack))):
        fr = raw.frames(sh.entry.stack)
        key = tuple(kb.caller_frames(fr)[:MAX_FRAMES]) if fr else ()
        acc.add_stack(key, kb.syscall(fr) if fr else None, sh.count, sh.wait_ns, sh.sampled)


def _where(raw: RawProbe, addr: int) -> tuple[bool | None, str]:
    """(whether the address is static data of the kernel image or a module,
    None when the record cannot say; in words: "the kernel image", "module
    ext4"...)."""
    img = raw.kernel_image
    if img is None:
        return None, ""
    where, module = kimage.region(img, addr)
    if where == kimage.STATIC_KERNEL:
        return True, "the kernel image"
    if where == kimage.STATIC_MODULE:
        return True, f"module {module}" if module else "a module"
    return False, ""


def _symbol_lock(addr: int, sym: str, kind: str, rule, raw: RawProbe, groups: dict[str, LockAcc]) -> LockAcc:
    """A static lock resolved to its variable (kallsyms with data symbols, a
    System.map or a vmlinux): verified."""
    var = sym.split("+", 1)[0]
    same = rule is not None and rule.global_ and rule.lock_class == var
    name = rule.name if same and sym == var else sym
    acc = groups.get(name) or LockAcc(name, var if sym == var else sym, "verified", kind)
    acc.object = acc.object or "kernel image (static data)"
    src = raw.kernel_image.symbols_from or "a symbol table"
    acc.explain = acc.explain or (f"static variable {sym} of the kernel image (address resolved with {src})"
                                  + (f": {rule.explain}" if same and rule.explain else ""))
    if same:
        acc.component, acc.rule = rule.component, rule.ref or rule.name
    return acc


def _lock_of(addr: int, entries: list[Contention], raw: RawProbe, groups: dict[str, LockAcc],
             verified: dict[int, Verified], slabs: dict[int, SlabEntry], kb: Knowledge) -> LockAcc:
    """The named lock an address's waits add up to: verified, inferred or site."""
    with_stack = [e for e in entries if raw.frames(e.stack)]
    kind = lock_kind(entries[0].flags)[0]
    v = verified.get(addr) or _slab_verified(slabs.get(addr), kind)
    if v:
        acc = groups.get(v.name) or LockAcc(v.name, v.lock_class, "verified", kind)
        acc.object = acc.object or v.object
        acc.component, acc.explain = acc.component or v.component, acc.explain or v.explain
        return acc
    static, image = _where(raw, addr)
    rule = _vote(with_stack, raw, kb, static)
    site = kb.site(raw.frames(with_stack[0].stack)) if with_stack else NO_STACK
    sym = raw.kernel_image.symbols.get(format_addr(addr)) if static else None
    if sym:
        return _symbol_lock(addr, sym, kind, rule, raw, groups)
    found = ktext.find(addr, [raw.frames(e.stack) for e in with_stack], raw.kernel_image.text_calls) \
        if static else None
    if found:
        return ktext.lock_acc(found, kind, groups)
    if rule and rule.fits(static):
        acc = groups.get(rule.name) or LockAcc(rule.name, rule.lock_class, "inferred", kind)
        acc.component, acc.rule = rule.component, rule.ref or rule.name
        acc.explain = acc.explain or (f"static data of {image}, one global lock; taken in {site}: {rule.explain}"
                                      if static and rule.global_ else rule.explain)
        return acc
    doubt = ""
    if rule:        # the rule names a lock that cannot live at this address
        doubt = (f"; the rule {rule.name!r} matches the stack but names "
                 + ("a lock of an object allocated at run time" if static else "a global variable")
                 + ", which this address is not")
    if static:
        name = f"static {kind} of {image} taken in {site}"
        acc = groups.get(name) or LockAcc(name, name, "site", kind)
        acc.object = acc.object or f"{image} (static data)"
        acc.explain = acc.explain or (
            f"one global lock: its address is static data of {image}, but this kernel exports no data "
            f"symbols and no rule of the knowledge base names a global lock taken there, so the variable "
            f"is not known (--vmlinux with a System.map or vmlinux names it){doubt}")
        return acc
    name = f"{kind} @ {site}"
    acc = groups.get(name) or LockAcc(name, name, "site", kind)
    # a call site is the last resort: say where the walk looked
    acc.explain = acc.explain or "; ".join(
        r for r in (objlocks.not_found_reason(raw.objlocks, addr), f"not in static data{doubt}" if doubt else "")
        if r)
    return acc


def futex_charges(raw: RawProbe, folded=None) -> list:
    """The kernel lock waits spun inside futex syscalls on the word of a
    user-space lock, which count as that lock's (analyzer/user/futexspin.py).
    `folded`: as userlocks.name_futexes's (the futex sleeps USDT waits
    count), by default usdt.folded_futexes, as the runner passes it."""
    if not raw.futex_kernel:
        return []
    if folded is None:
        folded = usdt.folded_futexes(raw)
    return futexspin.charges(raw, userlocks.lock_words(raw, folded))


def futex_spin(raw: RawProbe, folded=None) -> list[tuple]:
    """futex_charges with the name of each kernel lock, for
    userlocks.name_futexes(kernel_spin=...)."""
    charged = futex_charges(raw, folded)
    names = address_names(raw, {c.lock for c in charged})
    return [(c, names.get(c.lock, format_addr(c.lock))) for c in charged]


def kernel_waits(raw: RawProbe) -> dict[int, list[Contention]]:
    """The contention aggregates of each kernel lock address that are its
    own: less the waits spun inside futex calls on a user-space lock's word
    (futex_charges); an address left with none is not in."""
    return futexspin.remaining(raw, futex_charges(raw))


def address_names(raw: RawProbe, addrs: set[int], kb: Knowledge | None = None) -> dict[int, str]:
    """The name each kernel lock address of `addrs` gets from all its waits."""
    kb = kb or default_knowledge()
    verified, slabs, by_lock = verified_table(raw), slab_table(raw), raw.by_lock()
    out = {}
    for addr in addrs:
        entries = sorted(by_lock.get(addr, []), key=lambda e: -e.total_ns)
        if entries:
            out[addr] = _lock_of(addr, entries, raw, {}, verified, slabs, kb).name
    return out


def name_locks(raw: RawProbe, workers: int, window_ns: int, kb: Knowledge | None = None) -> list[Lock]:
    """Group the probe's (lock, flags, stack) aggregates into named locks,
    heaviest first. Waits spun inside a futex syscall on the word of a
    user-space lock are that lock's (futex_charges): left out here; an
    address is named from all its waits, and one with none left is no lock
    of its own."""
    kb = kb or default_knowledge()
    verified = verified_table(raw)
    slabs = slab_table(raw)
    groups: dict[str, LockAcc] = {}
    left = kernel_waits(raw)
    for addr, entries in raw.by_lock().items():
        mine = left.get(addr)
        if not mine:
            continue
        entries.sort(key=lambda e: -e.total_ns)
        mine.sort(key=lambda e: -e.total_ns)
        acc = _lock_of(addr, entries, raw, groups, verified, slabs, kb)
        groups[acc.name] = acc
        acc.addresses.add(addr)
        for e in mine:
            acc.add(e.count, e.total_ns, e.max_ns, lock_kind(e.flags)[1])
        _add_stacks(acc, mine, raw, kb)
    by_addr = sharing.threads_by_address(raw)
    out = []
    for acc in groups.values():
        lk = acc.to_lock(workers, window_ns, lambda k: k[0] if k else NO_STACK, format_addr)
        static = all(_where(raw, a)[0] for a in acc.addresses)
        if raw.waiters is not None or static:
            lk.waiters, lk.shared_by, lk.sharing = sharing.classify(acc.addresses, by_addr, static)
        out.append(lk)
    return heaviest_first(out)


def rename_static(rec, table: "kimage.SymbolTable") -> bool:
    """Name a record's static kernel locks by their variables in `table`
    (`lockscope analyze --vmlinux`): the kernel locks are named again from
    the raw data, the user-space ones kept. False when the record has no
    image bounds (recorded before issue 11, or without the probe)."""
    raw = rec.probe.raw
    if raw is None or raw.kernel_image is None:
        return False
    kimage.resolve_static(raw.kernel_image, {e.lock for e in raw.contention}, table)
    window = int(round(rec.probe.window_s * 1e9))
    kernel = add_sampled_spin(name_locks(raw, rec.workers, window), raw, rec.workers, window)
    user = [lk for lk in rec.locks if lk.component == USER_SPACE]
    rec.locks = sorted(kernel + user, key=lambda lk: -lk.wait_ns)
    return True


NAMED_TIERS = ("verified", "inferred")


def named_share(locks: list[Lock]) -> float | None:
    """The share of lock wait time attributed to a verified or inferred name
    (not an address or a bare call site); None when there was no lock wait."""
    total = sum(lk.wait_ns for lk in locks)
    if total <= 0:
        return None
    return sum(lk.wait_ns for lk in locks if lk.tier in NAMED_TIERS) / total


SPIN_MODE = "optimistic spin (sampled)"


def common_prefix(a: list[str], b: list[str]) -> int:
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
            m = max((common_prefix(callers, st.frames) for st in lk.stacks), default=0)
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
                   limit: int = 40, role_of: dict[int, str] | None = None,
                   kind_of: Callable[[str, int], str] | None = None) -> list[OffCpu]:
    """Off-CPU time by (class, site), heaviest first; with `role_of` (tid ->
    role, analyzer/roles.py) also by role, each group with its sleep kind:
    `kind_of(class, tid)` where given (a parent's wait on its workers is
    idle: roles.sleep_kind), else the class's."""
    kb = kb or default_knowledge()
    kinds = sleepkinds.default()
    groups: dict[tuple, OffCpu] = {}
    heaviest: dict[tuple, int] = {}
    for e in raw.offcpu:
        fr = raw.frames(e.stack)
        cls = "lock" if e.in_lock_wait else classify_offcpu(fr, e.state, kb)
        site = kb.site(fr, off_cpu=True)
        role = (role_of.get(e.tid) or f"pid {e.tid}") if role_of is not None else None
        kind = (kind_of(cls, e.tid) if kind_of else kinds.class_kind(cls)) if role_of is not None else None
        key = (cls, site, role, kind)
        g = groups.get(key)
        if g is None:
            g = groups[key] = OffCpu(wait_class=cls, state=e.state, in_lock_wait=e.in_lock_wait,
                                     site=site, role=role, kind=kind)
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
