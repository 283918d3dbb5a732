"""Who held a lock while others waited, where it let go, and what it did
meanwhile (probes/holders.bpf.h; record /3, `Lock.holders`).

The probe charges each lock wait that a release ended (a kernel mutex or
rwsem waiter woken by the unlocking thread, a futex waiter woken by the
releaser's FUTEX_WAKE) to the releaser's stack there, the end of its
critical section, and splits the releaser's time over that wait into on
CPU, off CPU by kernel stack and state, waiting on another lock or futex, and
waiting for this same lock (queued, not holding it).

The release stacks are symbolized at record time (holdstacks.py).
- `attach(locks, raw)`: each named lock gets its holders by release site:
  the share of its release-ended waits each site ended, how many, and what
  its holders did while holding (on CPU, preempted, an off-CPU class such as
  a journal commit, another lock by its name). Releases walked without a
  stack scale the lock's sampled sites alike (the sampling is random: their
  split is the sampled releases' split), as the waits' own stacks are
  (lockacc.spread).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .kernel import naming
from .kernel.knowledge import Knowledge
from .kernel.naming import default_knowledge
from .user import userlocks
from . import sleepkinds
from .holdstacks import PY_SITE
from lockscope.model.holddata import KERNEL_SPACE, Release, ReleaseActivity
from lockscope.model.jsondata import format_addr, parse_addr
from lockscope.model.probedata import RawProbe
from lockscope.model.record import Holder, HolderTime, Lock

TOP_HOLDERS = 5              # release sites kept per lock
FILE_LOCK = "file lock"      # analyzer/kernel/filelocks.py's kind: holders by process, their activity from here
TOP_ACTIVITIES = 6           # parts of the holders' time kept per site
MIN_SHARE = 0.005            # parts below half a percent are left out
ON_CPU, PREEMPTED, LOCK, UNKNOWN = "on-cpu", "preempted", "lock", "unknown"
# kernel functions between a lock's release and the wake-up of its waiter
# (skipped to find the code that released it)
RELEASE_INTERNAL = ("try_to_wake_up", "wake_up_q", "wake_up_process", "__wake_up", "rwsem_wake", "rwsem_mark_wake",
                    "__mutex_unlock_slowpath", "mutex_unlock", "up_write", "up_read", "up", "__up",
                    "__rt_mutex_unlock", "rt_mutex_unlock", "percpu_up_write", "percpu_up_read",
                    "__percpu_up_read", "bpf_", "__bpf_", "__traceiter_", "__probestub_")


# ---- holders of the named locks ------------------------------------------------

@dataclass
class _Site:
    """One release site of one lock being added up."""
    stack: list[str]
    who: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    holds: float = 0.0
    wait: float = 0.0
    offcpu: float = 0.0
    queued: float = 0.0
    unseen: float = 0.0
    parts: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    frames: dict[tuple[str, str], list[str]] = field(default_factory=dict)


def attach(locks: list[Lock], raw: RawProbe | None, kb: Knowledge | None = None) -> None:
    """Each lock of `locks` with releases in `raw` gets its holders
    (Lock.holders, heaviest first); a kernel spinlock or rwlock gets a
    holder_note instead (they keep no owner and hand over without a wake-up)."""
    for lk in locks:
        if lk.kind in ("spinlock", "rwlock") and not _user_lock(lk):
            lk.holder_note = "holder not recorded: spinlocks keep no owner and wake no waiter"
    if raw is not None and raw.go_releases:
        _go_holders(locks, raw.go_releases)
    if raw is not None and raw.holds is not None:
        _release_holders(locks, raw, kb)
    for lk in locks:
        if (lk.rule or "").startswith("usdt ") and not lk.holders:
            lk.holder_note = "holder not recorded: no release ended a wait the program's probes name"


def _release_holders(locks: list[Lock], raw: RawProbe, kb: Knowledge | None) -> None:
    kb = kb or default_knowledge()
    name_of = lock_names(locks, raw, {r.lock for r in raw.holds if r.kernel} |
                         {a.act_lock for a in raw.hold_activity or [] if (a.act_lock or 0) >= KERNEL_SPACE})
    rows: dict[str, list[Release]] = defaultdict(list)
    for r in raw.holds:
        name = name_of(r.lock, r.tgid)       # a USDT-named lock's id too (lock_names)
        if name:
            rows[name].append(r)
    acts: dict[tuple, list[ReleaseActivity]] = defaultdict(list)
    for a in raw.hold_activity or []:
        acts[(a.lock, a.tgid, a.stack, a.sample, a.py_stack)].append(a)
    for lk in locks:
        if lk.name in rows and lk.kind == FILE_LOCK:
            _file_lock_activity(lk, rows[lk.name], acts, raw, kb, name_of)
        elif lk.name in rows:
            lk.holders = _holders(lk.name, rows[lk.name], acts, raw, kb, name_of)
            _coverage(lk, sum(r.count for r in rows[lk.name]), sum(r.wait_ns for r in rows[lk.name]))


def _file_lock_activity(lk: Lock, rows: list[Release], acts: dict, raw: RawProbe, kb: Knowledge, name_of) -> None:
    """A file lock's holders are the processes its kernel blocker names
    (analyzer/kernel/filelocks.py), each wait's; what each did while it held
    the lock comes from the releases that woke its blocked waiters (keyed by
    the file's inode), by the releasing process's name. The waits those
    releases ended, and their time, say how much of the lock's wait that
    covers (held_share)."""
    by_who: dict[str, _Site] = {}
    for r in rows:
        s = by_who.setdefault(r.waker_comm or f"pid {r.waker_tgid}", _Site(stack=[]))
        _add(s, lk.name, r, acts.get((r.lock, r.tgid, r.stack, r.sample, r.py_stack), []), raw, kb, name_of)
    for h in lk.holders:
        s = by_who.get(h.site)
        if s is not None and s.wait:
            h.while_holding = _holder(h.site, s, s.wait, (1.0, 1.0)).while_holding
    held = sum(r.wait_ns for r in rows)
    lk.held_share = round(min(1.0, held / lk.wait_ns), 4) if lk.wait_ns else None


def _coverage(lk: Lock, releases: int, held_ns: float) -> None:
    """Lock.holders_cover and held_share from the waits the releases ended
    (how many, and their time until the release)."""
    lk.holders_cover = round(min(1.0, releases / lk.count), 4) if lk.count else None
    lk.held_share = round(min(1.0, held_ns / lk.wait_ns), 4) if lk.wait_ns else None


def _go_holders(locks: list[Lock], releases) -> None:
    """Go sync.Mutex/RWMutex holders: the waits of each lock object by the
    releasing goroutine's stack (gomutex.bpf.c's go_releases), by the
    program's function that unlocked; what the releaser did meanwhile is
    not recorded (goroutines move between threads)."""
    by_lock: dict[str, list] = defaultdict(list)
    for r in releases:
        by_lock[f"{r.tgid}:{format_addr(r.lock)}"].append(r)
    for lk in locks:
        rows = [r for a in lk.addresses for r in by_lock.get(a, [])]
        if not rows or not lk.kind.startswith("sync."):
            continue
        sites: dict[str, list] = defaultdict(lambda: [0, 0, []])
        for r in rows:
            key = userlocks.site(r.frames or [])
            acc = sites[key]
            acc[0] += r.count
            acc[1] += r.total_ns
            if not acc[2] and r.frames:
                acc[2] = _shown(r.frames, key)
        total = sum(v[1] for v in sites.values()) or 1
        lk.holders = sorted((Holder(site=k, stack=v[2], share=round(v[1] / total, 4), holds=v[0], hold_ns=v[1])
                             for k, v in sites.items()), key=lambda h: -h.hold_ns)[:TOP_HOLDERS]
        _coverage(lk, sum(r.count for r in rows), total)
        lk.holder_note = "what the holders did meanwhile is not recorded for goroutines (they move between threads)"


def label(lk: Lock) -> str:
    """What the holders of a lock are called: a condition variable waited on
    as a lock is not held but signalled; its "holders" are who woke it."""
    return "woken by" if "cond" in lk.kind.lower() else "held by"


def _user_lock(lk: Lock) -> bool:
    return any(":" in a for a in lk.addresses)


def lock_names(locks: list[Lock], raw: RawProbe, kernel_addrs: set[int]):
    """lock address (kernel, of `kernel_addrs`) or (process, futex word) ->
    the name of the lock it belongs to, or None."""
    kernel = naming.address_names(raw, kernel_addrs)
    # a file lock's waits and releases by its file's inode (analyzer/kernel/filelocks.py)
    kernel.update({parse_addr(a): lk.name for lk in locks if lk.kind == FILE_LOCK for a in lk.addresses})
    user = {a: lk.name for lk in locks for a in lk.addresses if ":" in a}
    # the ids of locks a program's USDT probes name
    user.update({f"{r.tgid}:{format_addr(r.lock)}": r.usdt_lock for r in raw.holds or [] if r.usdt_lock})
    user.update({f"{a.tgid}:{format_addr(a.act_lock)}": a.act_usdt_lock for a in raw.hold_activity or []
                 if a.act_usdt_lock and a.act_lock})
    table = sleepkinds.default()
    starts = {r.primitive for r in table.futex_rules}

    def name_of(addr: int, tgid: int) -> str | None:
        if addr >= KERNEL_SPACE:
            return kernel.get(addr)
        for a in [addr] + [table.object_start(p, addr) for p in starts]:
            name = user.get(f"{tgid}:{format_addr(a)}")
            if name:
                return name
        return None
    return name_of


def release_site(frames: list[str], kernel: bool, python: bool = False) -> str:
    """The code that released the lock: for a kernel lock the first kernel
    function past the wake-up and unlock functions, for a futex the
    innermost frame of the program's own code, for CPython's GIL (`python`:
    the releaser's Python frames) the Python function that held it."""
    if python:
        return frames[0]
    if not kernel:
        return userlocks.site(frames)
    for fr in frames:
        fn = userlocks.frame_function(fr).split("+", 1)[0]
        if not fn.startswith(RELEASE_INTERNAL) and not fn.startswith("["):
            return fn
    return "[unknown]"


def _holders(own: str, rows: list[Release], acts: dict, raw: RawProbe, kb: Knowledge, name_of) -> list[Holder]:
    stacks = raw.hold_stacks or {}
    sites: dict[str, _Site] = {}
    # each site from its own sampled releases; the releases walked without a
    # stack scale them all alike (their split is the sampled one's)
    for r in rows:
        frames = stacks.get(r.site_stack or "", [])
        if not frames:
            continue
        key = release_site(frames, r.kernel, python=r.site_stack.startswith(PY_SITE))
        if key not in sites:
            sites[key] = _Site(stack=_shown(frames, key))
        _add(sites[key], own, r, acts.get((r.lock, r.tgid, r.stack, r.sample, r.py_stack), []), raw, kb, name_of)
    if not sites:
        return []
    sampled = sum(s.wait for s in sites.values()) or 1.0
    scale = (sum(r.wait_ns for r in rows) / sampled, sum(r.count for r in rows) / (sum(s.holds for s in sites.values())
                                                                                 or 1.0))
    out = [_holder(k, s, sampled, scale) for k, s in sites.items()]
    return sorted(out, key=lambda h: -h.hold_ns)[:TOP_HOLDERS]


def _shown(frames: list[str], site: str) -> list[str]:
    """A release stack as shown: from the releasing code (`site`) outwards."""
    for i, fr in enumerate(frames):
        if userlocks.frame_function(fr).split("+", 1)[0] == site or fr == site:
            return frames[i:i + 24]
    return frames[:24]


def _add(s: _Site, own: str, r: Release, acts: list[ReleaseActivity], raw: RawProbe, kb: Knowledge,
         name_of) -> None:
    s.holds += r.count
    s.wait += r.wait_ns
    s.offcpu += r.offcpu_ns
    s.queued += r.queued_ns
    s.unseen += r.unseen_ns
    s.who[r.waker_comm or f"pid {r.waker_tgid}"] += r.count
    for a in acts:
        frames = raw.frames(a.act_stack)
        part = off_cpu_doing(frames, a.act_state, a.act_lock, a.tgid, kb, name_of)
        if part == (own, LOCK):      # another word of the same lock (a rwlock's readers' and writers'
            s.offcpu -= a.ns         # futexes): queued behind it, not holding it
            s.queued += a.ns
            continue
        s.parts[part] += a.ns
        # a preemption's stack is the thread's last walked one (offcpu.bpf.h), maybe another's
        if frames and a.act_state and part not in s.frames:
            s.frames[part] = kb.caller_frames(frames, off_cpu=True)[:12]


def off_cpu_doing(frames: list[str], state: int, act_lock: int | None, tgid: int, kb: Knowledge,
                  name_of) -> tuple[str, str]:
    """What a thread off CPU was doing, as (name, class): preempted (state
    0), waiting for a lock (by its name where `name_of` knows it), or an
    off-CPU class of its kernel stack (a journal commit, block I/O, ...)."""
    if state == 0:
        return "preempted", PREEMPTED
    if act_lock:
        lock = name_of(act_lock, tgid)
        return (lock, LOCK) if lock else ("another lock" if act_lock >= KERNEL_SPACE else "a futex wait", LOCK)
    cls = naming.classify_offcpu(frames, state, kb)
    return cls, cls


def _holder(key: str, s: _Site, sampled: float, scale: tuple[float, float]) -> Holder:
    """A site's Holder: its share of the lock's sampled release-ended wait;
    hold time and holds scaled up (`scale`: wait, count) for the releases
    walked without a stack."""
    held = max(s.wait - s.queued, 1.0)
    parts = dict(s.parts)
    on = s.wait - s.offcpu - s.queued - s.unseen
    if on > 0:
        parts[("on CPU", ON_CPU)] = on
    if s.unseen > 0:
        parts[("not recorded", UNKNOWN)] = s.unseen
    times = [HolderTime(name=n, wait_class=c, share=round(v / held, 4), frames=s.frames.get((n, c), []))
             for (n, c), v in sorted(parts.items(), key=lambda kv: -kv[1]) if v / held >= MIN_SHARE]
    who = max(s.who, key=s.who.get) if s.who else ""
    return Holder(site=key, stack=s.stack, share=round(s.wait / sampled, 4), holds=round(s.holds * scale[1]),
                  hold_ns=round(s.wait * scale[0]), who=who, while_holding=times[:TOP_ACTIVITIES])


# ---- what the holders did, and the cause behind a lock ------------------------

COVER_MIN = 0.5              # holders must have ended this part of a lock's waits to speak for it,
HELD_MIN = 0.25              # the lock been held for this part of its wait time (not wake-up latency),
DOING_MIN = 0.5              # and they spent this part of their holds on one thing


@dataclass
class Step:
    """One link of a chain: `lock`'s holders (at `site`) spent `share` of
    their holds `doing` (of class `doing_class`)."""
    lock: str
    site: str
    doing: str
    doing_class: str
    share: float


def doing(lk: Lock) -> tuple[str, str, float] | None:
    """What a lock's holders did most while others waited, over its sites
    weighted by hold time: (what, class, share of their holds), when the
    holders ended at least COVER_MIN of its waits, it was held for at least
    HELD_MIN of its wait time, and one thing took at least DOING_MIN of
    their holds. Sleeping in several off-CPU classes counts
    as one thing (an fdatasync waits in writeback and in block I/O): "off
    CPU: a, b"."""
    if not lk.holders or (lk.holders_cover or 0) < COVER_MIN or (lk.held_share or 0) < HELD_MIN:
        return None
    held = sum(h.hold_ns for h in lk.holders) or 1
    parts: dict[tuple[str, str], float] = defaultdict(float)
    for h in lk.holders:
        for t in h.while_holding:
            parts[(t.name, t.wait_class)] += t.share * h.hold_ns / held
    if not parts:
        return None
    (name, cls), share = max(parts.items(), key=lambda kv: kv[1])
    if share >= DOING_MIN:
        return name, cls, round(share, 4)
    asleep = {k: v for k, v in parts.items() if k[1] not in (ON_CPU, PREEMPTED, UNKNOWN, LOCK)}
    if sum(asleep.values()) >= DOING_MIN:
        names = [k[0] for k, _ in sorted(asleep.items(), key=lambda kv: -kv[1])][:3]
        return "off CPU: " + ", ".join(names), "offcpu", round(sum(asleep.values()), 4)
    return None


def chain(lk: Lock, locks: dict[str, Lock], depth: int = 3) -> list[Step]:
    """The chain behind a lock: its holders' main activity, and where that
    is another lock, that lock's holders' in turn (up to `depth` links;
    a lock met twice ends it)."""
    out: list[Step] = []
    seen = {lk.name}
    while lk is not None and len(out) < depth:
        d = doing(lk)
        if d is None:
            break
        site = lk.holders[0].site
        out.append(Step(lk.name, site, *d))
        nxt = locks.get(d[0]) if d[1] == LOCK else None
        if nxt is None or nxt.name in seen:
            break
        seen.add(nxt.name)
        lk = nxt
    return out


def cause_clause(steps: list[Step]) -> str | None:
    """The chain as words: "whose holders (flush_journal) are off CPU in block
    I/O, page lock / writeback for 85% of their holds", or None for an empty
    chain or holders that are simply running their critical section."""
    if not steps or (len(steps) == 1 and steps[0].doing_class == ON_CPU):
        return None
    parts = []
    for s in steps:
        if s.doing_class == ON_CPU:
            what = "on CPU"
        elif s.doing_class == PREEMPTED:
            what = "preempted (runnable, waiting for a CPU)"
        elif s.doing_class == LOCK:
            what = f"waiting on {s.doing}"
        elif s.doing.startswith("off CPU: "):
            what = f"off CPU ({s.doing.removeprefix('off CPU: ')})"
        else:
            what = f"off CPU in {s.doing}"
        parts.append(f"whose holders ({s.site}) are {what} for {s.share:.0%} of their holds")
    return ", ".join(parts)


def cause_of(steps: list[Step]) -> str:
    """What a chain ends in, as the root cause's name."""
    last = steps[-1]
    if last.doing_class == ON_CPU:
        return f"the critical section of {last.lock} in {last.site}"
    if last.doing_class == PREEMPTED:
        return f"the preemption of {last.lock}'s holders while they hold it"
    if last.doing_class == LOCK:
        return f"waiting on {last.doing} while holding {last.lock}"
    return f"sleeping in {last.doing.removeprefix('off CPU: ')} while holding {last.lock}"
