"""Folded stacks (the FlameGraph convention: `outer;...;inner count`, one
stack a line) of one run record, from the probe's raw aggregates:

- cpu:  on-CPU samples (cpu-clock); count = samples. Samples taken in user
        space have no kernel stack and fold to `[user space]`.
- offcpu: time off CPU of the workload's tasks by kernel stack, in
        microseconds; the innermost frame is the task state
        (`[preempted]`, `[blocked]`, `[sleep]`, ...; `[in lock wait]` when the
        task slept inside a traced lock wait).
- lockwait: traced lock-wait time by kernel stack, in microseconds; the
        innermost frame is the lock's name. Waits counted without a stack
        (the probe samples stack walks) are spread over the sampled stacks of
        the same lock address in proportion to their wait, as the lock table
        does; an address with no sampled stack folds to `[no stack sampled]`.
        rwsem optimistic spinning, which fires no tracepoint, is added from
        the CPU samples inside it (one sample period each), under the rwsem
        the lock table charged it to (`sampled_spin_ns`).

Frames are function names without offsets and without the probe's own
frames, outermost first. Only what the record kept is folded: records keep
the heaviest aggregates (see lockscope/measure/assemble.py), so a folded file can be a
little short of the totals of the lock table."""
from __future__ import annotations

from .kernel.knowledge import Knowledge
from .kernel.naming import (address_names, common_prefix, default_knowledge, futex_charges,
                                       offcpu_class, spinning_samples)
from .user.futexspin import remaining
from .user.userlocks import frame_function
from lockscope.model.jsondata import format_addr, parse_addr
from lockscope.model.probedata import RawProbe
from lockscope.model.record import RunRecord
from lockscope.proberows import constant

KINDS = {
    # kind: (title, unit of the counts)
    "cpu": ("CPU samples", "samples"),
    "offcpu": ("off-CPU time", "us"),
    "lockwait": ("lock-wait time", "us"),
    "holders": ("lock-wait time by holder", "us"),
}
STACK_USER = constant("STACK_USER")      # a CPU sample taken in user space
NO_STACK = "[no stack sampled]"


def _clean(frame: str) -> str:
    # ';' separates frames and ' ' precedes the count in the folded format
    return frame.replace(";", ":").replace("\n", " ").strip() or "[unknown]"


def _line(frames_innermost_first: list[str], leaf: str | None = None) -> str:
    frames = [_clean(f) for f in reversed(frames_innermost_first)]
    if leaf is not None:
        frames.append(_clean(leaf))
    return ";".join(frames) or "[unknown]"


def _add(out: dict[str, int], key: str, n: float) -> None:
    n = int(round(n))
    if n > 0:
        out[key] = out.get(key, 0) + n


def cpu(rec: RunRecord, kb: Knowledge | None = None) -> dict[str, int]:
    kb = kb or default_knowledge()
    raw = rec.probe.raw or RawProbe()
    out: dict[str, int] = {}
    for e in raw.cpu_samples:
        if e.stack == STACK_USER:
            key = "[user space]"
        else:
            fr = kb.functions(raw.sample_frames(e.stack))
            key = _line(fr) if fr else "[stack lost]"
        _add(out, key, e.count)
    return out


def offcpu(rec: RunRecord, kb: Knowledge | None = None) -> dict[str, int]:
    kb = kb or default_knowledge()
    raw = rec.probe.raw or RawProbe()
    out: dict[str, int] = {}
    for e in raw.offcpu:
        cls = offcpu_class(e.state, e.in_lock_wait)
        leaf = "[in lock wait]" if cls == "lock" else f"[{cls}]"
        fr = kb.functions(raw.frames(e.stack))
        _add(out, _line(fr, leaf) if fr else f"[stack lost];{leaf}", e.total_ns / 1e3)
    return out


def _lock_names(rec: RunRecord) -> dict[int, str]:
    names = {}
    for lk in rec.locks:
        for a in lk.addresses:
            if ":" not in a:    # user-space locks ("pid:address") have their own stacks
                names[parse_addr(a)] = lk.name
    return names


def _add_lock_waits(out: dict[str, int], name: str, entries: list, raw: RawProbe, kb: Knowledge) -> None:
    """One lock's waits of one address, by kernel stack; the unsampled ones
    spread over the sampled stacks."""
    with_stack = [(e, kb.functions(raw.frames(e.stack))) for e in entries]
    with_stack = [(e, fr) for e, fr in with_stack if fr]
    total = sum(e.total_ns for e in entries)
    sampled = sum(e.total_ns for e, _ in with_stack)
    if not with_stack or sampled <= 0:
        _add(out, f"{NO_STACK};{_clean(name)}", total / 1e3)
        return
    scale = total / sampled
    for e, fr in with_stack:
        _add(out, _line(fr, name), e.total_ns * scale / 1e3)


def lockwait(rec: RunRecord, kb: Knowledge | None = None) -> dict[str, int]:
    """Lock waits by kernel stack, each under its lock's name; a kernel lock
    spun on inside the futex calls on a user-space lock's word (issue 25)
    under that user-space lock's name, as the record counts it."""
    kb = kb or default_knowledge()
    raw = rec.probe.raw or RawProbe()
    names = _lock_names(rec)
    out: dict[str, int] = {}
    charged = futex_charges(raw)
    for addr, entries in remaining(raw, charged).items():
        _add_lock_waits(out, names.get(addr, f"lock at 0x{addr:x} (unnamed)"), entries, raw, kb)
    if charged:
        users = {a: lk.name for lk in rec.locks for a in lk.addresses if ":" in a}
        kernel = address_names(raw, {c.lock for c in charged})
        groups: dict[tuple[str, int], list] = {}
        for c in charged:
            user = users.get(f"{c.tgid}:{format_addr(c.uaddr)}") or kernel.get(c.lock, f"lock at 0x{c.lock:x}")
            groups.setdefault((user, c.lock), []).append(c)
        for (user, _), entries in groups.items():
            _add_lock_waits(out, user, entries, raw, kb)
    _add_sampled_spin(rec, kb, out)
    return out


def _add_sampled_spin(rec: RunRecord, kb: Knowledge, out: dict[str, int]) -> None:
    """CPU samples inside untraced rwsem spinning, under the rwsem whose
    stacks share the most callers (as naming.add_sampled_spin charges them)."""
    raw = rec.probe.raw or RawProbe()
    period = raw.sample_period_ns or 0
    spinners = [lk for lk in rec.locks if lk.sampled_spin_ns > 0]
    if not period or not spinners:
        return
    for smp, fr in spinning_samples(raw, kb):
        callers = kb.callers_after_lock(fr)
        best = max(spinners, key=lambda lk: (max((common_prefix(callers, st.frames) for st in lk.stacks),
                                                 default=0), lk.sampled_spin_ns))
        _add(out, _line(kb.functions(fr), best.name), smp.count * period / 1e3)


def holders(rec: RunRecord, kb: Knowledge | None = None) -> dict[str, int]:
    """The waits charged to the code that held the lock (Lock.holders): the
    release site's stack, outermost first, under the lock's name as the top
    frame; the count is the time held with a waiter asleep (us)."""
    out: dict[str, int] = {}
    if rec.probe.raw is None:
        return out
    for lk in rec.locks:
        for h in lk.holders:
            _add(out, _line([frame_function(f) for f in h.stack] or [h.site], lk.name), h.hold_ns / 1e3)
    return out


FOLDERS = {"cpu": cpu, "offcpu": offcpu, "lockwait": lockwait, "holders": holders}


def fold(rec: RunRecord, kind: str, kb: Knowledge | None = None) -> dict[str, int]:
    return FOLDERS[kind](rec, kb)


def text(folded: dict[str, int]) -> str:
    """The folded file: heaviest stacks first, one `frames count` a line."""
    return "".join(f"{k} {v}\n" for k, v in sorted(folded.items(), key=lambda kv: (-kv[1], kv[0])))


def parse(text_: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text_.splitlines():
        if line.strip():
            stack, _, n = line.rpartition(" ")
            out[stack] = out.get(stack, 0) + int(n)
    return out
