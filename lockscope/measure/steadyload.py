"""A built-in workload held running while something else is switched on and
off beside it: the side-by-side measurements of bench/ (probe overhead,
probe cost, sampling cost) and the timed-wait tests. The driver runs
directly (no ProbeSession, no record) with a progress line every `interval`
seconds; a thread keeps (t_ns, total ops) of each, so that the rate of any
stretch of the run can be read afterwards.

    with SteadyLoad("PMUTEX", 2, mountpoint, duration=60) as load:
        t0 = time.monotonic_ns(); time.sleep(1.5)
        load.rate(t0, time.monotonic_ns())
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

from lockscope import paths
from lockscope.errors import LockscopeError
from lockscope.measure.progressload import START_TIMEOUT_S, ProgressLoad


class SteadyLoad(ProgressLoad):
    def __init__(self, workload: str, workers: int, directory: Path | str, duration: float,
                 interval: float = 0.1, warmup: float = 1.0, cpus: str | None = None, params: dict | None = None):
        argv = [str(paths.workload_binary()), "run", "--workload", workload, "--workers", str(workers),
                "--duration", str(duration), "--warmup", str(warmup), "--dir", str(directory),
                "--interval", str(interval)] + (["--cpus", cpus] if cpus else [])
        for k, v in (params or {}).items():
            argv += ["--param", f"{k}={v}"]
        super().__init__(argv)
        self.ready: dict = {}
        self.started = threading.Event()     # the window started, or the driver's output ended

    @property
    def worker_pids(self) -> list[int]:
        return self.ready.get("worker_pids", [])

    def __enter__(self) -> "SteadyLoad":
        self._spawn()
        if not self.started.wait(START_TIMEOUT_S) or self.ended:
            self.__exit__()
            why = f"exited with status {self.proc.returncode}" if self.ended else \
                f"did not start within {START_TIMEOUT_S} s"
            raise LockscopeError(f"the workload {why}: {' '.join(self.argv)}")
        return self

    def _line(self, line: str) -> None:
        ev = json.loads(line)
        if ev["event"] == "ready":
            self.ready = ev
        elif ev["event"] == "measure_start":
            self.started.set()
        elif ev["event"] == "progress":
            self.samples.append((ev["t_ns"], sum(ev["ops"])))

    def _ended(self) -> None:
        self.started.set()

    def _ends(self, t0: int, t1: int) -> tuple[tuple[int, int], tuple[int, int]]:
        inside = self._inside(t0, t1, "the stretch is too short for the workload's progress interval")
        return inside[0], inside[-1]

    def ops_between(self, t0: int, t1: int) -> int:
        """ops done between the first and last progress lines in [t0, t1]"""
        (_, a), (_, b) = self._ends(t0, t1)
        return b - a

    def rate(self, t0: int, t1: int) -> float:
        """ops/s between the first and last progress lines in [t0, t1]"""
        return self._count_rate(self._inside(t0, t1, "the stretch is too short for the workload's progress "
                                                     "interval"))
