"""User-space spinning, charged to the lock it spins on (issue 28).

Runtimes spin before they sleep (Go's runtime.lock2 spins in procyield and
osyield before its futex sleep), and some locks never sleep at all (glibc's
pthread_spin_lock). That time is on CPU, in no futex wait: without this it
lands in "no wait". With user-space locks traced, every CPU sample carries
the thread's user stack (frame pointers: probes/contention.bpf.c,
`sample_user_stacks`), symbolized here at record time with the process's
memory maps (read by the loader while it lives).

A sample whose library frames on top of its user stack fit a [[spin]] rule
of sleepkinds.toml is one sample period spent spinning on that primitive,
named as that primitive's futex waits are: `Go channel @ main.main.func1`,
the program's first frame outside the libraries. It is added to the lock of
that name, or of that kind whose waits have that site (`sync.Mutex main.mu`,
a global; `sync.Mutex @ main.f (heap)`) (`Lock.sampled_spin_ns`, mode "spinning (sampled)", and the
sampled thread's role), or makes one where the lock never slept. A
primitive whose frames name no site (HotSpot's monitors: JIT code) goes to
the heaviest lock of its kind ([[spin]] attach = "kind"), and without one
(a JVM without its monitor probes) is not charged. A sample
inside a traced wait is counted there already and is left out."""
from __future__ import annotations

import os
from typing import Any

from .. import sleepkinds
from ..kernel.knowledge import default as default_knowledge
from ..lockacc import MAX_FRAMES, heaviest_first, wait_share
from . import unwind
from .addrspace import AddressSpace, parse_maps
from .userlocks import COMPONENT, demangle_stacks, frame_file, frame_function, in_runtime, site
from lockscope.model.jsondata import from_list, parse_addr
from lockscope.model.loaderrows import SampleCopy
from lockscope.model.probedata import RawProbe
from lockscope.model.record import Lock, StackSummary

SPIN_MODE = "spinning (sampled)"
EXPLAIN = ("user-space lock: CPU time its threads spun in its acquire path, from CPU samples of their "
           "user stacks (sleepkinds.toml [[spin]])")


def resolve(data: dict) -> dict[str, Any]:
    """The user stacks of the probe's CPU samples symbolized with their
    processes' maps, as the record keeps them (RawProbe.sample_user_stacks):
    a sample with a copy of its registers and stack top (the first ones of
    the window: `sample_copies`) unwound with the ELF CFI and spliced with
    its frame-pointer stack ("tgid:cfiN" keys, one per distinct stack of a
    process), the others by frame pointers ("tgid:id"). The probe's rows
    (`data["cpu_samples"]`) are rewritten: `user_stack` becomes that key,
    and the rows of one key and thread are merged."""
    rows = data.get("cpu_samples", [])
    if not any(isinstance(r.get("user_stack"), int) for r in rows):
        return {}
    spaces = {int(tgid): AddressSpace(parse_maps(maps)) for tgid, maps in data.get("user_maps", {}).items()}
    fp = data.get("sample_user_stacks", {})
    copies = {c.copy: c for c in from_list(SampleCopy, data.get("sample_copies") or [])}
    stacks: dict[str, list[str]] = {}
    unwound: dict[tuple, str] = {}
    merged: dict[tuple, dict] = {}
    for r in rows:
        if isinstance(r.get("user_stack"), int):
            tgid = int(r["tgid"])
            space = spaces.get(tgid)
            ips = [parse_addr(a) for a in fp.get(str(r["user_stack"]), [])]
            key = f"{tgid}:{r['user_stack']}"
            c = copies.get(int(r.pop("copy", 0)))
            if c is not None and space is not None:
                ips = unwind.unwind(space, *c.regs(), ips)
                key = unwound.setdefault((tgid, tuple(ips)), f"{tgid}:cfi{len(unwound)}")
            if key not in stacks:
                stacks[key] = [space.symbolize(a) for a in ips] if space else ["[unknown]"] * len(ips)
            r["user_stack"] = key
        same = (r.get("stack"), r.get("in_lock_wait"), r.get("tgid"), r.get("tid"), r.get("user_stack"))
        if same in merged:
            merged[same]["count"] += r.get("count", 0)
        else:
            merged[same] = r
    data["cpu_samples"] = list(merged.values())
    demangle_stacks(stacks)
    return {"sample_user_stacks": stacks}


def spinning_samples(raw: RawProbe):
    """(sample, primitive, its user frames) of the CPU samples spinning in
    a user-space lock's acquire path, outside any traced wait: in user
    space, or in the kernel outside its locking code (a yield; a kernel
    lock spun on inside a futex call is a traced wait, charged to the lock
    as kernel spinning by analyzer/user/futexspin.py)."""
    table, kb = sleepkinds.default(), default_knowledge()
    for smp in raw.cpu_samples:
        frames = raw.sample_user_frames(smp)
        kframes = raw.sample_frames(smp.stack)
        if smp.in_lock_wait or not frames or kb.in_locking(kframes) or _in_uprobe(kframes):
            continue
        prim = table.spinning(_runtime_frames(frames, table.spin_files))
        if prim:
            yield smp, prim, frames


def _runtime_frames(frames: list[str], files: set[str]) -> list[str]:
    """The functions on top of a user stack that are a library's or a
    runtime's ([[spin]] files: libjvm.so), innermost first."""
    out = []
    for fr in frames:
        if not in_runtime(fr) and os.path.basename(frame_file(fr)) not in files:
            break
        out.append(frame_function(fr))
    return out


def _in_uprobe(kframes: list[str]) -> bool:
    """A sample taken while the kernel ran a uprobe (the probe's own cost at
    the program's probe sites: HotSpot's monitor__contended__enter), not the
    program's spinning."""
    return any(f.startswith(("uprobe_", "handle_swbp", "arch_uprobe_", "asm_exc_int3", "exc_int3")) for f in kframes)


def add_spin(locks: list[Lock], raw: RawProbe, workers: int, window_ns: int,
             role_of=None) -> list[Lock]:
    """`locks` (the user-space ones) with the sampled spinning added: to
    the lock of the same name, or to a new one; `role_of(tid)` gives the
    sampled thread's role where the locks are split by role."""
    period = raw.sample_period_ns or 0
    if not period:
        return locks
    by_name = {lk.name: lk for lk in locks}
    # a lock whose waits name its object (a global's symbol, "(heap)" for a
    # Go mutex) is found by its kind and the site of its waits, else by a
    # frame of its waits' stacks (a sample in a function's prologue, its
    # frame not yet made, skips that function: Deposit's caller, not Deposit)
    by_site: dict[tuple[str, str], Lock] = {}
    by_frame: dict[tuple[str, str], Lock] = {}
    for lk in heaviest_first(list(locks)):
        for st in lk.stacks:
            by_site.setdefault((lk.kind, st.site), lk)
            for fr in st.frames:
                by_frame.setdefault((lk.kind, frame_function(fr).split("+", 1)[0]), lk)
    by_kind = sleepkinds.default().spin_by_kind
    for smp, prim, frames in spinning_samples(raw):
        where = site(frames)
        name = f"{prim} @ {where}"
        lk = by_name.get(name) or by_site.get((prim, where)) or by_frame.get((prim, where))
        if prim in by_kind:
            lk = max((k for k in locks if k.kind == prim), key=lambda k: k.wait_ns, default=None)
            if lk is None:
                continue            # no lock of its kind was named (a JVM without its monitor probes)
        if lk is None:
            lk = by_name[name] = Lock(name=name, lock_class=name, tier="site", kind=prim, component=COMPONENT,
                                      explain=EXPLAIN, instances=0,
                                      stacks=[StackSummary(frames=frames[:MAX_FRAMES], site=where,
                                                           syscall=None, count=0, wait_ns=0)])
            locks.append(lk)
        ns = smp.count * period
        lk.sampled_spin_ns += ns
        lk.wait_ns += ns
        lk.modes[SPIN_MODE] = lk.modes.get(SPIN_MODE, 0) + ns
        role = role_of(smp.tid) if role_of and smp.tid else None
        if role and (lk.roles or lk.count == 0):
            lk.roles[role] = lk.roles.get(role, 0) + ns
    for lk in locks:
        lk.wait_share = wait_share(lk.wait_ns, workers, window_ns)
    return heaviest_first(locks)
