"""`run --target` on a plain command: tests/programs/hotmutex.c, started
outside lockscope, is the work (its threads contend on the global pthread
mutex `hot_lock`); the command, a busy Python loop, only drives the load
and is a role of its own, marked driver, never a worker although it is
busy. The target runs on, unsignalled, after the point; the command is the
only thing lockscope stops. Bad --target values are one-line errors."""
from __future__ import annotations

import sys

import pytest

from conftest import lockscope
from test_attach import Target, _record, _top_user_lock, hotmutex  # noqa: F401 (a fixture)

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 2.5: pass"


@pytest.fixture
def target(hotmutex, tmp_path):  # noqa: F811
    t = Target(hotmutex, tmp_path / "target.log")
    yield t
    t.end()


def test_target_is_the_work_the_command_a_driver(e2e, target, tmp_path):
    out = tmp_path / "out"
    r = lockscope("run", "--target", f"pid:{target.pid}", "--workers", "3", "--name", "client",
                  "--out", str(out), "--", sys.executable, "-c", BUSY)
    assert r.returncode == 0, r.stderr
    rec = _record(out)
    assert rec.kind == "command" and rec.target is not None
    assert rec.target.how == "pid" and [p.pid for p in rec.target.processes] == [target.pid]
    # the work is the target's threads; the busy command is the driver, apart
    assert rec.worker_roles == {"hotmutex"}, [(x.name, x.worker, x.reason) for x in rec.roles]
    drivers = [x for x in rec.roles if x.driver]
    assert drivers and all(not x.worker for x in drivers), [(x.name, x.driver) for x in rec.roles]
    assert any(x.name.startswith("python") and x.on_cpu_ns > 0.5e9 for x in drivers), drivers
    top = _top_user_lock(rec)
    assert "hot_lock" in top.name and top.kind == "pthread_mutex", top
    assert "(driver)" in r.stdout
    target.assert_undisturbed()


@pytest.mark.parametrize("args, message", [
    (["--target", "pid"], "expected pid:P[,P...], comm:NAME or cgroup:PATH"),
    (["--target", "host:1"], "expected pid:P[,P...], comm:NAME or cgroup:PATH"),
    (["--target", "pid:999999999"], "no such process 999999999"),
    (["--target", "comm:no-such-comm-x"], "no process named 'no-such-comm-x'"),
])
def test_bad_targets_are_one_line_errors(args, message):
    r = lockscope("run", *args, "--no-probe", "--", "true")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_target_needs_a_command():
    r = lockscope("run", "MWRM", "--target", "pid:1", "--no-probe")
    assert r.returncode == 2 and "--target goes with a command" in r.stderr, r.stderr
