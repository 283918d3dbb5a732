"""A Go channel's lock named as a channel (sleepkinds.toml: runtime.lock2
within a channel operation is kind "Go channel"), by the program's function
that sends: tests/programs/chanload.go's producers (main.main.func1, its
first closure) on one buffered channel. That the probe leaves the program's
runtime locking as it was is bench/go_probe_effect.py's (Go's own
runtime-lock wait and sends, with and without lockscope: bench/README.md)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import REPO, lockscope
from lockscope import record


def _build(tmp_path) -> str:
    if not shutil.which("go"):
        pytest.skip("go not found: tests/programs/chanload.go cannot be built")
    exe = str(tmp_path / "chanload")
    subprocess.run(["go", "build", "-o", exe, str(REPO / "tests" / "programs" / "chanload.go")], check=True,
                   capture_output=True,
                   env={**os.environ, "GOCACHE": str(tmp_path / "gocache"), "GOFLAGS": "", "GO111MODULE": "off"})
    return exe


def test_channel_lock_is_named_as_a_channel_by_the_sending_function(e2e, tmp_path, scratch):
    exe = _build(tmp_path)
    for attempt in range(3):        # a run whose producers hardly overlapped judges nothing: again
        out = tmp_path / f"out{attempt}"
        r = lockscope("run", "--workers", "4", "--duration", "3", "--name", "chan", "--out", str(out),
                      "--scratch", str(scratch), "--", exe, "{n}", "4")
        assert r.returncode == 0, r.stderr
        [path] = (out / "runs").glob("*.json")
        rec = record.load(path)
        user = [lk for lk in rec.locks if lk.component == "user space"]
        if user and user[0].wait_ns > 1_000_000:
            break
    print([(lk.name, lk.kind, round(lk.wait_share, 4)) for lk in user[:4]])
    top = user[0]
    assert (top.kind, top.name) == ("Go channel", "Go channel @ main.main.func1"), \
        [lk.name for lk in user[:4]]
    # the channel's lock is no longer a "Go runtime lock"
    assert not [lk for lk in user if lk.kind == "Go runtime lock" and lk.wait_ns > top.wait_ns / 10]
