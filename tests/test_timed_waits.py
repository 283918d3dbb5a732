"""Kernel lock waits timed at a sample (issue 12, part 3).

At high wait rates the probe reads the clock for a random sample of the spin
and mutex waits only (lockscope-probe --timed-rate, per CPU per second) and a
timed wait's duration stands for the untimed ones: every wait is counted,
the wait time is an estimate. These tests hold one running MWRM (the rename
storm: hundreds of thousands of mutex waits per second) and trace it in
alternate windows with every wait timed and with the default sample, and
check that the estimate is the exact figure, within the windows' noise."""
import os
import statistics
import time

import pytest

from conftest import lockscope
from lockscope.machine import scratch as sc
from lockscope.measure.probe import ProbeSession
from lockscope.errors import LockscopeError
from lockscope.measure.steadyload import SteadyLoad


def window(ops: SteadyLoad, timed_rate: int | None) -> dict:
    with ProbeSession(timed_rate=timed_rate, sample_hz=0) as p:
        for pid in ops.worker_pids:
            p.track(pid)
        t0 = p.start()["t_ns"]
        time.sleep(1.0)
        d = p.stop()
    waits = d["contention"]
    total = sum(e["total_ns"] for e in waits)
    return {"waits": sum(e["count"] for e in waits), "untimed": sum(e.get("untimed", 0) for e in waits),
            "timed": sum(e["count"] - e.get("untimed", 0) for e in waits),
            "wait_per_op": total / max(1, ops.ops_between(t0, d["t_stop_ns"])),
            "window_s": d["window_ns"] / 1e9,
            "max_ns": max((e["max_ns"] for e in waits), default=0)}


def _agree(exact: list[dict], sampled: list[dict]) -> bool:
    """The estimate agrees with the exact figure as exact windows agree with
    each other: the medians of three alternating windows within 0.6x-1.6x,
    or the sampled median inside the exact windows' own range. On this VM
    one MWRM second's wait per rename moves 1.6x between two exact windows
    (eight rounds of six windows: exact 1,117-2,272 ns, sampled 951-2,256 ns,
    the medians of one round up to 1.45x apart). An estimate that left the
    untimed waits out (about a tenth: most waits untimed, each timed one
    standing for about ten) or weighed them twice (2x) is outside both."""
    ex = statistics.median(r["wait_per_op"] for r in exact)
    est = statistics.median(r["wait_per_op"] for r in sampled)
    lo = min(0.6 * ex, min(r["wait_per_op"] for r in exact))
    hi = max(1.6 * ex, max(r["wait_per_op"] for r in exact))
    return lo < est < hi


def test_sampled_wait_time_estimates_the_exact_one(e2e, scratch):
    # a second round of six windows where the first disagrees: a CI run once saw the three sampled
    # windows all below the three exact ones (1,049 against 1,274-1,700 ns per rename), on a VM
    # whose MWRM seconds move 1.6x; an estimate off by design is off in both rounds
    with sc.mounted("tmpfs", scratch) as m, SteadyLoad("MWRM", 2, m.mountpoint, 60, warmup=0.5) as ops:
        for _ in range(2):
            runs = [(rate, window(ops, rate)) for rate in (0, None) * 3]
            exact = [r for rate, r in runs if rate == 0]
            sampled = [r for rate, r in runs if rate is None]
            if _agree(exact, sampled):
                break
    # --timed-rate 0: every wait timed
    assert all(r["untimed"] == 0 and r["waits"] > 0 for r in exact), exact
    rate = min(r["waits"] / r["window_s"] for r in sampled)
    if rate < 60_000:
        pytest.skip(f"MWRM waited only {rate:,.0f} times/s here (a busy machine): "
                    "too few to need a sample of the 10,000 timed waits/s per CPU")
    for r in sampled:
        # every wait counted; beyond 10,000/s per CPU only a sample is timed
        assert r["untimed"] > r["waits"] / 2, r
        # about 10,000 timed per CPU per second; the rate of one 10-ms window sets the next's
        # sample, and waits that sleep are timed too: within 3x of it
        assert 0 < r["timed"] <= 3 * 10_000 * (os.cpu_count() or 1) * r["window_s"], r
        assert r["max_ns"] > 0
    assert _agree(exact, sampled), (exact, sampled)


def test_run_says_the_wait_times_are_estimates(e2e, scratch, tmp_path):
    out = lockscope("run", "MWRM", "--fs", "tmpfs", "--workers", "2", "--duration", "1", "--warmup", "0.5",
                    "--scratch", str(scratch), "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stderr
    note = [ln for ln in out.stdout.splitlines() if "wait times estimated" in ln]
    if not note:
        pytest.skip("MWRM did not wait often enough here for the probe to sample its waits")
    # "(wait times estimated: 52,961 of 1,019,590 kernel lock waits timed, ...)"
    timed, total = (int(x.replace(",", "")) for x in note[0].split(": ")[1].split(" kernel")[0].split(" of "))
    assert 0 < timed < total


def test_a_steady_load_that_cannot_start_says_why(e2e, tmp_path):
    """The helper that holds a workload running for side-by-side measurements
    fails at once, with the driver's exit status, when the driver does."""
    with pytest.raises(LockscopeError, match=r"the workload exited with status 2: .*NOSUCH"):
        with SteadyLoad("NOSUCH", 1, tmp_path, 5):
            pass
