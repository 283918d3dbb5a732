"""CPU samples taken at the timer interrupts a CPU takes anyway
(`--sample-clock tick`, probes/contention.bpf.c `lksc_tick_sample`): the
probe walks the kernel stack from inside the hrtimer interrupt, through the
interrupt's entry, into the interrupted context. What the sample stands for
is that context: the frames of the interrupt itself (the BPF program, the
hrtimer code, the interrupt entry) are cut off here, and a sample whose
interrupt came from user space (nothing below the entry) becomes a
user-space sample, as a cpu-clock sample that finds no kernel stack is.

Cut through the innermost interrupt entry (x86-64 `asm_sysvec_*`,
`asm_common_interrupt`; arm64 `el1h_64_irq`, `el0t_64_irq`, ...); an hrtimer
that expired in a softirq run in task context (`local_bh_enable`) has no
entry: cut through the softirq handler there. A stack with neither (another
architecture, an unwinder that stopped at the interrupt stack) is kept as
it came, and counted, so that the report can say so."""
from __future__ import annotations

import re
from dataclasses import dataclass

from lockscope.analyzer.knowledge import function
from lockscope.probedata import CpuSample

STACK_USER = -3          # probes/probe.h: a CPU sample taken in user space
_ENTRY = re.compile(r"^(asm_sysvec_|asm_common_interrupt$|el[01][th]_64_irq|el[01][th]_64_fiq)")
_SOFTIRQ = ("handle_softirqs", "__do_softirq")


def interrupted(frames: list[str]) -> list[str] | None:
    """The frames of the interrupted context, innermost first ([] for user
    space); None when the interrupt's own frames cannot be told apart."""
    fns = [function(f) for f in frames]
    for i, fn in enumerate(fns):
        if _ENTRY.match(fn):
            return frames[i + 1:]
    for i, fn in enumerate(fns):
        if fn in _SOFTIRQ:
            return frames[i + 1:]
    return None


@dataclass
class TickSamples:
    samples: list[CpuSample]
    stacks: dict[int, list[str]]
    unsplit: int = 0                  # samples whose interrupt frames were kept (see interrupted)


def cut_interrupt(samples: list[CpuSample], stacks: dict[int, list[str]]) -> TickSamples:
    """The samples and stacks with each stack cut to its interrupted context;
    samples of stacks that come out empty merge into the user-space sample
    (STACK_USER) of the same lock-wait flag."""
    cut: dict[int, list[str]] = {}
    kept: set[int] = set()              # stacks with no interrupt frames found
    for sid, frames in stacks.items():
        rest = interrupted(frames)
        cut[sid] = frames if rest is None else rest
        if rest is None:
            kept.add(sid)
    unsplit = 0
    merged: dict[tuple[int, bool], int] = {}
    for s in samples:
        unsplit += s.count if s.stack in kept else 0
        sid = STACK_USER if cut.get(s.stack) == [] else s.stack
        merged[(sid, s.in_lock_wait)] = merged.get((sid, s.in_lock_wait), 0) + s.count
    out = [CpuSample(stack=sid, in_lock_wait=lw, count=n) for (sid, lw), n in merged.items()]
    out.sort(key=lambda s: -s.count)
    return TickSamples(samples=out, stacks={k: v for k, v in cut.items() if v}, unsplit=unsplit)
