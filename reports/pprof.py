"""pprof profiles of one run record (`lockscope export`: per point
`pprof/<experiment>-w<N>.pb.gz`, `-holders.pb.gz`, `-offcpu.pb.gz`,
`-cpu.pb.gz`), for
`go tool pprof` and the continuous profilers that ingest pprof.

- mutex (`<experiment>-w<N>.pb.gz`), Go's mutex-profile convention: sample
  types `contentions/count` and `delay/nanoseconds`, period type
  `contentions/count`, period 1 (every wait traced). Each stack is leaf
  first: the lock's name (as in the lock table), then the wait's stack.
  Kernel locks take the stacks of the record's raw section (the kernel
  stacks the folded lock-wait graph uses, analyzer/folded.py), user-space
  locks the user stacks of the lock table (Lock.stacks). Each lock's count
  and delay are the lock table's, spread over its stacks in proportion to
  their waits (whole numbers that add up exactly); rwsem optimistic
  spinning (Lock.sampled_spin_ns) goes to the CPU samples inside it, as in
  the folded graph, with no contentions. Labels: kind, tier.
- holders (`-holders`, records /3 with holders): the same sample types, with
  Go's mutex-profile convention for the stack, which charges a contention to
  the code that held the lock: leaf first the lock's name, then the release
  site's stack (Lock.holders); count the releases that ended a wait, delay
  the time held with a waiter asleep. Labels: kind, tier.
- off-CPU (`-offcpu`): `waits/count` and `offcpu/nanoseconds` of the raw
  off-CPU aggregates, the leaf frame the off-CPU class (`[futex wait]`,
  `[preempted]`, `[lock wait]`, ...) above the kernel stack; labels: class,
  sleep kind (analyzer/sleepkinds.toml).
- CPU (`-cpu`): `samples/count` and `cpu/nanoseconds` (samples times the
  sample period) of the on-CPU samples, period type `cpu/nanoseconds`.
  Samples taken in user space have no stack: `[user space]`.

Kernel frames are in `[kernel.kallsyms]`, user frames in their object file.
The profile message is written by reports/profileproto.py."""
from __future__ import annotations

import datetime
from pathlib import Path

from lockscope import atomicio
from lockscope.analyzer import folded, sleepkinds
from lockscope.analyzer.kernel.knowledge import Knowledge
from lockscope.analyzer.kernel.naming import (common_prefix, classify_offcpu, default_knowledge, kernel_waits,
                                       spinning_samples)
from lockscope.analyzer.user.userlocks import frame_file, frame_function
from lockscope.model.jsondata import parse_addr
from lockscope.model.probedata import RawProbe
from lockscope.model.record import Lock, RunRecord
from . import filenames
from .profileproto import Profile

KERNEL = "[kernel.kallsyms]"


def apportion(total: int, weights: list[float]) -> list[int]:
    """`total` split over `weights` in proportion, whole numbers that add up
    to it exactly (largest remainder); equal parts when no weight is > 0."""
    if not weights:
        return []
    if sum(weights) <= 0:
        weights = [1.0] * len(weights)
    s = sum(weights)
    exact = [total * w / s for w in weights]
    parts = [int(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: parts[i] - exact[i])[:total - sum(parts)]:
        parts[i] += 1
    return parts


def _kernel(frames: list[str]) -> list[tuple[str, str]]:
    return [(f, KERNEL) for f in frames]


def _user(frames: list[str]) -> list[tuple[str, str]]:
    return [(frame_function(f), frame_file(f) or "[unknown]") for f in frames]


def _meta(rec: RunRecord, what: str) -> dict:
    dur = int(rec.duration_s * 1e9)
    try:
        end = datetime.datetime.fromisoformat(rec.created)
        start = int(end.timestamp() * 1e9) - dur
    except ValueError:
        start = 0
    name = filenames.experiment(rec.workload, rec.fs, filenames.EXPORT)
    return {"time_nanos": max(start, 0), "duration_nanos": dur, "main_file": KERNEL,
            "comments": [f"lockscope {what}: {name}, {rec.workers} worker{'s' if rec.workers != 1 else ''}",
                         f"run {rec.id}" + (f", lockscope {rec.lockscope_version}" if rec.lockscope_version else "")]}


# ---- mutex ---------------------------------------------------------------------

def _wait_stacks(lk: Lock, raw: RawProbe, kb: Knowledge) -> list[tuple[list[tuple[str, str]], float, float]]:
    """(frames leaf first, count weight, wait weight) of a lock's waits."""
    kernel = [parse_addr(a) for a in lk.addresses if ":" not in a]
    if kernel:
        out = []
        own = kernel_waits(raw)         # less the waits spun for a user-space lock's futex calls
        for e in (e for a in kernel for e in own.get(a, [])):
            fr = kb.functions(raw.frames(e.stack))
            if fr:
                out.append((_kernel(fr), e.count, e.total_ns))
        if out:
            return out
    user = any(":" in a for a in lk.addresses)
    out = [((_user if user else _kernel)(st.frames), st.count, st.wait_ns) for st in lk.stacks if st.frames]
    return out or [([(folded.NO_STACK, "")], 1, 1)]


def _spin_stacks(rec: RunRecord, kb: Knowledge) -> dict[str, list[tuple[list[tuple[str, str]], int]]]:
    """CPU samples inside untraced rwsem spinning, by the lock's name they
    are charged to (as analyzer/folded.py charges them)."""
    raw = rec.probe.raw or RawProbe()
    spinners = [lk for lk in rec.locks if lk.sampled_spin_ns > 0]
    out: dict[str, list] = {}
    if not spinners:
        return out
    for smp, fr in spinning_samples(raw, kb):
        callers = kb.callers_after_lock(fr)
        best = max(spinners, key=lambda lk: (max((common_prefix(callers, st.frames) for st in lk.stacks),
                                                 default=0), lk.sampled_spin_ns))
        out.setdefault(best.name, []).append((_kernel(kb.functions(fr)), smp.count))
    return out


def mutex(rec: RunRecord, kb: Knowledge | None = None) -> Profile:
    kb = kb or default_knowledge()
    raw = rec.probe.raw or RawProbe()
    p = Profile([("contentions", "count"), ("delay", "nanoseconds")], ("contentions", "count"), 1,
                **_meta(rec, "mutex profile (traced lock waits)"))
    spins = _spin_stacks(rec, kb)
    for lk in rec.locks:
        leaf = (lk.name, "[lock]")
        labels = {"kind": lk.kind, "tier": lk.tier}
        spin = spins.get(lk.name, [])
        traced_ns = lk.wait_ns - lk.sampled_spin_ns if spin else lk.wait_ns
        stacks = _wait_stacks(lk, raw, kb)
        counts = apportion(lk.count, [c for _, c, _ in stacks])
        waits = apportion(traced_ns, [w for _, _, w in stacks])
        for (fr, _, _), c, w in zip(stacks, counts, waits):
            if c or w:
                p.sample([leaf] + fr, [c, w], labels)
        for (fr, _), w in zip(spin, apportion(lk.sampled_spin_ns, [n for _, n in spin])):
            if w:
                p.sample([leaf, ("[optimistic spinning]", KERNEL)] + fr, [0, w], labels)
    return p


def holders(rec: RunRecord, kb: Knowledge | None = None) -> Profile:
    p = Profile([("contentions", "count"), ("delay", "nanoseconds")], ("contentions", "count"), 1,
                **_meta(rec, "holders profile (lock waits charged to the release site)"))
    for lk in rec.locks:
        user = any(":" in a for a in lk.addresses)
        for h in lk.holders:
            stack = (_user if user else _kernel)(h.stack) or [(h.site, "")]
            p.sample([(lk.name, "[lock]")] + stack, [h.holds, h.hold_ns], {"kind": lk.kind, "tier": lk.tier})
    return p


# ---- off-CPU and CPU -------------------------------------------------------------

def offcpu(rec: RunRecord, kb: Knowledge | None = None) -> Profile:
    kb = kb or default_knowledge()
    raw = rec.probe.raw or RawProbe()
    kinds = sleepkinds.default()
    p = Profile([("waits", "count"), ("offcpu", "nanoseconds")], ("offcpu", "nanoseconds"), 1,
                **_meta(rec, "off-CPU profile"))
    for e in raw.offcpu:
        fr = raw.frames(e.stack)
        cls = "lock" if e.in_lock_wait else classify_offcpu(fr, e.state, kb)
        leaf = ("[lock wait]" if cls == "lock" else f"[{cls}]", KERNEL)
        stack = _kernel(kb.functions(fr)) or [("[stack lost]", KERNEL)]
        p.sample([leaf] + stack, [e.count, e.total_ns], {"class": cls, "sleep kind": kinds.class_kind(cls)})
    return p


def cpu(rec: RunRecord, kb: Knowledge | None = None) -> Profile:
    kb = kb or default_knowledge()
    raw = rec.probe.raw or RawProbe()
    period = raw.sample_period_ns or 0
    p = Profile([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"), period,
                **_meta(rec, "CPU profile (on-CPU samples)"))
    for e in raw.cpu_samples:
        if e.stack == folded.STACK_USER:
            stack = [("[user space]", "")]
        else:
            stack = _kernel(kb.functions(raw.sample_frames(e.stack))) or [("[stack lost]", KERNEL)]
        p.sample(stack, [e.count, e.count * period])
    return p


PROFILES = {"mutex": mutex, "holders": holders, "offcpu": offcpu, "cpu": cpu}


def file_name(rec: RunRecord, kind: str) -> str:
    base = f"{filenames.experiment(rec.workload, rec.fs, filenames.EXPORT)}-w{rec.workers}"
    return f"{base}.pb.gz" if kind == "mutex" else f"{base}-{kind}.pb.gz"


def write(rec: RunRecord, out_dir: Path, kb: Knowledge | None = None) -> list[Path]:
    """The record's profiles, gzipped, in out_dir/pprof/ (holders only for a
    record with holders)."""
    kb = kb or default_knowledge()
    out = []
    for kind, make in PROFILES.items():
        if kind == "holders" and not any(lk.holders for lk in rec.locks):
            continue
        path = Path(out_dir) / "pprof" / file_name(rec, kind)
        atomicio.write_bytes(path, make(rec, kb).gzipped())
        out.append(path)
    return out
