"""Any command held running while something is switched on and off beside
it (`lockscope confirm ... -- CMD`), its throughput read from its own
output lines as it runs: the SteadyLoad of commands.

    --ops-regex 'ops: ([0-9]+)'      a running count of operations (a line
                                     at least every ~0.2 s)
    --rate-regex 'tps = ([0-9.]+)'   a rate per line (e.g. pgbench -P 1);
                                     a phase's rate is the mean of the lines
                                     that arrived in it

The command runs in a process group of its own (killed with lockscope,
SIGKILL included), {n} and {dir} substituted as in `run`; its output is
read through a terminal (ptyout.py), line by line as it prints."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from lockscope.errors import LockscopeError, UsageError
from lockscope.measure import targets as tg
from lockscope.measure.jsonlines import spawn_gated
from lockscope.measure.progressload import START_TIMEOUT_S, ProgressLoad
from lockscope.measure.ptyout import PtyOutput, lines


class CommandLoad(ProgressLoad):
    def __init__(self, argv: list[str], ops_regex: str | None = None, rate_regex: str | None = None,
                 watch: Path | None = None):
        if bool(ops_regex) == bool(rate_regex):
            raise UsageError("confirm on a command needs --ops-regex (a running count of operations in its "
                             "output) or --rate-regex (a rate per line), one of them",
                             "make the program print its progress, e.g. 'ops: N' every 0.1 s")
        super().__init__(argv)
        self.count = bool(ops_regex)
        try:
            self.regex = re.compile(ops_regex or rate_regex)
        except re.error as e:
            raise UsageError(f"{'--ops-regex' if ops_regex else '--rate-regex'}: not a regular expression ({e})") \
                from None
        self.ready = {"watch_paths": [str(watch)] if watch else []}

    @property
    def worker_pids(self) -> list[int]:
        """The command's process and its descendants now."""
        return sorted(tg.tree(self.proc.pid)) if self.proc else []

    def _spawn(self, **popen_kw) -> None:
        """The command's output through a terminal (ptyout.py): its progress
        lines arrive as it prints them, as a user would see them."""
        self.term = PtyOutput(lines(self._line), on_end=self._output_ended)
        try:
            self.proc = spawn_gated(self.argv, None, stdout=self.term.slave, start_new_session=True, **popen_kw)
        except BaseException:
            self.term.close(0)
            raise
        self.term.started()

    def _output_ended(self) -> None:
        self.ended = True
        self._ended()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        if getattr(self, "term", None):
            self.term.close()

    def __enter__(self) -> "CommandLoad":
        try:
            self._spawn(stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        except OSError as e:
            raise LockscopeError(f"cannot run {self.argv[0]}: {e.strerror}", exit_code=2) from e
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(self.samples) < 2 and not self.ended and time.monotonic() < deadline:
            time.sleep(0.05)
        if len(self.samples) < 2:
            self.__exit__()
            raise LockscopeError(f"{' '.join(self.argv)} " + ("exited" if self.ended else
                                 f"ran {START_TIMEOUT_S} s") + " without two lines matching "
                                 f"{self.regex.pattern!r}", "check the regex against the program's output")
        return self

    def _line(self, line: str) -> None:
        m = self.regex.search(line)
        if m:
            try:
                self.samples.append((time.monotonic_ns(), float(m.group(1))))
            except (ValueError, IndexError):
                pass

    def rate(self, t0: int, t1: int) -> float:
        inside = self._inside(t0, t1, "the command printed fewer than two progress lines in a phase: make it "
                                      "print more often, or pass a longer --phase")
        if self.count:
            return self._count_rate(inside)
        return sum(v for _, v in inside) / len(inside)
