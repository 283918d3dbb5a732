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
show only side by side (bench/README.md).

With a budget (--max-overhead), the loader measures the probe's share every
period (about a second) and, over the budget, lowers one sampling rate a
period (probes/budget.c): `budget()` says whether it was kept, what was shed
and what each step leaves out."""
from __future__ import annotations

from dataclasses import dataclass, field

from lockscope.model.record import CostPeriod, ProbeCost, RunRecord


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
    budget: "Budget | None" = None       # --max-overhead: kept or not, what was shed


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
    total = sum(p.share for p in parts)
    return OwnCost(total, parts, unavailable, cost.bpf_stats_share if cost.bpf_stats else None,
                   budget(cost, ncpus, total))


# what each knob of the ladder samples, and its unit (probes/budget.c)
KNOBS = {
    "stack_rate": ("kernel stack walks", "/s per CPU", "a lock's stacks stand for more of its waits"),
    "timed_rate": ("timed kernel lock waits", "/s per CPU", "wait times are estimated from fewer timed waits"),
    "objects_ms": ("object snapshots", " ms apart", "objects that come and go between snapshots go unnamed"),
}


@dataclass
class Budget:
    max_share: float
    share: float                     # the window's own cost, every part
    after_share: float | None        # the probe's share over the periods after the last step (None: no period)
    steps: list[str] = field(default_factory=list)     # what was shed, in order
    exhausted: bool = False          # a period was over it with nothing left to shed

    @property
    def kept(self) -> bool:
        return self.share <= self.max_share


def _probe_ns(p: CostPeriod) -> int:
    """The probe's CPU time in one period: its programs, their traps, the loader."""
    return p.bpf_ns + p.traps_ns + p.loader_ns


def period_share(p: CostPeriod, ncpus: int) -> float:
    """The probe's share of the machine's CPUs in one period."""
    return _probe_ns(p) / (p.period_ns * ncpus) if p.period_ns else 0.0


def budget(cost: ProbeCost, ncpus: int, total: float) -> Budget | None:
    """None without --max-overhead; else whether the window's own cost
    (`total`, every part) kept it, the steps shed and the probe's share
    after the last of them (the periods the last step ruled)."""
    if not cost.max_share:
        return None
    steps = []
    for st in cost.shed:
        name, unit, loss = KNOBS.get(st.what, (st.what, "", ""))
        before = "every one" if st.before == 0 and st.what != "objects_ms" else f"{st.before:,}{unit}"
        step = f"{name} {before} -> {st.after:,}{unit} at {st.t_ns / 1e9:.1f} s"
        steps.append(f"{step}, given back (it saved too little)" if st.given_back else f"{step} ({loss})")
    last = cost.shed[-1].t_ns if cost.shed else 0
    # the window's final period is cut by the stop (the workload stopping, the stats on for a few
    # ms of it): the share after the last step is read from the full periods only
    after = [p for p in cost.periods[:-1] if p.t_ns > last]
    ran = sum(p.period_ns for p in after)
    after_share = sum(map(_probe_ns, after)) / (ran * ncpus) if ran else None
    return Budget(cost.max_share, total, after_share, steps, bool(cost.shed_exhausted))


def describe_budget(b: Budget) -> str:
    """"budget 3.0% of the CPUs: kept; shed: ..." or "budget 1.0% of the
    CPUs: not kept (4.1% over the window; ...)", with what was shed."""
    head = f"budget {b.max_share:.1%} of the CPUs: "
    if b.kept:
        head += "kept"
    else:
        why = [f"{b.share:.1%} over the window"]
        if b.after_share is not None:
            why.append(f"{b.after_share:.1%} after the last step")
        if b.exhausted:
            why.append("nothing left to shed: what takes it, the programs' run on every event and the uprobes' "
                       "traps, no step reaches")
        head += f"not kept ({'; '.join(why)})"
    if b.steps:
        head += "; shed: " + "; ".join(b.steps)
    elif b.kept:
        head += ", nothing shed"
    return head


def describe(c: OwnCost, top: int = 3) -> str:
    """"lockscope's own cost in this run: 1.4% of the CPUs (BPF
    lksc_contention_begin 0.6%, loader 0.4%, ...)"."""
    shown = [p for p in c.parts if p.cpu_ns][:top]
    text = (f"lockscope's own cost in this run: {c.share:.1%} of the CPUs" +
            (f" ({', '.join(f'{p.name} {p.share:.1%}' for p in shown)})" if shown else ""))
    if c.bpf_counted is not None:
        text += f"; BPF run times counted in {c.bpf_counted:.0%} of the window, scaled"
    text += "".join(f"; not counted: {u}" for u in c.unavailable)
    return text + (f"\n{describe_budget(c.budget)}" if c.budget else "")
