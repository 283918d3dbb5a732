"""The diagnosis sentence of an experiment: where it stops scaling, and the
wait that explains it (or why lockscope cannot say)."""
from __future__ import annotations

from . import holders, owners, probeeffect
from .kernel import sharing
from .attribution import RootCause
from .confirmation import CONFIRMED, INCONCLUSIVE, NOT_CONFIRMED, Confirmation
from .intervals import NO_INTERVAL
from .results import PointView
from .scaling import Collapse, Undecided
from lockscope.model.record import RunRecord


def pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"


def _top_lock(rec: RunRecord) -> str:
    """The most contended lock of the last point, as a clause."""
    if not rec.probe.attached:
        return "lock waits were not measured (probes disabled)"
    top = rec.locks[0] if rec.locks else None
    if not top:
        return "no lock contention was recorded"
    how = sharing.clause(top, rec.workers)
    slowed = probeeffect.clause(rec)
    behind = holders.cause_clause(holders.chain(top, {lk.name: lk for lk in rec.locks})) or owners.clause(top)
    return (f"the most contended lock is {top.name} ({top.kind}, {top.tier}{'; ' + how if how else ''}): "
            f"{pct(top.wait_share)} of worker time" + (f", {behind}" if behind else "") +
            (f", {slowed}" if slowed else ""))


def _collapse(on: str, pts: list[PointView], collapse: Collapse, root: RootCause | None,
              rec: RunRecord) -> str:
    attached = rec.probe.attached
    at = next(p for p in pts if p.workers == collapse.workers)
    head = (f"{on} stops scaling at {collapse.workers} workers (speedup {_fig(at, 'speedup', '.2f')}, "
            f"efficiency {_fig(at, 'efficiency', '.0%')}: {collapse.reason}{_repeats(at)})")
    if collapse.undecided_before:
        head += f" (undecided before it: {'; '.join(collapse.undecided_before)})"
    if root is None:
        return head + ("; no wait grew across the collapse, so lockscope cannot name a cause "
                       "(look at the CPU breakdown: the loss may be on CPU, e.g. cache-line contention)."
                       if attached else "; lock waits were not measured (probes disabled).")
    w = root.wait
    lk = next((lk for lk in rec.locks if lk.name == w.name), None) if w.is_lock else None
    how = sharing.clause(lk, rec.workers) if lk else None
    what = (f"waits on {w.name} ({w.kind}, {w.tier}{'; ' + how if how else ''})" if w.is_lock
            else f"is {w.name.removeprefix('off-CPU: ')}")
    # a point the probes slowed (analyzer/probeeffect.py): its waits are partly the probe's
    slowed = probeeffect.clause(rec)
    share = at.wait_est.get(w.name)
    share_text = f"{pct(w.wait_share)}" + (f" [{pct(share.low)}-{pct(share.high)}]" if share and share.has_interval
                                           else "")
    role = "a contributor, not the cause: " if root.contributor else ""
    out = (f"{head}: {role}{share_text} of worker time {what}, which explains "
           f"{pct(root.explained_share)} of the lost capacity ({at.lost_capacity:.2f} of "
           f"{at.ideal:g} workers)" + (f", {slowed}" if slowed else "") + _in_repeats(root) + ".")
    h = root.holder
    if h is not None and h.repeats > 1:
        # a file lock's holders are the processes whose lock the waiters found held (the kernel's blocker)
        held = lk is not None and lk.kind == "file lock"
        out += (f" Its top holder ({'the process holding it' if held else 'release site'}) is {h.site} in "
                f"{h.first_in} of {h.repeats} repeats ({h.share.fmt('.0%')} of its "
                f"{'waits' if held else 'released waits'}).")
    if root.tied_with:
        out += (f" {root.tied_with} cannot be told apart from it over these repeats (the interval of the "
                "difference of their growths reaches 0): either may be the cause; run more repeats to separate them.")
    if root.contributor and root.larger_part:
        out += f" The larger part of the loss is {root.larger_part}."
    behind = holders.cause_clause(root.chain)
    if behind:
        # the lock is where the time is lost; the chain says what makes it so
        out += f" Behind it: {w.name}, {behind}; the root cause is {root.cause}."
    elif lk is not None and owners.clause(lk):
        out += f" Behind it: {owners.clause(lk)}."
    a = at.attribution
    if a is not None and at.lost_capacity > 0 and a.unexplained / at.lost_capacity > 0.5:
        out += (f" Most of the loss ({pct(a.unexplained / at.lost_capacity)}) is in no wait: the workers were "
                f"on CPU then (spinning or yielding before they block, cache-line contention, or more work "
                f"per operation; the CPU samples have kernel stacks only, so time spent in user space "
                f"shows there as one frame).")
    return out


def _fig(p: PointView, name: str, spec: str) -> str:
    """A figure of a point with its interval over the repeats, if any."""
    e = p.est.get(name)
    return e.fmt(spec) if e is not None else format(getattr(p, name), spec)


def _repeats(p: PointView) -> str:
    if p.repeats <= 1:
        return ""
    noise = f"; background {p.noise.value:.0%} of the CPUs" if p.noise is not None and p.noise.value >= 0.05 else ""
    return f"; {p.repeats} repeats, 95% intervals{noise}"


def _in_repeats(root: RootCause, what: str = "root cause") -> str:
    return f" ({what} in {root.first_in} of {root.repeats} repeats)" if root.repeats > 1 else ""


def _grew_most(root: RootCause, pts: list[PointView], u: Undecided) -> str:
    """What an undecided point would be blamed on if it did collapse."""
    at = next(p for p in pts if p.workers == u.workers)
    w = root.wait
    what = f"{w.name} ({w.kind}, {w.tier})" if w.is_lock else w.name.removeprefix("off-CPU: ")
    return (f"the wait that grew most across it is {what}, {pct(w.wait_share)} of worker time, which explains "
            f"{pct(root.explained_share)} of the capacity lost there ({at.lost_capacity:.2f} of {at.ideal:g} "
            f"workers){_in_repeats(root, 'first')}.")


def undecided_sentence(on: str, pts: list[PointView], u: Undecided) -> str:
    at = next(p for p in pts if p.workers == u.workers)
    noise = (f"; the machine's background took {at.noise.value:.0%} of its CPUs meanwhile"
             if at.noise is not None and at.noise.value >= 0.05 else "")
    return (f"{on}: whether it stops scaling at {u.workers} workers is undecided: {u.why} "
            f"({at.repeats} repeats){noise}; run more repeats (sweep --repeat with a larger K and the same --out "
            f"adds them) or on a quieter machine")


def sentence(on: str, pts: list[PointView], collapse: Collapse | None, root: RootCause | None,
             recs: list[RunRecord], confirmed: Confirmation | None = None, undecided: Undecided | None = None) -> str:
    """on: the experiment's title ("MWRM on tmpfs"); confirmed: `lockscope
    confirm`'s verdict, said after the diagnosis; undecided: no collapse
    decided and a point the intervals leave open."""
    if undecided is not None and collapse is None and pts and all(p.ops_per_sec > 0 for p in pts):
        text = f"{undecided_sentence(on, pts, undecided)}; " + (
            _grew_most(root, pts, undecided) if root is not None and not root.contributor
            else f"{_top_lock(recs[-1])}.")
    else:
        text = _sentence(on, pts, collapse, root, recs)
    return text + (" " + confirmation_clause(confirmed) if confirmed else "")


def confirmation_clause(c: Confirmation) -> str:
    """"Confirmed by experiment: ..." and why."""
    head = {CONFIRMED: "Confirmed by experiment", NOT_CONFIRMED: "Not confirmed by experiment",
            INCONCLUSIVE: "Experiment inconclusive"}.get(c.verdict, "Experiment inconclusive")
    return f"{head} ({c.lock}, {c.workers} workers): {c.why}."


def _sentence(on: str, pts: list[PointView], collapse: Collapse | None, root: RootCause | None,
              recs: list[RunRecord]) -> str:
    if not pts or any(p.ops_per_sec <= 0 for p in pts):
        return f"{on}: throughput was not measured at every point, so there is no scaling curve."
    last = pts[-1]
    if len(pts) == 1:
        return (f"{on} was measured at {last.workers} worker{'s' if last.workers != 1 else ''} only, so "
                f"there is no scaling curve; {_top_lock(recs[-1])}.")
    if collapse is None:
        return (f"{on} scales to {last.workers} workers (speedup {_fig(last, 'speedup', '.2f')}, "
                f"{_fig(last, 'efficiency', '.0%')} efficiency{_repeats(last)}); {_top_lock(recs[-1])}.")
    rec = next((r for r in recs if r.workers == collapse.workers), recs[-1])
    return _collapse(on, pts, collapse, root, rec)
