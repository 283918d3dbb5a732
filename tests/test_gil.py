"""CPython's GIL as one lock entry (analyzer/user/runtimes.toml): "GIL
(CPython)", kind GIL, whatever futex word of it a thread sleeps on (the
condition variable waiters time out on every 5 ms, the mutex, the switch
condition variable), and a lock wait even when the timed wait times out.
Checked against the program's own clock (tests/programs/gil.py: each
thread's CPU time against its wall time) on Debian's stripped python3.11
(the GIL in the executable's _PyRuntime) and a pyenv build (in
libpython's)."""
from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

import pytest

from conftest import REPO, e2e_missing, lockscope
from lockscope import record
from lockscope.analyzer import sleepkinds
from lockscope.analyzer.user import runtimes
from lockscope.probedata import FutexAddress

GIL = "GIL (CPython)"
PROGRAM = REPO / "tests" / "programs" / "gil.py"


def test_the_gil_is_known_by_its_symbol_in_a_python_object():
    at = runtimes.lock_at
    for f in ("/usr/bin/python3.11", "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0"):
        lk = at(FutexAddress(region="object", file=f, symbol="_PyRuntime", symbol_offset=0x1b4))
        assert lk is not None and (lk.name, lk.kind, lk.component) == (GIL, "GIL", "CPython")
    assert at(FutexAddress(region="object", file="/usr/lib/libfoo.so", symbol="_PyRuntime")) is None
    assert at(FutexAddress(region="object", file="/usr/bin/python3.11", symbol="other")) is None
    assert at(FutexAddress(region="heap")) is None


def test_every_runtime_lock_is_always_a_lock_wait():
    """sleepkinds.toml gives each runtime lock's kind the sleep kind lock:
    its timed waits that time out are not idle."""
    table = sleepkinds.default()
    for kind in runtimes.default().kinds:
        assert table.primitive_kind(kind) == sleepkinds.LOCK, kind


def interpreters() -> list[str]:
    """Debian's python3.11 (stripped) and one pyenv build with a shared libpython, where present."""
    found = [p for p in ("/usr/bin/python3.11",) if os.access(p, os.X_OK)]
    for p in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[1-9]*/bin/python3.1[1-9]"))):
        if glob.glob(str(Path(p).parent.parent / "lib" / "libpython3*.so*")):
            found.append(p)
            break
    return found or [sys.executable]


@pytest.mark.parametrize("python", interpreters())
def test_gil_is_one_entry_sized_as_the_programs_own_clock(e2e, tmp_path, python):
    clock = tmp_path / "clock.txt"
    # the program ends inside the window (5 s of 7): its clock and the window cover the same time
    # (over a longer run, lockscope's own CPU use on 2 CPUs, outside its window, preempting the
    # GIL's holder, moved the program's figure 11-14 points from the window's)
    r = lockscope("run", "--workers", "2", "--duration", "7", "--out", str(tmp_path / "res"), "--name", "gil",
                  "--throughput-regex", r"ops/s: ([0-9.]+)", "--force", "--", python, str(PROGRAM), "{n}", "5",
                  str(clock), timeout=240)
    assert r.returncode == 0, r.stderr
    [run] = sorted((tmp_path / "res" / "runs").glob("*.json"))
    rec = record.load(run)
    own = float(clock.read_text())
    top = rec.locks[0]
    print(python, {"program's clock": own, "lockscope": [(lk.name, round(lk.wait_share, 3))
                                                          for lk in rec.locks[:4]]})
    assert (top.name, top.kind, top.component, top.tier) == (GIL, "GIL", "CPython", "verified")
    assert [lk.name for lk in rec.locks if lk.component == "CPython"] == [GIL]       # one entry
    assert own > 0.3, own                                                           # the threads did wait
    assert abs(top.wait_share - own) <= 0.10, (top.wait_share, own)
