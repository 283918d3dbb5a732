"""The release stacks of the lock holders (probes/holders.bpf.h), at record
time: kernel stacks symbolized with the kernel's symbols; user stacks
unwound from the probe's stack-top copies with the ELF CFI, like the futex
waits', and demangled; a release of CPython's GIL by the Python frames its
releaser ran while it held the GIL (probes/pyframes.bpf.h), in place of
drop_gil's C stack. analyzer/holders.py adds them up by release site."""
from __future__ import annotations

from .user import tailcall, unwind, usdt, userlocks
from .user.addrspace import AddressSpace, parse_maps
from lockscope.model.holddata import PythonProcess, PythonWait, Release, ReleaseActivity
from lockscope.model.jsondata import from_list, parse_addr
from lockscope.model.loaderrows import HoldStackCopy, HoldUsdtLock, PyStackRow
from lockscope.model.probedata import heaviest

PY_SITE = "py:"              # a hold_stacks key of a GIL release's Python frames


def resolve(data: dict, sym) -> dict:
    """The holders part of the probe's data event as kept in the record's raw
    section: the heaviest releases and activities, their release stacks
    symbolized (`hold_stacks`, keyed by Release.site_stack)."""
    if "holds" not in data:
        return {}
    holds = heaviest(from_list(Release, data["holds"]), "wait_ns")
    acts = heaviest(from_list(ReleaseActivity, data.get("hold_activity", [])), "ns")
    spaces = {int(t): AddressSpace(parse_maps(rows)) for t, rows in data.get("user_maps", {}).items()}
    copies = _copies(data.get("hold_stack_copies") or [])
    kstacks, ustacks = data.get("hold_stacks", {}), data.get("hold_user_stacks", {})
    named = _usdt_locks(from_list(HoldUsdtLock, data.get("hold_usdt_locks") or []))
    python = {s.id: s.frames for s in from_list(PyStackRow, data.get("py_stacks") or [])}
    stacks: dict[str, list[str]] = {}
    for a in acts:
        a.act_usdt_lock = named.get(a.act_lock or 0, (None,))[0]
    for r in holds:
        r.usdt_lock, release = named.get(r.lock, (None, None))
        if any(f != "?" for f in python.get(r.py_stack, [])):
            # the GIL's releaser: the Python code it ran while it held the GIL, not drop_gil's C stack
            r.site_stack = f"{PY_SITE}{r.tgid}:{r.py_stack}"
            stacks[r.site_stack] = python[r.py_stack]
            continue
        if r.stack < 0:
            continue
        if r.kernel:
            key = f"k:{r.stack}"
            if key not in stacks and str(r.stack) in kstacks:
                stacks[key] = sym.stack(kstacks[str(r.stack)])
        elif not r.sample:
            continue         # no copy of its own: its frame-pointer stack may stand for many call paths
        else:
            key = f"{r.tgid}:r{r.stack}.{r.sample}"
            if key not in stacks and str(r.stack) in ustacks:
                frames = _user_stack(spaces.get(r.waker_tgid) or spaces.get(r.tgid),
                                     [parse_addr(a) for a in ustacks[str(r.stack)]],
                                     copies.get((r.tgid, r.lock, r.stack, r.sample)))
                stacks[key] = _past(frames, release) if release is not None else frames
        if key in stacks:
            r.site_stack = key
    userlocks.demangle_stacks(stacks)
    return {"holds": holds, "hold_activity": acts, "hold_stacks": stacks,
            "py_waits": _python_waits(data.get("py_waits") or [], python),
            "python_processes": from_list(PythonProcess, data.get("python_processes") or [])}


def _python_waits(rows: list[dict], python: dict[int, list[str]]) -> list[PythonWait]:
    """The GIL's waits by the waiter's Python stack, named (one entry per process and stack)."""
    out: dict[tuple, PythonWait] = {}
    for w in rows:
        frames = python.get(int(w["py_stack"]), [])
        if all(f == "?" for f in frames):
            continue
        pw = out.setdefault((int(w["tgid"]), tuple(frames)), PythonWait(tgid=int(w["tgid"]), frames=list(frames)))
        pw.count += int(w["count"])
        pw.wait_ns += int(w["wait_ns"])
    return sorted(out.values(), key=lambda pw: -pw.wait_ns)


def _usdt_locks(rows: list[HoldUsdtLock]) -> dict[int, tuple[str, frozenset[str]]]:
    """USDT-named locks by their holders' id (usdtwait.bpf.h): name, release functions."""
    table, out = usdt.default(), {}
    for u in rows:
        spec = table.entry(u.entry)
        if spec is not None:
            out[u.id] = (spec.lock_name(u.value, u.name), table.release_frames(u.entry))
    return out


def _past(frames: list[str], release: frozenset[str]) -> list[str]:
    """A release stack of a lock a program's USDT probes name, from past
    its lock implementation's release and wake-up functions (usdt.toml
    release_frames; library and unnamed frames between them too)."""
    last = -1
    for i, fr in enumerate(frames):
        fn = userlocks.frame_function(fr).split("+", 1)[0]
        if fn in release:
            last = i
        elif not (userlocks.in_runtime(fr) or fr.startswith("[")):
            break
    return frames[last + 1:] or frames


def activity_stacks(data: dict) -> set[int]:
    """The off-CPU kernel stacks the releasers' activities refer to (kept
    with the record's other kernel stacks)."""
    return {int(a.get("act_stack", -1)) for a in data.get("hold_activity", [])}


def _copies(rows: list[dict]) -> dict[tuple, tuple[int, int, int, bytes]]:
    """The release stacks' copies by Release key (tgid, lock, stack, sample): (ip, sp, bp, bytes)."""
    return {(c.tgid, c.lock, c.stack, c.sample): c.regs() for c in from_list(HoldStackCopy, rows)}


def _user_stack(space: AddressSpace | None, fp: list[int], copy) -> list[str]:
    """A release's user stack: unwound from its copy with the CFI, symbolized,
    and with the function a tail call into the unlock removed put back."""
    if space is None:
        return ["[unknown]"] * len(fp)
    ips = unwind.unwind(space, *copy, fp) if copy else fp
    frames = [space.symbolize(a) for a in ips]
    return tailcall.restore(space, ips, frames, lambda f: not f.startswith("[") and not userlocks.in_runtime(f),
                            userlocks.frame_function)[1]


def python_warnings(data: dict) -> list[str]:
    """A CPython process whose GIL holders' Python frames could not be read, and why."""
    return [f"Python frames of the GIL's holders not read in pid {p['tgid']} ({p.get('file')}): {p['reason']}"
            for p in data.get("python_processes") or [] if p.get("reason")]
