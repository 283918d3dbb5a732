"""lockscope's own cost in a run (issue 43): the CPU time its parts took
during the window, as a share of the machine's CPUs over the window.

- the probe's BPF programs: their run time as the kernel counted it (its BPF
  stats, on for 200 ms of each second of the window: counting costs two
  clock reads a run, 1.7 points of MWRM's throughput when always on; the
  counts scaled to the window: ProbeInfo.programs' run_ns);
- the loader (lockscope-probe): its own CPU time, the object iterators' reads
  and the map drains included;
- lockscope itself: the Python process's CPU time (reading the probe's and
  the workload's lines);
- the uprobes' traps into the kernel and back around their programs (the
  programs' run time starts inside): their runs times the price of one trap,
  which the loader measures at start (a no-op uprobe on a function of its
  own, called with and without it: probes/trapcost.bpf.c); an estimate.

Not in it: the cache and scheduling effects on the measured program; those
show only side by side (bench/README.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

from lockscope.model.record import RunRecord


@dataclass
class Part:
    name: str
    cpu_ns: int
    share: float          # of the machine's CPUs over the window


@dataclass
class OwnCost:
    share: float                                   # all parts, of the machine's CPUs over the window
    parts: list[Part] = field(default_factory=list)   # heaviest first
    unavailable: list[str] = field(default_factory=list)   # parts not counted, and why
    bpf_counted: float | None = None     # the share of the window the programs' run times were counted in


def own_cost(rec: RunRecord) -> OwnCost | None:
    """None where the record has no cost (before issue 43, or no probe)."""
    cost = rec.probe.cost
    ncpus = rec.host.ncpus if rec.host and rec.host.ncpus else None
    if cost is None or not rec.probe.attached or rec.probe.window_s <= 0 or not ncpus:
        return None
    capacity = rec.probe.window_s * 1e9 * ncpus
    parts = [Part(f"BPF {p.name}", p.run_ns, p.run_ns / capacity) for p in rec.probe.programs if p.run_ns]
    parts.append(Part("loader (lockscope-probe)", cost.loader_cpu_ns, cost.loader_cpu_ns / capacity))
    if cost.lockscope_cpu_ns is not None:
        parts.append(Part("lockscope", cost.lockscope_cpu_ns, cost.lockscope_cpu_ns / capacity))
    unavailable = [] if cost.bpf_stats else [f"the BPF programs' run time: {cost.reason or 'not counted'}"]
    hits = sum(p.runs for p in rec.probe.programs if p.uprobe)
    if hits and cost.uprobe_trap_ns:
        ns = hits * cost.uprobe_trap_ns
        parts.append(Part(f"uprobe traps ({hits:,} x {cost.uprobe_trap_ns / 1000:.1f} us)", ns, ns / capacity))
    elif hits:
        unavailable.append(f"the uprobes' traps ({hits:,} hits): {cost.uprobe_trap_reason or 'not measured'}")
    parts.sort(key=lambda p: -p.cpu_ns)
    return OwnCost(sum(p.share for p in parts), parts, unavailable,
                   cost.bpf_stats_share if cost.bpf_stats else None)


def describe(c: OwnCost, top: int = 3) -> str:
    """"lockscope's own cost in this run: 1.4% of the CPUs (BPF
    lksc_contention_begin 0.6%, loader 0.4%, ...)"."""
    shown = [p for p in c.parts if p.cpu_ns][:top]
    text = (f"lockscope's own cost in this run: {c.share:.1%} of the CPUs" +
            (f" ({', '.join(f'{p.name} {p.share:.1%}' for p in shown)})" if shown else ""))
    if c.bpf_counted is not None:
        text += f"; BPF run times counted in {c.bpf_counted:.0%} of the window, scaled"
    return text + "".join(f"; not counted: {u}" for u in c.unavailable)
