"""One timed window over the tasks the probe tracks: the CPU time breakdown,
the CPI counters and the probe, started and stopped together."""
from __future__ import annotations

import contextlib
import time

from lockscope.measure import background, cpustat, hwcounters
from lockscope.measure.probe import ProbeSession


class Window:
    """One timed window over tasks the probe tracks: the CPU time breakdown,
    the CPI counters and the probe, started and stopped together. Shared by
    a command's point (run_command) and an attached target (attach.py): the
    caller decides what happens between start() and stop()."""

    def __init__(self, stack: contextlib.ExitStack, probe: ProbeSession | None, cpus: list[int]):
        self.probe = probe
        self.hw = stack.enter_context(hwcounters.CpiCounters(cpus))
        self.before: dict = {}
        self.after: dict = {}
        self.data: dict | None = None
        self.t0 = 0.0
        self.elapsed = 0.0
        self.bg0: background.Snapshot | None = None
        self.background = None          # record.Background, after stop()

    def start(self) -> None:
        self.bg0 = background.snapshot()
        self.before = cpustat.sample()
        self.hw.start()
        if self.probe:
            self.probe.start()
        self.t0 = time.monotonic()

    def stop(self, measured: set[int] | None = None) -> dict | None:
        """measured: the processes (with their descendants) that are the
        work; every other one is the window's background."""
        self.elapsed = time.monotonic() - self.t0
        self.after = cpustat.sample()
        self.background = background.measure(self.bg0, background.snapshot(), measured or set())
        self.hw.stop()
        self.data = self.probe.stop() if self.probe else None
        return self.data

    def cpu(self, cpus: list[int] | None = None):
        return cpustat.breakdown(self.before, self.after, cpus)
