"""The built-in workloads: the catalog (from the driver itself) and a session
that drives lockscope-workload through its control protocol
(ready -> go -> reference -> measure_start -> measure_end -> stop -> result).
`reference` comes in the middle of the warm-up with the rate so far, before
any recording (workloads/README.md); the runner starts the probes then.
check_workload also knows the application workloads (apps.py)."""
from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Callable

from lockscope import paths
from lockscope.measure import apps
from lockscope.errors import LockscopeError, UsageError
from lockscope.measure.jsonlines import JsonLinesProcess


@functools.lru_cache(maxsize=1)
def catalog() -> dict[str, dict]:
    """name -> {operation, sharing, component, model, needs_dir}"""
    out = subprocess.run([str(paths.workload_binary()), "--list"], capture_output=True, text=True)
    if out.returncode != 0:
        raise LockscopeError(f"lockscope-workload --list failed: {out.stderr.strip()}")
    return {w["name"]: w for w in json.loads(out.stdout)["workloads"]}


def check_params(name: str, given: dict[str, str]) -> dict[str, int | str]:
    """--param KEY=VALUE of workload `name`, checked against its catalog
    entry (integer in [min, max], or one of its choices); returns them as
    integers (or the chosen word)."""
    specs = {p["name"]: p for p in check_workload(name).get("params", [])}
    out = {}
    for key, text in given.items():
        if key not in specs:
            valid = f"valid: {', '.join(specs)}" if specs else "it takes none"
            raise UsageError(f"--param {key}: workload {name} has no parameter '{key}' ({valid})",
                             "see `lockscope list` for each workload's parameters")
        p = specs[key]
        if "choices" in p:
            if text not in p["choices"]:
                raise UsageError(f"--param {key}={text}: must be one of {', '.join(p['choices'])}")
            out[key] = text
            continue
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not p["min"] <= value <= p["max"]:
            raise UsageError(f"--param {key}={text}: must be an integer between {p['min']} and {p['max']}")
        out[key] = value
    return out


def check_workload(name: str) -> dict:
    """The catalog entry of a built-in or application workload."""
    cat = catalog()
    app = apps.get(name)
    if app and name in cat:
        raise LockscopeError(f"{name} is both a built-in workload and an application (lockscope/measure/apps.toml)")
    if app:
        return app.catalog_entry()
    if name not in cat:
        every = list(cat) + apps.names()
        close = [n for n in every if n.lower() == name.lower()]
        hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(f"unknown workload '{name}'",
                         f"{hint}choose from: {', '.join(every)} (see `lockscope list`), "
                         "or profile any program with `lockscope run ... -- CMD ARGS`")
    return cat[name]


class WorkloadSession(JsonLinesProcess):
    what = "lockscope-workload"

    def __init__(self, workload: str, workers: int, duration: float, warmup: float,
                 directory: Path | None, cpus: list[int] | None = None, params: dict | None = None,
                 interval: float = 0.0, latency: bool = True):
        super().__init__()
        self.progress: list[dict] = []     # progress events (time series), in order
        self.argv = [str(paths.workload_binary()), "run", "--workload", workload,
                     "--workers", str(workers), "--duration", f"{duration:g}",
                     "--warmup", f"{warmup:g}", "--control"]
        if directory is not None:
            self.argv += ["--dir", str(directory)]
        if cpus:
            self.argv += ["--cpus", ",".join(map(str, cpus))]
        for k, v in (params or {}).items():
            self.argv += ["--param", f"{k}={v}"]
        if interval:
            self.argv += ["--interval", f"{interval:g}"]
        if not latency:
            self.argv.append("--no-latency")
        self.duration = duration
        self.warmup = warmup
        self.workers = workers

    def on_other(self, ev: dict) -> None:
        """Progress events are kept (the time series)."""
        if ev.get("event") == "progress":
            self.progress.append(ev)

    def start(self, before_exec: Callable[[int], None] | None = None) -> None:
        self._spawn(self.argv, before_exec)

    def on_error(self, ev: dict) -> None:
        where = f"worker {ev['worker']}: " if "worker" in ev else ""
        op = f"{ev['op']} {ev.get('path', '')}: ".replace(" : ", ": ") if ev.get("op") else ""
        raise LockscopeError(f"workload failed: {where}{op}{ev.get('message', ev)}")

    def wait_ready(self, timeout: float = 1800) -> dict:
        return self.expect("ready", timeout)

    def go(self) -> dict:
        """Release the workers; the reference event (the first part of the
        warm-up: seconds, ops, ops_per_sec)."""
        self.send("go")
        return self.expect("reference", timeout=self.warmup + 120)

    def wait_measure_start(self) -> dict:
        return self.expect("measure_start", timeout=self.warmup + 120)

    def wait_measure_end(self) -> dict:
        return self.expect("measure_end", timeout=self.duration + 120)

    def finish(self) -> dict:
        self.send("stop")
        # thousands of tasks blocked in fsync (syncs) take long to stop
        result = self.expect("result", timeout=60 + self.workers / 40)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        return result

    def close(self, quit_line: str | None = None, grace: float = 2.0) -> None:
        super().close(None, grace)

    def __exit__(self, *exc) -> None:
        self.close()
