"""CPU samples taken at the timer interrupts a CPU takes anyway
(--sample-clock tick, the default up to 100 Hz; issue 12, part 3).

The probe walks the stack from inside the hrtimer interrupt: lockscope cuts
the interrupt's own frames off, and a sample whose interrupt came from user
space becomes a user-space sample. Unit tests read one real probe window
(tests/data/ticksample: `mmap` with 2 workers, rwsem optimistic spinning on
mm->mmap_lock), as the probe gave it; the end-to-end tests trace a busy
process with each clock."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lockscope.analyzer import naming, ticksample
from lockscope.jsondata import from_list
from lockscope.probedata import CpuSample, RawProbe

DATA = Path(__file__).parent / "data" / "ticksample" / "window.json"
INTERRUPT = ("asm_sysvec_", "hrtimer_interrupt", "__hrtimer_run_queues", "bpf_trace_run")


def window() -> dict:
    return json.loads(DATA.read_text())


def has_interrupt_frames(frames: list[str]) -> bool:
    return any(f.startswith(INTERRUPT) for f in frames)


def test_recorded_window_is_a_tick_window_with_the_interrupt_frames_on():
    d = window()
    assert d["sample_clock"] == "tick"
    assert all(has_interrupt_frames(v) for v in d["sample_stacks"].values())


def test_cut_leaves_the_interrupted_context_and_keeps_every_sample():
    d = window()
    samples = from_list(CpuSample, d["cpu_samples"])
    stacks = {int(k): v for k, v in d["sample_stacks"].items()}
    cut = ticksample.cut_interrupt(samples, stacks)
    assert sum(s.count for s in cut.samples) == sum(s.count for s in samples)
    assert cut.unsplit == 0
    assert not any(has_interrupt_frames(v) for v in cut.stacks.values())
    # user-space samples (the interrupt came from user space: nothing below the entry)
    user = [s for s in cut.samples if s.stack == ticksample.STACK_USER]
    assert user and all(s.stack not in cut.stacks for s in user)
    # a kernel sample starts at the interrupted instruction: the workers spin on
    # mm->mmap_lock (rwsem_spin_on_owner) or run mmap/munmap
    tops = {cut.stacks[s.stack][0].split("+")[0] for s in cut.samples if s.stack >= 0}
    assert "rwsem_spin_on_owner" in tops or "osq_lock" in tops, tops


def test_cut_samples_feed_the_sampled_rwsem_spin():
    d = window()
    samples = from_list(CpuSample, d["cpu_samples"])
    cut = ticksample.cut_interrupt(samples, {int(k): v for k, v in d["sample_stacks"].items()})
    raw = RawProbe(cpu_samples=cut.samples, sample_stacks=cut.stacks, sample_period_ns=d["sample_period_ns"],
                   sample_clock="tick")
    spin = sum(s.count for s, _ in naming.spinning_samples(raw, naming.default_knowledge()))
    # the cut loses no spinning sample
    uncut = RawProbe(cpu_samples=samples, sample_stacks={int(k): v for k, v in d["sample_stacks"].items()},
                     sample_period_ns=d["sample_period_ns"])
    assert sum(s.count for s, _ in naming.spinning_samples(uncut, naming.default_knowledge())) == spin
    total = sum(s.count for s in cut.samples)
    assert 0.1 * total < spin < total, (spin, total)
    # each stands for one period, as a cpu-clock sample does
    locks = naming.add_sampled_spin([], raw, 2, d["window_ns"])
    assert sum(lk.sampled_spin_ns for lk in locks) == spin * d["sample_period_ns"]


def test_interrupted_frames_of_each_path():
    entry = ["bpf_trace_run2+0xf2", "__hrtimer_run_queues+0x1f5", "hrtimer_interrupt+0xf8",
             "__sysvec_apic_timer_interrupt+0x54", "sysvec_apic_timer_interrupt+0x2c",
             "asm_sysvec_apic_timer_interrupt+0x16"]
    assert ticksample.interrupted(entry) == []                       # from user space
    assert ticksample.interrupted(entry + ["do_syscall_64+0x46"]) == ["do_syscall_64+0x46"]
    # a soft hrtimer run by local_bh_enable in task context: no entry
    soft = ["__hrtimer_run_queues+0x1f5", "hrtimer_run_softirq+0x9e", "handle_softirqs+0xcd",
            "__local_bh_enable_ip+0x7e", "tcp_sendmsg+0x30"]
    assert ticksample.interrupted(soft) == ["__local_bh_enable_ip+0x7e", "tcp_sendmsg+0x30"]
    assert ticksample.interrupted(["foo+0x1", "bar+0x2"]) is None   # neither: kept, and counted
    cut = ticksample.cut_interrupt([CpuSample(stack=1, count=3)], {1: ["foo+0x1", "bar+0x2"]})
    assert cut.unsplit == 3 and cut.stacks == {1: ["foo+0x1", "bar+0x2"]}


# ---- end to end: the real probe on a busy process ---------------------------

BUSY = "import os\nwhile True: os.getppid()"


def probe_window(clock: str, seconds: float = 2.0) -> tuple[dict, RawProbe]:
    from lockscope.probe import ProbeSession
    from lockscope.runner import raw_from_probe

    busy = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", BUSY])
    try:
        with ProbeSession(sample_hz=49, sample_clock=clock) as p:
            p.track(busy.pid)
            p.start()
            time.sleep(seconds)
            d = p.stop()
    finally:
        busy.kill()
        busy.wait()
    return d, raw_from_probe(d, None)


@pytest.mark.parametrize("clock", ["tick", "cpu-clock"])
def test_busy_process_sampled_at_the_rate_asked(e2e, clock):
    d, raw = probe_window(clock)
    assert d["sample_clock"] == clock and raw.sample_clock == clock
    n = sum(s.count for s in raw.cpu_samples)
    expected = 49 * d["window_ns"] / 1e9            # one busy CPU
    # the tick clock takes at most one sample per due instant; neither takes more
    # than the CPU's share the process got
    assert 0.6 * expected <= n <= expected + 2, (n, expected)
    if clock == "tick":     # (a cpu-clock sample may land in an interrupt of the process: its frames are real)
        assert not any(has_interrupt_frames(v) for v in raw.sample_stacks.values())
    # the loop is a syscall storm: both user-space and syscall samples
    user = sum(s.count for s in raw.cpu_samples if s.stack == ticksample.STACK_USER)
    assert 0 < user < n, (user, n)
    assert any(f.startswith("do_syscall_64") or f.startswith("entry_SYSCALL")
               for v in raw.sample_stacks.values() for f in v)

