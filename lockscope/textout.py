"""The CLI's text output: a run record (`lockscope run`) and the analysis of
an experiment (`lockscope analyze` without --json)."""
from __future__ import annotations

from lockscope.analyzer import cost, holders, owners, probeeffect
from lockscope.analyzer.kernel import filelocks
from lockscope.analyzer.kernel import sharing
from lockscope.analyzer.attribution import WhatIf
from lockscope.analyzer.intervals import METHOD, NO_INTERVAL
from lockscope.analyzer.confirmation import Confirmation, Response
from lockscope.analyzer.results import Experiment, PointView, TimeView, Unavailable
from lockscope.analyzer.usl import UslFit
from lockscope.model.record import NO_FS, RunRecord


def summarize(rec: RunRecord) -> str:
    """One run record as the text `lockscope run` prints."""
    on = f" on {rec.fs}" if rec.fs != NO_FS else ""
    tput = f"{rec.ops_per_sec:,.0f} {rec.throughput_unit}" if rec.ops_per_sec is not None else \
        "throughput unknown" + (" (attach)" if rec.kind == "attach" else "")
    lines = [f"{rec.workload}{on}, {rec.workers} worker{'s' if rec.workers != 1 else ''}, "
             f"{rec.duration_s:.2f} s: {tput}" + (" (oversubscribed)" if rec.oversubscribed else "")]
    if rec.reference_ops_per_sec is not None:
        lines.append(f"reference (first {rec.reference_s:.2f} s of the warm-up, probes not recording): "
                     f"{rec.reference_ops_per_sec:,.0f} {rec.throughput_unit}" +
                     (f"; the window ran at {rec.probe_effect:.0%} of it" if rec.probe_effect is not None else "") +
                     (f" (its first interval at {start:.0%})" if (start := probeeffect.start_effect(rec)) is not None
                      and abs(start - rec.probe_effect) >= 0.1 else ""))
    if rec.attach:
        a = rec.attach
        procs = ", ".join(f"{p.pid} {p.comm} ({p.threads} thread{'s' if p.threads != 1 else ''})"
                          for p in a.processes[:4]) + (f" and {len(a.processes) - 4} more" if len(a.processes) > 4
                                                       else "")
        lines.append(f"attached ({a.how} {a.target}): {procs}; the window ended: {a.ended}")
    if len(rec.per_worker) > 16:
        ops = sorted(w.ops for w in rec.per_worker)
        lines.append(f"per worker: min {ops[0]:,}, median {ops[len(ops) // 2]:,}, max {ops[-1]:,}" +
                     (f"; {sum(w.ran_out for w in rec.per_worker)} ran out" if any(w.ran_out for w in rec.per_worker)
                      else ""))
    elif rec.per_worker:
        lines.append("per worker: " + ", ".join(f"{w.ops:,}" + (" (ran out)" if w.ran_out else "")
                                                for w in rec.per_worker))
    if rec.params:
        lines.append("parameters: " + ", ".join(f"{k}={v}" for k, v in rec.params.items()))
    if rec.latency:
        lines.append("latency per operation (ops, p50 / p99 / max):")
        for op, lat in rec.latency.items():
            sampled = (f"  (timed: 1 op in {lat.count / lat.timed:.0f})"
                       if lat.timed and lat.count > 1.5 * lat.timed else "")
            lines.append(f"  {op:<8} {lat.count:>12,}  "
                         f"{latency(lat.p50_ns)} / {latency(lat.p99_ns)} / {latency(lat.max_ns)}" + sampled)
    elif len(rec.op_counts) > 1:
        lines.append("ops per operation: " + ", ".join(f"{k} {v:,}" for k, v in rec.op_counts.items()))
    if rec.timeseries:
        lines.append(f"time series: {len(rec.timeseries)} intervals of {rec.interval_s:g} s, ops/s " +
                     " ".join(f"{i.ops_per_sec:,.0f}" for i in rec.timeseries[:12]) +
                     (" ..." if len(rec.timeseries) > 12 else ""))
    c = rec.cpu
    lines.append(f"CPU {','.join(map(str, c.cpus))}: user {c.user:.0%}  sys {c.sys:.0%}  idle {c.idle:.0%}  "
                 f"iowait {c.iowait:.0%}  irq {c.irq:.0%}")
    lines += role_lines(rec)
    if not rec.probe.attached:
        lines.append(f"locks: not measured ({rec.probe.reason})")
    elif not rec.locks:
        lines.append("locks: no contention recorded")
    else:
        lines.append("top locks (share of worker time waiting):")
        for lk in rec.locks[:5]:
            st = lk.stacks[0] if lk.stacks else None
            where = f"  {' <- '.join(st.frames[:3])}" + (f" [{st.syscall}]" if st and st.syscall else "") if st else ""
            inst = sharing.clause(lk, rec.workers) or f"{lk.instances} instance{'s' if lk.instances != 1 else ''}"
            lines.append(f"  {lk.wait_share:7.2%}  {lk.name}  ({lk.kind}, {lk.tier}, {inst}){where}")
            if lk.kernel_spin:
                lines.append(f"           {kernel_spin_note(lk)}")
            if lk.sampled_spin_ns and lk.component == "user space":
                lines.append(f"           of which spinning on CPU in its acquire path (CPU samples): "
                             f"{lk.sampled_spin_ns / max(lk.wait_ns, 1):.0%}, {latency(lk.sampled_spin_ns)}")
            if lk.holders:
                lines.append(f"           {holders_note(lk)}")
            if lk.owners:
                lines.append(f"           {owners.note(lk)}")
        timed = timed_note(rec)
        if timed:
            lines.append(f"  ({timed})")
    own = cost.own_cost(rec)
    if own is not None:
        lines.append(cost.describe(own))
    for w in rec.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def kernel_spin_note(lk) -> str:
    """A user-space lock's waits spun on kernel locks inside its futex calls
    (Lock.kernel_spin, part of its wait), per kernel lock."""
    parts = ", ".join(f"{k.name} {k.wait_ns / 1e6:.2f} ms" for k in lk.kernel_spin)
    return f"of which spinning in the kernel inside its futex calls: {parts}"


def holders_note(lk, top: int = 2) -> str:
    """Who held a lock while others waited (Lock.holders): the heaviest
    release sites, their share of the waits ended, and what they did."""
    parts = []
    # a file lock's holders are the processes that held it (its blocker's owner), by the waits they caused
    unit = "wait" if lk.kind == "file lock" else "release"
    for h in lk.holders[:top]:
        doing = ", ".join(f"{t.name} {t.share:.0%}" for t in h.while_holding[:3])
        # a file lock's holder is a process: where it let go, from its release site's stack
        at = f"; released at {filelocks.release_site(h.stack)}" if unit == "wait" and h.stack else ""
        parts.append(f"{h.site} {h.share:.0%} ({h.holds:,} {unit}{'s' if h.holds != 1 else ''}"
                     + (f"; holding: {doing}" if doing else "") + at + ")")
    if lk.holders_cover is not None and lk.holders_cover < 0.5:
        note = (f"; a release ended {lk.holders_cover:.0%} of its waits (the others were not ended by a "
                f"wake-up: spun until the holder let go, or timed out)")
    elif lk.held_share is not None and lk.held_share < 0.5:
        rest = []
        if lk.sampled_spin_ns and lk.wait_ns:
            rest.append(f"spinning while the holder ran ({lk.sampled_spin_ns / lk.wait_ns:.0%}: handed over "
                        f"without a wake-up, so no release site)")
        if lk.kernel_spin:
            rest.append("spinning in its futex calls (above)")
        rest.append("between a release and the woken waiter running (wake-up latency)")
        note = f"; it was held with a waiter asleep for {lk.held_share:.0%} of its wait time, the rest: " + \
            ", ".join(rest)
    else:
        note = ""
    return f"{holders.label(lk)}: " + ", ".join(parts) + note


def timed_note(rec: RunRecord) -> str | None:
    """How many of the kernel lock waits were timed, where the probe timed a
    random sample of them (at high wait rates) and the wait times are
    estimates; None where all but a few (under 5%) were timed."""
    raw = rec.probe.raw
    if not raw or not raw.contention:
        return None
    n = sum(e.count for e in raw.contention)
    untimed = sum(e.untimed for e in raw.contention)
    if untimed * 20 < n:        # under 5% untimed: the total is as good as exact
        return None
    return (f"wait times estimated: {n - untimed:,} of {n:,} kernel lock waits timed, a random sample that "
            f"stands for the rest; lockscope-probe --timed-rate")


def role_lines(rec: RunRecord, top: int = 6) -> list[str]:
    """The roles of a point: time split in worker-equivalents, and whether
    each was counted as the measured work."""
    if not rec.roles or rec.probe.window_s <= 0:
        return []
    win = rec.probe.window_s * 1e9
    out = ["roles (worker-equivalents: on CPU, lock waits, preempted, I/O, page/journal, other, idle):"]
    for r in rec.roles[:top]:
        parts = " ".join(f"{getattr(r, a) / win:5.2f}" for a in ("on_cpu_ns", "lock_ns", "preempted_ns", "io_ns",
                                                                "storage_ns", "other_ns", "idle_ns"))
        out.append(f"  {'*' if r.worker else ' '} {r.name:<20} {r.threads:>3} thread{'s' if r.threads != 1 else ' '} "
                   f"{parts}  {r.reason}")
    if len(rec.roles) > top:
        out.append(f"    ... {len(rec.roles) - top} more roles")
    return out


def latency(ns: int) -> str:
    """A latency for people: 850 ns, 12.3 us, 4.1 ms, 1.20 s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            v = ns / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{ns} ns"


def experiment_lines(e: Experiment) -> list[str]:
    """The diagnosis of an experiment, one line per point, and its analysis."""
    out = [e.diagnosis]
    unknown = {r.id for r in e.records if r.ops_per_sec is None}
    by_id = {r.id: r for r in e.records}
    out.append(f"  {e.repeats} runs per point; figures are medians with the {METHOD}" if e.repeats > 1
               else f"  {NO_INTERVAL}")
    for p in e.points:
        top = p.waits[0] if p.waits else None
        sp, ef = p.est.get("speedup"), p.est.get("efficiency")
        out.append(f"  {p.workers:>4} workers  " +
                   (f"{'throughput unknown':>20}" if p.record_id in unknown else
                    f"{p.ops_per_sec:>14,.0f} {e.unit}  speedup {p.speedup:5.2f}  efficiency {p.efficiency:4.0%}"
                    + (f" [{ef.low:.0%}-{ef.high:.0%}, speedup {sp.low:.2f}-{sp.high:.2f}, {p.repeats} runs]"
                       if ef is not None and ef.has_interval and sp is not None and sp.has_interval
                       and sp.high > sp.low else "")) +
                   (f"  named {p.named_share:4.0%}" if p.named_share is not None else "") +
                   (f"  top wait: {top.name} {top.wait_share:.1%}" if top else "") +
                   (f"  time-sharing {p.time_sharing:.1%} ({p.workers} workers on {p.cpus} CPUs: not a loss)"
                    if p.time_sharing >= 0.001 else "") +
                   (f"  preempted by other work {p.background_preempted:.1%} (the machine's, not the program's)"
                    if p.background_preempted >= 0.001 else ""))
        slowed = probeeffect.warning(by_id[p.record_id]) if p.record_id in by_id else None
        if slowed:
            out.append(f"        warning: {slowed}")
        # lost events: the point's waits are low by what was lost
        out += [f"        warning: {w}" for w in p.warnings if w.startswith("probe:")]
        if p.background is not None and p.background.noise >= 0.05:
            out.append(f"        {p.background.text()}")
    return out + analysis_lines(e)


def _usl_line(u: UslFit | Unavailable, unit: str) -> str:
    if isinstance(u, Unavailable):
        return f"  USL fit: unavailable: {u.reason}"
    peak = u.peak_text(unit)
    return (f"  USL fit ({u.points_used} points): alpha {u.alpha:.4f}, beta {u.beta:.5f}, "
            f"lambda {u.lam:,.0f} {unit}, R2 {u.r2:.3f}; {peak}")


def _attribution_line(p: PointView) -> str:
    a = p.attribution
    items = [i for i in a.items if i.wait.worker_equivalents >= 0.005][:4]
    parts = [f"{i.wait.name} {i.attributed:.2f} ({i.share_of_loss:.0%})" for i in items]
    parts.append(f"unexplained {a.unexplained:.2f}")
    return (f"  lost capacity at {p.workers}: {p.lost_capacity:.2f} of {p.ideal:g} workers = "
            + ", ".join(parts) + (f" (the measured waits, {a.measured_total:.2f}, exceed the loss: "
                                  f"each scaled by {a.scale:.2f})" if a.waits_exceed_loss else ""))


def _whatif_line(w: WhatIf | Unavailable, unit: str) -> str:
    if isinstance(w, Unavailable):
        return f"  what-if: unavailable: {w.reason}"
    return (f"  what-if ({w.label}): " + ", ".join(
        f"{c.workers}: {c.ops_per_sec:,.0f}" + (" (ideal)" if c.capped else "") for c in w.curve) + f" {unit}")


def _timeview_line(t: TimeView | Unavailable) -> str:
    if isinstance(t, Unavailable):
        return f"  time view: unavailable: {t.reason}"
    parts = [f"{s.name} {min(s.wait_share):.0%}..{max(s.wait_share):.0%}"
             for s in t.series if s.wait_share and max(s.wait_share) >= 0.01][:3]
    return (f"  time view at {t.workers} workers ({len(t.t_s)} intervals of {t.interval_s:g} s), "
            "share of worker time per interval: " + ("; ".join(parts) or "no wait above 1%"))


def _cpi_line(points: list[PointView]) -> str:
    reasons = {p.cpi.reason for p in points if isinstance(p.cpi, Unavailable)}
    if len(reasons) == 1 and all(isinstance(p.cpi, Unavailable) for p in points):
        return f"  CPI: unavailable: {reasons.pop()}"
    return "  CPI: " + ", ".join(f"{p.workers}: unavailable ({p.cpi.reason})" if isinstance(p.cpi, Unavailable)
                                 else f"{p.workers}: {p.cpi:.2f}" for p in points)


def analysis_lines(e: Experiment) -> list[str]:
    """The USL fit, attribution, what-if, time view and CPI of an experiment,
    as text."""
    # nothing lost at the first point, or at a perfectly scaling one
    # (a point of unknown throughput, e.g. attach, has no capacity to lose)
    unknown = {r.id for r in e.records if r.ops_per_sec is None}
    lost = [_attribution_line(p) for p in e.points if p.lost_capacity > 0 and p.record_id not in unknown]
    return ([_usl_line(e.usl, e.unit)] + lost + [_whatif_line(e.whatif, e.unit), _timeview_line(e.timeview)]
            + ([_cpi_line(e.points)] if e.points else [])
            + (confirmation_lines(e.confirmation, e.unit) if e.confirmation else []))


def _response(r: Response) -> str:
    if r.slope is None:
        return "no wait added"
    ci = f" (95%: {r.low:.2f}-{r.high:.2f})" if r.low is not None else ""
    return f"{r.slope:.2f}{ci} over {len(r.points)} phases"


def confirmation_lines(c: Confirmation, unit: str = "ops/s") -> list[str]:
    """`lockscope confirm`'s verdict on one lock, as text."""
    out = [f"confirm ({c.workers} workers, {c.lock}): {c.verdict.upper()}: {c.why}",
           f"  waits of {', '.join(f'{d:g}' for d in c.delays_us)} us; time per operation gained per unit of wait "
           f"added inside the lock: {_response(c.inside)}; just outside it (the control): {_response(c.outside)}",
           f"  plain phases: {c.base_ops_per_sec:,.0f} {unit} (adjacent ones differ by {c.noise:.1%}); {c.how}"]
    if c.predicted:
        out.append("  predicted with the critical sections shorter by " +
                   ", ".join(f"{k}: {v:,.0f}" for k, v in c.predicted.items()) +
                   f" {unit} (an upper estimate: the lock taken as held for the whole serial time per operation)")
    return out + [f"  warning: {w}" for w in c.warnings]
