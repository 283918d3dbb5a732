"""User-space locks: futex waits named by ELF symbol or by user stack.

The futex probe (probes/futexwaits.bpf.h) aggregates futex waits by (process,
futex address, op, user stack); the loader adds the memory maps of those
processes, read while they were alive. Here:

- `resolve(data)` turns that into the record's raw form: every futex address
  resolved through the maps to a file, offset and, when it lies in a global or
  static object of the program or a library, the ELF symbol (STT_OBJECT)
  covering it; every user stack symbolized with the ELF function symbols
  (the separate debug file of a library, found by build id, when the library
  itself is stripped). Reading ELF files is done here, once, at record time.
- `name_futexes(raw, workers, window_ns)` groups the waits into `Lock`s from
  that raw form alone (testable offline): tier `verified` for an address
  resolved to a symbol (`pthread_mutex pmutex_global_lock in
  lockscope-workload`), tier `site` for heap, stack or anonymous memory,
  named by the innermost frame of the program outside the C library
  (`pthread_mutex @ worker_loop (heap)`).

The kind comes from the wait op and the C library frame the wait came from
(`__lll_lock_wait` -> pthread_mutex, `pthread_cond_wait` -> pthread_cond...).
Waits in pthread_join are a thread waiting for another to exit, not a lock:
they are left out of the locks (the off-CPU summary still has that time).
"""
from __future__ import annotations

import os
import re
from collections import defaultdict

from typing import Any

from .. import sleepkinds
from . import demangle, futexspin, libraries, runtimes, unwind
from ..lockacc import MAX_FRAMES, LockAcc, heaviest_first, spread
from .addrspace import PAGE, AddressSpace, elf_symbols, parse_maps  # noqa: F401 (userlocks' API)
from lockscope.model.jsondata import format_addr, from_dict, from_list, parse_addr
from lockscope.model.probedata import (FutexAddress, FutexKernelWait, FutexProbe, FutexWait, RawProbe, futex_key,
                                       heaviest)
from lockscope.model.loaderrows import FutexStackCopy
from lockscope.model.record import Lock
from lockscope.proberows import constant

NOT_WALKED = constant("STACK_NOT_SAMPLED")   # a futex aggregate's stack: counted without one
FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2 = 0, 6, 9, 11, 13
FUTEX_OP_WAITV = 0x100
OP_NAMES = {FUTEX_WAIT: "wait", FUTEX_LOCK_PI: "lock_pi", FUTEX_WAIT_BITSET: "wait_bitset",
            FUTEX_WAIT_REQUEUE_PI: "wait_requeue_pi", FUTEX_LOCK_PI2: "lock_pi2", FUTEX_OP_WAITV: "waitv"}
COMPONENT = "user space"



def resolve(data: dict) -> dict[str, Any]:
    """The futex part of the probe's data event, as kept in the record's raw
    section (RawProbe's futex fields): the heaviest aggregates, their stacks
    symbolized and their addresses resolved (while the ELF files are at hand).

    A walked wait with a copy of its user stack (`user_stack_copies`: the
    registers and top of the stack at the sleep, one per walked wait, the
    aggregate's `sample`) gets the stack unwound from it with the ELF CFI
    (analyzer/user/unwind.py), spliced with its frame-pointer stack, under a
    key of its own ("pid:cfiN", distinct stacks of a process numbered from 0)
    named by `FutexWait.user_stack`; the walked waits of one futex and thread
    with the same unwound stack are one aggregate. A walked wait without a
    copy (their room spent) is spread like an unwalked one: in code without
    frame pointers its frame-pointer stack stands for many call paths. The
    others keep the frame-pointer stack ("pid:stack"), unwound from the older
    probe's `user_stack_words` (256 bytes by stack id) where given."""
    if data.get("futex_probe") is None:
        return {}
    out: dict[str, Any] = {"futex_probe": from_dict(FutexProbe, data["futex_probe"])}
    if "futex" not in data:
        return out
    spaces = {int(tgid): AddressSpace(parse_maps(rows)) for tgid, rows in data.get("user_maps", {}).items()}
    stacks_raw = data.get("user_stacks", {})
    copies = _stack_copies(data.get("user_stack_copies") or [])
    words_raw = data.get("user_stack_words", {})
    addresses: dict[str, FutexAddress] = {}
    stacks: dict[str, list[str]] = {}
    unwound: dict[tuple[int, tuple[int, ...]], str] = {}     # (tgid, ips) -> key
    n_unwound: dict[int, int] = defaultdict(int)
    walked: dict[tuple, FutexWait] = {}                      # the walked waits, merged by stack
    plain = []
    for row in data["futex"]:
        e = from_dict(FutexWait, {k: v for k, v in row.items() if k != "sample"})
        space = spaces.get(e.tgid)
        copy = copies.get((e.tgid, e.tid, e.uaddr, e.op, e.stack, int(row.get("sample", 0))))
        if copy is not None and space is not None:
            ips = tuple(unwind.unwind(space, *copy, [parse_addr(a) for a in stacks_raw.get(str(e.stack), [])]))
            ukey = unwound.get((e.tgid, ips))
            if ukey is None:
                ukey = unwound[(e.tgid, ips)] = f"{e.tgid}:cfi{n_unwound[e.tgid]}"
                n_unwound[e.tgid] += 1
                stacks[ukey] = [space.symbolize(a) for a in ips]
            e.user_stack = ukey
            same = walked.get((e.tgid, e.tid, e.uaddr, e.op, ukey, e.in_usdt))
            if same is None:
                walked[(e.tgid, e.tid, e.uaddr, e.op, ukey, e.in_usdt)] = e
            else:
                same.count += e.count
                same.total_ns += e.total_ns
                same.max_ns = max(same.max_ns, e.max_ns)
            continue
        if e.stack >= 0 and copies:
            # walked without a copy of its own (the copies' room spent): its frame-pointer
            # stack may stand for many call paths; spread over the walked ones, as unwalked
            e.stack = NOT_WALKED
        plain.append(e)
    entries = heaviest(plain + list(walked.values()), "total_ns")
    # the kept aggregates' addresses and frame-pointer stacks
    stacks = {e.user_stack: stacks[e.user_stack] for e in entries if e.user_stack}
    for e in entries:
        space = spaces.get(e.tgid)
        key = futex_key(e)
        if key not in addresses:
            addresses[key] = space.resolve_data(e.uaddr) if space else \
                FutexAddress(region="unknown", reason="the process exited before its memory maps were read")
        sid, skey = str(e.stack), f"{e.tgid}:{e.stack}"
        if e.user_stack or e.stack < 0 or sid not in stacks_raw or skey in stacks:
            continue
        ips = [parse_addr(a) for a in stacks_raw[sid]]
        if space and ips and sid in words_raw:
            # the older probe: the top 256 bytes of the stack of the first
            # wait with this stack (its sp not kept), unwound as well
            words = b"".join(parse_addr(w).to_bytes(8, "little") for w in words_raw[sid])
            ips = unwind.unwind(space, ips[0], unwind.UNKNOWN_SP, None, words, ips)
        stacks[skey] = [space.symbolize(a) for a in ips] if space else ["[unknown]"] * len(ips)
    demangle_stacks(stacks, addresses)
    out.update({"futex": entries, "user_stacks": stacks, "futex_addresses": addresses})
    if "futex_kernel" in data:
        out["futex_kernel"] = heaviest(from_list(FutexKernelWait, data["futex_kernel"]), "total_ns")
    return out


def _stack_copies(rows: list[dict]) -> dict[tuple, tuple[int, int, int, bytes]]:
    """The probe's user stack copies by aggregate key (tgid, tid, uaddr, op,
    stack, sample): (ip, sp, bp, the bytes from sp up)."""
    return {(c.tgid, c.tid, c.uaddr, c.op, c.stack, c.sample): c.regs() for c in from_list(FutexStackCopy, rows)}


def demangle_stacks(stacks: dict[str, list[str]], addresses: dict[str, FutexAddress] | None = None) -> None:
    """C++ and Rust names of frames (and futex symbols) made readable, all in
    one demangler run (analyzer/user/demangle.py)."""
    addresses = addresses or {}
    names = demangle.demangle_all([frame_function(f) for fr in stacks.values() for f in fr] +
                                  [a.symbol for a in addresses.values() if a.symbol])
    if not names:
        return
    for key, frames in stacks.items():
        stacks[key] = [names[fn] + f[len(fn):] if (fn := frame_function(f)) in names else f for f in frames]
    for a in addresses.values():
        if a.symbol in names:
            a.symbol = names[a.symbol]


# ---- naming ----------------------------------------------------------------

_FRAME = re.compile(r"^(.*)\+0x[0-9a-f]+ \[[^\]]*\]$")


def frame_function(frame: str) -> str:
    """The function of a frame 'func+0x1f [file]' (a demangled C++ name may
    itself hold '+' or spaces); a frame without a symbol is returned whole."""
    if frame.startswith("["):
        return frame
    m = _FRAME.match(frame)
    return m.group(1) if m else frame.split("+", 1)[0]


def frame_file(frame: str) -> str:
    m = re.search(r"\[([^\]+]+)(?:\+0x[0-9a-f]+)?\]$", frame)
    return m.group(1) if m else ""


def in_runtime(frame: str) -> bool:
    """Whether a frame is a library's (the C library, libstdc++, Rust's std,
    a runtime: analyzer/user/libraries.toml), the lock's implementation rather
    than the program's code that took it."""
    return libraries.default().is_library(frame_file(frame), frame_function(frame))


def futex_kind(op: int, frames: list[str]) -> str:
    """The user-space primitive of a futex wait (pthread_mutex,
    pthread_cond, pthread_join, ...; `futex` when none is recognised): its
    op, then the C library frames on top of its stack (sleepkinds.toml)."""
    return sleepkinds.default().futex_primitive(op, runtime_functions(frames))[0]


def primitive_of(raw: RawProbe, e: FutexWait, frames: list[str]) -> str:
    """futex_kind, unless the futex word lies in a runtime's lock known by
    its address (runtimes.toml: CPython's GIL): that lock's kind."""
    rl = runtimes.lock_at(raw.futex_address(e))
    return rl.kind if rl else futex_kind(e.op, frames)


def runtime_functions(frames: list[str]) -> list[str]:
    """The library functions at the top of a user stack (the C library's,
    Rust std's, a runtime's), innermost first."""
    out = []
    for fr in frames:
        if not in_runtime(fr):
            break
        out.append(frame_function(fr))
    return out


def site(frames: list[str]) -> str:
    """The program's own code that took a lock: the innermost frame outside
    the libraries (libraries.toml) with a function name."""
    for fr in frames:
        if not in_runtime(fr) and not fr.startswith("["):
            return frame_function(fr)
    for fr in frames:
        if not in_runtime(fr):
            return fr
    return "[no user frame]"


_REGION_NAMES = {"heap": "heap", "stack": "stack", "anon": "anonymous memory", "file": "file mapping",
                 "unmapped": "unmapped", "unknown": "address not resolved"}


def _futexes(raw: RawProbe) -> dict[tuple, list[FutexWait]]:
    """The aggregates of each futex (tgid, uaddr, op), without the sleeps of
    a wait the program's probes name (usdt.bpf.c's table waits: MariaDB's
    thd_wait_begin row-lock wait sleeping on a condition variable, `in_usdt`):
    those are counted there, by name."""
    per_futex: dict[tuple, list[FutexWait]] = defaultdict(list)
    for e in raw.futex or []:
        if e.in_usdt is None:
            per_futex[(e.tgid, e.uaddr, e.op)].append(e)
    return per_futex


def _futex_lock(e: FutexWait, kind: str, frames: list[str], raw: RawProbe, groups: dict[str, LockAcc]) -> LockAcc:
    """The named lock a futex's waits add up to: verified by ELF symbol, or site."""
    where = raw.futex_address(e)
    rl = runtimes.lock_at(where)
    if rl:              # one entry whatever word of it a thread sleeps on
        acc = groups.get(rl.name)
        if acc is None:
            acc = groups[rl.name] = LockAcc(rl.name, rl.name, "verified", rl.kind, component=rl.component,
                                            object=f"{where.symbol} ({where.file})", explain=rl.explain)
        return acc
    own_word = sleepkinds.default().own_word(kind)     # the word is the waiter's: neither symbol nor region
    if where.region == "object" and not own_word:
        base = os.path.basename(where.file)
        # the lock object, not the futex word in it (a glibc rwlock has two)
        offset = sleepkinds.default().object_start(kind, where.symbol_offset or 0)
        sym = where.symbol + (f"+0x{offset:x}" if offset else "")
        name, cls, tier = f"{kind} {sym} in {base}", f"{kind} {where.symbol}", "verified"
        obj = f"{where.symbol} ({where.file})"
    else:
        region = "" if own_word else f" ({_REGION_NAMES.get(where.region, where.region)})"
        s = site(frames) if frames else "[no stack]"
        name, cls, tier, obj = f"{kind} @ {s}{region}", f"{kind} @ {s}", "site", None
    acc = groups.get(name)
    if acc is None:
        acc = groups[name] = LockAcc(name, cls, tier, kind, object=obj, component=COMPONENT,
                                     explain="user-space lock: time threads slept in futex waits on it")
    return acc


def lock_words(raw: RawProbe, folded=None) -> set[tuple[int, int]]:
    """The futex words (tgid, uaddr) that name_futexes counts under a lock
    whatever the roles say: the word of a lock primitive (a mutex, a rwlock;
    not a condition variable or semaphore, a lock or idle by its wake-ups)
    by its heaviest sampled stack, as roles.futex_primitives decides, with a
    wait of a lock kind that no USDT wait folds (`folded`). Kernel spinning
    inside the futex syscalls on these words is their lock's
    (analyzer/user/futexspin.py)."""
    table = sleepkinds.default()
    out = set()
    for (tgid, uaddr, op), es in _futexes(raw).items():
        framed = [e for e in es if raw.user_frames(e)]
        top = max(framed, key=lambda e: e.total_ns, default=None)
        if not sum(e.total_ns for e in es) or \
                table.primitive_kind(primitive_of(raw, top or es[0], raw.user_frames(top) if top else [])) \
                != sleepkinds.LOCK:
            continue
        for e in framed or es:
            frames = raw.user_frames(e)
            if folded is not None and frames and folded(e, frames):
                continue
            if table.primitive_kind(primitive_of(raw, e, frames)) == sleepkinds.LOCK:
                out.add((tgid, uaddr))
                break
    return out


def _add_kernel_spin(groups: dict[str, LockAcc], words: dict[tuple, dict[str, int]], kernel_spin) -> None:
    """The kernel lock waits spun inside the futex syscalls on a lock's words
    join that lock (analyzer/user/futexspin.py), split over the locks a word's
    waits went to by their wait on it, and listed by kernel lock name.
    `kernel_spin`: (charged wait, kernel lock name) pairs (naming.futex_spin)."""
    for c, name in kernel_spin:
        locks = words.get((c.tgid, c.uaddr), {})
        weights = list(locks.values())
        for acc_name, n, ns in zip(locks, futexspin.split(c.count, weights), futexspin.split(c.total_ns, weights)):
            groups[acc_name].add_kernel_spin(name, n, ns, c.max_ns)


def name_futexes(raw: RawProbe, workers: int, window_ns: int, roles=None, folded=None,
                  kernel_spin=()) -> list[Lock]:
    """Futex waits of the record's raw section as named locks, heaviest
    first. Waits that are not for a lock are left out: with `roles` (a
    roles.RoleAnalysis) every wait the sleep kinds call idle (a join, a
    condition variable or semaphore wait for work), and each lock's wait is
    split by the role of the waiting thread (Lock.roles); without it (records
    of threads without per-thread data) only pthread_join waits.

    Waits counted without a stack (sampling) take the frames of their
    futex's sampled waits, in proportion to those waits' time. `folded(e,
    frames)` true, or a wait begun inside such a wait (`in_usdt`): the
    sleep of a lock the program named itself (a USDT or exported-function
    wait, analyzer/user/usdt.py), counted there, left out here.

    Kernel locks spun on inside the futex syscalls on a lock's words are
    part of its wait (`Lock.kernel_spin`): `kernel_spin` gives them, with
    their names (naming.futex_spin, which also leaves them out of the kernel
    locks, naming.name_locks)."""
    table = sleepkinds.default()
    groups: dict[str, LockAcc] = {}
    words: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))   # (tgid, uaddr) -> lock -> wait
    for key, es in _futexes(raw).items():
        if roles is not None:
            prim = roles.primitive.get(key, sleepkinds.UNKNOWN_PRIMITIVE)
            part = {id(e): roles.lock_fraction(e, prim) * e.total_ns for e in es}
        else:
            prim = None
            part = {id(e): float(e.total_ns) for e in es}
        lock_ns = sum(part.values())
        total_ns = sum(e.total_ns for e in es)
        if lock_ns <= 0 or not total_ns:
            continue
        scale = lock_ns / total_ns
        by_role: dict[str, float] = defaultdict(float)
        if roles is not None:
            for e in es:
                by_role[roles.role_of(e.tid) or f"pid {e.tgid}"] += part[id(e)] / lock_ns
        for sh in spread(es, lambda e: bool(raw.user_frames(e))):
            e = sh.entry
            frames = raw.user_frames(e)
            if folded is not None and frames and folded(e, frames):
                continue
            kind = primitive_of(raw, e, frames) if frames or prim is None else prim
            if roles is None and table.primitive_kind(kind) == sleepkinds.IDLE:
                continue
            acc = _futex_lock(e, kind, frames, raw, groups)
            acc.addresses.add(f"{e.tgid}:{format_addr(table.object_start(kind, e.uaddr))}")
            wait = round(sh.wait_ns * scale)
            words[(e.tgid, e.uaddr)][acc.name] += wait
            acc.add(round(sh.count * scale), wait, sh.max_ns, OP_NAMES.get(e.op, str(e.op)))
            acc.add_stack(tuple(frames[:MAX_FRAMES]), "futex", round(sh.count * scale), wait,
                          sh.sampled if frames else 0)
            for role, frac in by_role.items():
                acc.roles[role] += round(wait * frac)
    _add_kernel_spin(groups, words, kernel_spin)
    return heaviest_first([acc.to_lock(workers, window_ns, lambda k: site(list(k)) if k else "[no stack]")
                           for acc in groups.values()])


def futex_warnings(raw: RawProbe | None) -> list[str]:
    probe = raw.futex_probe if raw else None
    if probe and not probe.attached:
        return [f"user-space locks not measured: {probe.reason or 'the futex probe did not load'}"]
    return []
