"""USL fit, attribution of lost capacity, what-if, time view and CPI: on
curves with known answers and on recorded real runs (tests/data)."""
import math
import random
import time

import pytest

from conftest import DATA, load
from lockscope.measure import hwcounters
from lockscope.analyzer import attribution, timeview, usl
from lockscope.analyzer.analysis_json import to_json
from lockscope.analyzer.analyze import analyze, load_records

ALL_DATA = ["mwrm_mmap_tmpfs", "shared_tmpfs", "series_mwrm"]


# ---- USL ---------------------------------------------------------------------

def test_usl_fit_recovers_known_alpha_beta_and_peak():
    alpha, beta, lam = 0.05, 0.002, 1000.0
    pts = [(n, usl.usl(n, lam, alpha, beta)) for n in (1, 2, 4, 8, 16, 32)]
    f = usl.fit(pts)
    assert f.alpha == pytest.approx(alpha, rel=1e-4)
    assert f.beta == pytest.approx(beta, rel=1e-4)
    assert f.lam == pytest.approx(lam, rel=1e-4)
    assert f.r2 == pytest.approx(1.0)
    assert f.peak_workers == pytest.approx(math.sqrt((1 - alpha) / beta), rel=1e-4)   # 21.79
    assert f.peak_throughput == pytest.approx(usl.usl(f.peak_workers, lam, alpha, beta), rel=1e-6)
    assert not f.peak_extrapolated                    # 21.8 < 32 measured


def test_usl_peak_beyond_the_measured_points_is_marked_extrapolated():
    pts = [(n, usl.usl(n, 500.0, 0.1, 0.004)) for n in (1, 2, 3, 4, 6)]
    f = usl.fit(pts)
    assert f.peak_workers == pytest.approx(math.sqrt(0.9 / 0.004), rel=1e-3)   # 15 > 6
    assert f.peak_extrapolated is True
    assert all(c.extrapolated == (c.workers > 6) for c in f.curve())
    assert f.curve()[-1].workers > f.peak_workers


def test_usl_fit_with_noise_stays_close():
    rng = random.Random(5)
    pts = [(n, usl.usl(n, 1000.0, 0.03, 0.001) * (1 + rng.uniform(-0.01, 0.01))) for n in range(1, 25)]
    f = usl.fit(pts)
    assert f.alpha == pytest.approx(0.03, abs=0.01)
    assert f.beta == pytest.approx(0.001, abs=0.0003)
    assert 0.98 < f.r2 <= 1.0


def test_usl_is_unavailable_with_the_reason_on_recorded_two_point_curves():
    for e in to_json(analyze(load_records(DATA / "series_mwrm")))["experiments"]:
        assert e["usl"] == {"unavailable": "the USL has 3 parameters and needs at least 3 worker counts "
                                           "(with a CPU each); 2 measured"}


def test_usl_leaves_out_oversubscribed_points():
    # 4 workers on 2 CPUs: the plateau is the CPU limit, not contention
    with pytest.raises(ValueError, match="2 measured"):
        usl.fit_unsaturated([(1, 100, False), (2, 190, False), (4, 190, True)])


# ---- attribution -------------------------------------------------------------

@pytest.mark.parametrize("sweep", ALL_DATA)
def test_attribution_sums_to_the_lost_capacity(sweep):
    for e in to_json(analyze(load_records(DATA / sweep)))["experiments"]:
        for a, p in zip(e["attribution"], e["curve"]):
            assert a["lost_capacity"] == pytest.approx(p["lost_capacity"])
            waited = sum(i["worker_equivalents"] for i in a["items"])
            if a["waits_exceed_loss"]:
                assert a["unexplained"] == 0.0 and waited > a["lost_capacity"]
            else:
                assert waited + a["unexplained"] == pytest.approx(a["lost_capacity"])
            assert a["unexplained"] >= 0


def test_attribution_counts_off_cpu_time_inside_lock_waits_once():
    rec = load("mwrm_mmap_tmpfs/mmap-none-w2")
    in_lock = sum(o.wait_ns for o in rec.offcpu if o.in_lock_wait)
    assert in_lock > 0.02 * 1e9 * rec.probe.window_s        # the record has such time: the test means something
    a = attribution.attribute(rec, 1.5)
    window = rec.probe.window_s * 1e9
    locks = sum(lk.wait_ns for lk in rec.locks) / window
    nonlock = sum(o.wait_ns for o in rec.offcpu if not o.in_lock_wait) / window
    waits = [i.wait for i in a.items]
    assert sum(w.worker_equivalents for w in waits if w.type == attribution.LOCK) == pytest.approx(locks)
    assert sum(w.worker_equivalents for w in waits if w.type == attribution.NONLOCK) == pytest.approx(nonlock)
    assert {w.category for w in waits if not w.is_lock} <= {"preempted", "blocked", "sleep", "exit",
                                                            "other"} | _stack_classes()
    mmap_lock = next(i for i in a.items if i.wait.name.startswith("mm->mmap_lock"))
    assert mmap_lock.wait.category == "rwsem" and mmap_lock.wait.tier == "verified"
    assert mmap_lock.share_of_loss == pytest.approx(mmap_lock.wait.worker_equivalents / 1.5)


def _stack_classes() -> set:
    from lockscope.analyzer.kernel import naming
    return set(getattr(naming, "OFFCPU_CLASSES", ()))


def test_root_cause_growth_and_explained_share_in_the_json():
    e = next(e for e in to_json(analyze(load_records(DATA / "series_mwrm")))["experiments"] if e["fs"] == "ext4")
    two = load("series_mwrm/MWRM-ext4-w2")
    rc = e["root_cause"]
    assert rc["name"] == "sb->s_vfs_rename_mutex of ext4 at <scratch>"
    we2 = two.locks[0].wait_ns / (two.probe.window_s * 1e9)
    assert rc["growth"] == pytest.approx(we2)              # no wait on it at 1 worker
    gained = e["curve"][1]["lost_capacity"] - e["curve"][0]["lost_capacity"]
    assert rc["explained_share"] == pytest.approx(min(1.0, we2 / gained))


def test_whatif_is_the_labelled_upper_bound_computed_by_hand():
    e = next(e for e in to_json(analyze(load_records(DATA / "mwrm_mmap_tmpfs")))["experiments"]
             if e["workload"] == "MWRM")
    one, two = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w1"), load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    we = two.locks[0].wait_ns / (two.probe.window_s * 1e9)
    w = e["whatif"]
    assert w["label"] == "upper bound: sb->s_vfs_rename_mutex of tmpfs at <scratch> removed"
    by = {c["workers"]: c["ops_per_sec"] for c in w["curve"]}
    expected = min(two.ops_per_sec * 2 / (2 - we), 2 * one.ops_per_sec)
    assert by[2] == pytest.approx(expected)
    assert by[1] == pytest.approx(one.ops_per_sec)          # the lock is not waited on at 1 worker


def test_whatif_is_unavailable_without_a_root_cause():
    for e in to_json(analyze(load_records(DATA / "shared_tmpfs")))["experiments"]:
        assert "no collapse" in e["whatif"]["unavailable"]


# ---- time view ---------------------------------------------------------------

def test_time_view_intervals_add_up_to_the_locks_total_wait():
    rec = load("series_mwrm/MWRM-ext4-w2")
    tv = timeview.timeview(rec)
    assert tv.workers == 2 and tv.interval_s == 0.25
    assert tv.t_s[-1] == pytest.approx(rec.probe.window_s)
    assert len(tv.t_s) >= 6                             # 2 s at 0.25 s
    mutex = next(s for s in tv.series if s.name == "sb->s_vfs_rename_mutex of ext4 at <scratch>")
    starts = [0.0] + tv.t_s[:-1]
    total_ns = sum(sh * 2 * (t1 - t0) * 1e9 for sh, t0, t1 in zip(mutex.wait_share, starts, tv.t_s))
    addrs = {int(a, 16) for a in rec.locks[0].addresses}
    traced = sum(e.total_ns for e in rec.probe.raw.contention if e.lock in addrs)
    assert total_ns == pytest.approx(traced, rel=1e-6)
    assert all(0.2 < s < 0.6 for s in mutex.wait_share)   # steady ~38%, interval by interval
    assert any(s.name.startswith("off-CPU: preempted") and s.type == "nonlock" for s in tv.series)


def test_time_view_moves_a_waits_excess_back_to_the_intervals_it_covered():
    """A wait is counted when it ends: 2 workers, 0.25 s intervals, a 0.6 s
    wait of each ending in the third interval is 1.2 s there, more than its
    0.5 s of worker time; the excess belongs to the intervals before."""
    times = [0.25e9, 0.5e9, 0.75e9]
    shares = timeview._shares([0.0, 0.0, 1.2e9], times, 2)
    assert shares == pytest.approx([0.4, 1.0, 1.0])
    assert all(s <= 1.0 for s in timeview._shares([0.0, 0.0, 9e9], times, 2))     # never above 100%
    assert timeview._shares([0.1e9, 0.2e9, 0.3e9], times, 2) == pytest.approx([0.2, 0.2, 0.2])   # as before


def test_time_view_is_unavailable_for_records_without_intervals():
    tv = timeview.timeview(load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2"))
    assert "no per-interval data" in tv.reason


def test_analysis_json_time_view_is_of_the_collapse_point():
    for e in to_json(analyze(load_records(DATA / "series_mwrm")))["experiments"]:
        assert e["timeview"]["workers"] == e["collapse"]["workers"] == 2


# ---- CPI ---------------------------------------------------------------------

def test_cpi_from_counts_sums_cpus_and_scales_multiplexed_counters():
    C = hwcounters.Count
    got = hwcounters.cpi_from_counts({
        0: (C(1000, 2, 1), C(500, 2, 2)),       # cycles ran half the time: 2000 scaled
        1: (C(3000, 5, 5), C(1500, 5, 5)),
    })
    assert got["available"] and got["multiplexed"]
    assert got["cycles"] == 5000 and got["instructions"] == 2000
    assert got["value"] == pytest.approx(2.5)
    assert [r["cpi"] for r in got["per_cpu"]] == pytest.approx([4.0, 2.0])
    never = hwcounters.cpi_from_counts({3: (C(0, 10, 0), C(0, 10, 0))})
    assert not never["available"] and "CPU 3 never ran" in never["reason"]


def test_cpi_counters_report_this_machines_hardware_counters_or_why_not():
    ok, why = hwcounters.availability()
    with hwcounters.CpiCounters([0]) as c:
        c.start()
        sum(range(100000))
        c.stop()
    res = c.result()
    assert res["available"] == ok
    if not ok:
        assert res["reason"] == why and "perf_event_open(cycles) failed" in why
    else:
        assert res["value"] > 0 and res["cpus"] == [0]


def test_cpi_counter_path_reads_real_counters_with_software_events():
    """The same open/enable/disable/read path as cycles and instructions,
    with two software clocks the kernel always has: both count the window's
    CPU time, and as one perf group they start and stop at the same instants,
    so their ratio is 1 within 0.5% (a CI run of the counters enabled one
    ioctl after the other got 0.957)."""
    import os

    class Clocks(hwcounters.CpiCounters):
        EVENTS = ((1, 0, "cpu-clock"), (1, 1, "task-clock"))    # PERF_TYPE_SOFTWARE

    if os.geteuid() != 0:
        pytest.skip("system-wide perf counters need root")
    with Clocks(sorted(os.sched_getaffinity(0))) as c:
        c.start()
        time.sleep(0.1)
        c.stop()
    res = c.result()
    assert res["available"], res
    assert res["value"] == pytest.approx(1.0, abs=0.005)
    for row in res["per_cpu"]:
        assert 0.05e9 < row["cycles"] < 0.5e9            # ~0.1 s of clock per CPU


def test_cpi_per_point_in_the_analysis_says_unavailable_with_the_reason():
    for e in to_json(analyze(load_records(DATA / "mwrm_mmap_tmpfs")))["experiments"]:
        for c, r in zip(e["cpi"], e["points"]):
            assert c["workers"] == r["workers"]
            assert "perf_event_open(cycles) failed: No such file or directory" in c["unavailable"]


# ---- end to end: a real run keeps the intervals and the CPI status ----------

@pytest.mark.e2e
def test_a_real_run_records_the_time_view_and_cpi(tmp_path, e2e, scratch):
    from conftest import lockscope
    from lockscope.model import record

    r = lockscope("run", "MWRM", "--fs", "tmpfs", "--workers", "2", "--duration", "1.5", "--warmup", "0.3",
                  "--out", str(tmp_path / "out"), "--scratch", str(scratch))
    assert r.returncode == 0, r.stderr
    rec = record.load(tmp_path / "out" / "runs" / "MWRM-tmpfs-w2.json")
    snaps = rec.probe.raw.series.snapshots
    assert len(snaps) >= 4                                  # 1.5 s at 250 ms
    assert all(a.t_ns < b.t_ns for a, b in zip(snaps, snaps[1:]))
    tv = timeview.timeview(rec)
    mutex = next(s for s in tv.series if s.name == "sb->s_vfs_rename_mutex of tmpfs at <scratch>")
    assert len(mutex.wait_share) == len(tv.t_s) >= 5
    # contended interval after interval (under other load a worker may lose its CPU for a while)
    assert sum(s > 0.02 for s in mutex.wait_share) >= len(mutex.wait_share) / 2, mutex
    ok, why = hwcounters.availability()
    assert rec.cpi.available == ok
    if not ok:
        assert rec.cpi.reason == why
    else:
        assert rec.cpi.value > 0 and rec.cpi.cpus == sorted(w.cpu for w in rec.per_worker)
