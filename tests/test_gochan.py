"""A Go channel's lock named as a channel (sleepkinds.toml: runtime.lock2
within a channel operation is kind "Go channel"), by the program's function
that sends: tests/programs/chanload.go's producers (main.main.func1, its
first closure) on one buffered channel. That the probe leaves the program's
runtime locking as it was is bench/go_probe_effect.py's (Go's own
runtime-lock wait and sends, with and without lockscope: bench/README.md)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import go_env, lockscope, REPO
from lockscope.model import record


def _build(tmp_path) -> str:
    if not shutil.which("go"):
        pytest.skip("go not found: tests/programs/chanload.go cannot be built")
    exe = str(tmp_path / "chanload")
    subprocess.run(["go", "build", "-o", exe, str(REPO / "tests" / "programs" / "chanload.go")], check=True,
                   capture_output=True,
                   env=go_env())
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
    # the producers (func1) sleep on it most; with their spinning added (tests below) the
    # consumer (func2), which spins on the same channel's lock, can come first
    assert top.kind == "Go channel" and top.name in ("Go channel @ main.main.func1", "Go channel @ main.main.func2"), \
        [lk.name for lk in user[:4]]
    assert "Go channel @ main.main.func1" in [lk.name for lk in user[:3]]
    # the channel's lock is no longer a "Go runtime lock"
    assert not [lk for lk in user if lk.kind == "Go runtime lock" and lk.wait_ns > top.wait_ns / 10]


def test_rules_find_the_spin_of_a_channels_lock_and_not_a_mutexs():
    from lockscope.analyzer import sleepkinds
    table = sleepkinds.SleepKinds()
    # procyield keeps no frame: lock2 is missing from a frame-pointer stack taken in it
    assert table.spinning(["runtime.procyieldAsm.abi0", "runtime.sellock", "runtime.selectgo"]) == "Go channel"
    assert table.spinning(["runtime.nanotime", "runtime.lock2", "runtime.chanrecv", "runtime.chanrecv2"]) == \
        "Go channel"
    assert table.spinning(["runtime.lock2", "runtime.(*mheap).alloc"]) == "Go runtime lock"
    # an idle M looking for work spins on the scheduler's lock: idle, not a lock wait
    assert table.spinning(["runtime.procyieldAsm.abi0", "runtime.stopm", "runtime.findRunnable",
                           "runtime.schedule"]) is None
    # sync.Mutex spins in procyield too: that mutex's spin, not a runtime lock's (a writer of a
    # sync.RWMutex in its inner mutex: the RWMutex's)
    assert table.spinning(["runtime.procyieldAsm.abi0", "internal/sync.(*Mutex).lockSlow"]) == "sync.Mutex"
    assert table.spinning(["internal/sync.(*Mutex).lockSlow"]) == "sync.Mutex"
    assert table.spinning(["runtime.procyieldAsm.abi0", "internal/sync.(*Mutex).lockSlow",
                           "sync.(*RWMutex).Lock"]) == "sync.RWMutex"
    # releasing is not spinning
    assert table.spinning(["runtime.unlock2", "runtime.selunlock", "runtime.selectgo"]) is None
    assert table.spinning(["pthread_spin_lock"]) == "pthread_spinlock"


def test_spinning_is_added_to_the_channels_lock_as_gos_cpu_profile_sees_it(e2e, tmp_path, scratch):
    """Go's lock2 spins before it sleeps: that CPU time is the channel's,
    charged from CPU samples of the threads' user stacks. The independent
    figure: Go's own CPU profile of the same run (runtime.lock2, cumulative)."""
    import re
    exe = _build(tmp_path)
    out, prof = tmp_path / "out", tmp_path / "cpu.prof"
    r = lockscope("run", "--workers", "4", "--duration", "3", "--sample-hz", "99", "--name", "chan", "--out", str(out),
                  "--scratch", str(scratch), "--", exe, "{n}", "3", env={"GOCHAN_CPUPROFILE": str(prof)})
    assert r.returncode == 0, r.stderr
    [path] = (out / "runs").glob("*.json")
    rec = record.load(path)
    top = next(lk for lk in rec.locks if lk.component == "user space")
    # the channel's lock, by either of its two sites: the producers (func1) and the consumer (func2)
    # both spin on it, and their sampled spin is close (a quiet fresh-clone CI read func2 192 ms,
    # func1 172 ms; other runs the reverse): which site leads is no property of the program
    sites = ("Go channel @ main.main.func1", "Go channel @ main.main.func2")
    assert top.name in sites and top.sampled_spin_ns > 0, [(lk.name, lk.sampled_spin_ns) for lk in rec.locks[:4]]
    assert set(sites) <= {lk.name for lk in rec.locks if lk.sampled_spin_ns > 0}
    assert top.modes.get("spinning (sampled)") == top.sampled_spin_ns
    raw = rec.probe.raw
    sampled = sum(s.count for s in raw.cpu_samples) * raw.sample_period_ns
    ours = sum(lk.sampled_spin_ns for lk in rec.locks) / sampled
    p = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=400", exe, str(prof)], capture_output=True,
                       text=True, env=go_env())
    assert p.returncode == 0, p.stderr
    m = re.search(r"\s([0-9.]+)%\s+runtime\.lock2$", p.stdout, re.M)
    assert m, p.stdout
    theirs = float(m.group(1)) / 100           # lock2's cumulative share of Go's CPU samples
    print(f"spinning in lock2: lockscope {ours:.1%} of CPU samples, Go's CPU profile {theirs:.1%}")
    assert abs(ours - theirs) < 0.07, (ours, theirs)
