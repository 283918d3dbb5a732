"""A child process held running while something is switched on and off
beside it, its progress read from its output as it runs: a thread keeps
(t_ns, value) of each progress line, so that the rate of any stretch of the
run can be read afterwards. The base of SteadyLoad (a built-in workload's
JSON lines) and CommandLoad (any command's own lines, by a regex); each says
how it reads a line and when the load has started.

The child runs in a process group of its own, killed with lockscope
(SIGKILL included: the watchdog)."""
from __future__ import annotations

import subprocess
import threading

from lockscope.errors import LockscopeError
from lockscope.measure.jsonlines import kill_group, spawn_gated

START_TIMEOUT_S = 120


class ProgressLoad:
    def __init__(self, argv: list[str]):
        self.argv = argv
        self.samples: list[tuple[int, float]] = []     # (t_ns, the count or rate a line gave)
        self.proc: subprocess.Popen | None = None
        self.ended = False                              # its output ended (it exited)

    def _spawn(self, **popen_kw) -> None:
        self.proc = spawn_gated(self.argv, None, stdout=subprocess.PIPE, text=True, start_new_session=True,
                                **popen_kw)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._line(line)
        self.ended = True
        self._ended()

    def _line(self, line: str) -> None:
        """One line of the child's output (a progress line adds a sample)."""
        raise NotImplementedError

    def _ended(self) -> None:
        """The child's output ended."""

    def __exit__(self, *exc) -> None:
        if self.proc:
            kill_group(self.proc)

    def _inside(self, t0: int, t1: int, too_few: str) -> list[tuple[int, float]]:
        """The samples in [t0, t1]: at least two, else LockscopeError(too_few)."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            raise LockscopeError(too_few)
        return inside

    @staticmethod
    def _count_rate(inside: list[tuple[int, float]]) -> float:
        """Per second, between the first and the last of running counts."""
        (a_t, a), (b_t, b) = inside[0], inside[-1]
        return (b - a) / ((b_t - a_t) / 1e9)
