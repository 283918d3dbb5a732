"""Where lockscope's own binaries are: installed next to the package by
`pip install .`, or in the source tree's build directories, or where an
environment variable says."""
from __future__ import annotations

import os
from pathlib import Path

from lockscope.errors import EnvironmentProblem

_PKG = Path(__file__).resolve().parent
_SOURCE_TREE = _PKG.parent
_BUILD_DIRS = {"lockscope-probe": "probes", "lockscope-inject": "probes", "lockscope-workload": "workloads"}


def binary(name: str) -> Path:
    env = os.environ.get("LOCKSCOPE_" + name.split("-", 1)[1].upper().replace("-", "_"))
    candidates = [Path(env)] if env else []
    candidates += [_PKG / "bin" / name, _SOURCE_TREE / _BUILD_DIRS[name] / "build" / name]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise EnvironmentProblem(
        f"{name} is not built (looked in {', '.join(str(c) for c in candidates)})",
        "run `make install` (or `pip install .`) in the lockscope source tree")


def probe_binary() -> Path:
    return binary("lockscope-probe")


def inject_binary() -> Path:
    return binary("lockscope-inject")


def workload_binary() -> Path:
    return binary("lockscope-workload")
