"""Scaling curve, collapse point, attribution and root cause, on recorded
real runs and on curves with known answers."""
import json

import pytest

from conftest import DATA, load
from lockscope.analyzer import attribution, scaling
from lockscope.analyzer.analysis_json import to_json
from lockscope.analyzer.analyze import analyze, load_records
from lockscope.errors import UsageError


def test_curve_speedup_efficiency_and_lost_capacity_from_records():
    one, two = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w1"), load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    pts = scaling.curve([(1, one.ops_per_sec, 2), (2, two.ops_per_sec, 2)])
    s = two.ops_per_sec / one.ops_per_sec
    assert pts[1].speedup == pytest.approx(s)
    assert pts[1].efficiency == pytest.approx(s / 2)
    assert pts[1].lost_capacity == pytest.approx(2 - s)
    assert pts[0].speedup == 1.0 and pts[0].lost_capacity == 0.0


def test_oversubscribed_points_have_ideal_capped_at_the_cpus():
    pts = scaling.curve([(1, 100.0, 2), (2, 200.0, 2), (4, 200.0, 2)])
    assert [p.ideal for p in pts] == [1, 2, 2]
    assert pts[2].efficiency == pytest.approx(1.0)
    assert scaling.find_collapse(pts) is None


@pytest.mark.parametrize("tputs,collapse_at", [
    ([100, 190, 280], None),          # 95%, 93%: scales
    ([100, 190, 280, 300], None),     # exactly 75% at 4 is not below 75%
    ([100, 140, 150], 2),             # 70% at 2
    ([100, 180, 250, 240], 4),        # 60% at 4 (and a drop): efficiency is checked first
])
def test_collapse_rule_efficiency(tputs, collapse_at):
    pts = scaling.curve([(i + 1, t, 64) for i, t in enumerate(tputs)])
    c = scaling.find_collapse(pts)
    if collapse_at is None:
        assert c is None
    else:
        assert (c.workers, c.reason) == (collapse_at, "below 75%")
        assert c.efficiency == pytest.approx(tputs[collapse_at - 1] / tputs[0] / collapse_at)


def test_throughput_drop_alone_is_a_collapse():
    # oversubscribed: efficiency stays high against the capped ideal, but throughput falls 10%
    pts = scaling.curve([(1, 100.0, 2), (2, 198.0, 2), (4, 178.0, 2)])
    c = scaling.find_collapse(pts)
    assert c.workers == 4 and c.reason == "throughput 10% below 2 workers"


def test_root_cause_of_mwrm_is_the_rename_mutex_and_explains_its_share():
    one, two = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w1"), load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    pts = scaling.curve([(1, one.ops_per_sec, 2), (2, two.ops_per_sec, 2)])
    rc = attribution.root_cause(one, two, pts[0].lost_capacity, pts[1].lost_capacity)
    assert rc.wait.name == "sb->s_vfs_rename_mutex of tmpfs at <scratch>" and rc.wait.type == attribution.LOCK
    waits = attribution.waits(two)
    we = waits[rc.wait.name].worker_equivalents
    assert we == pytest.approx(two.locks[0].wait_ns / (two.probe.window_s * 1e9))
    before = attribution.waits(one).get(rc.wait.name)
    assert rc.growth == pytest.approx(we - (before.worker_equivalents if before else 0))
    gained = pts[1].lost_capacity - pts[0].lost_capacity
    assert rc.explained_share_raw == pytest.approx(rc.growth / gained)
    assert rc.explained_share == pytest.approx(min(1.0, rc.growth / gained))
    assert 0.2 < rc.explained_share <= 1.0


def test_waits_exclude_off_cpu_time_inside_lock_waits():
    rec = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    waits = attribution.waits(rec)
    non_lock = sum(w.wait_ns for w in waits.values() if w.type == attribution.NONLOCK)
    expected = sum(o.wait_ns for o in rec.offcpu if o.wait_class != "lock")
    assert non_lock == expected


def test_analyze_directory_json_has_curve_collapse_and_root_cause():
    exps = analyze(load_records(DATA / "mwrm_mmap_tmpfs"))
    doc = to_json(exps)
    json.dumps(doc)                                        # serializable
    by = {(e["workload"], e["fs"]): e for e in doc["experiments"]}
    mwrm, mmap = by[("MWRM", "tmpfs")], by[("mmap", "none")]
    assert [p["workers"] for p in mwrm["curve"]] == [1, 2]
    assert mwrm["collapse"]["workers"] == 2
    assert mwrm["root_cause"]["name"] == "sb->s_vfs_rename_mutex of tmpfs at <scratch>"
    assert 0 < mwrm["root_cause"]["explained_share"] <= 1
    assert mmap["root_cause"]["name"].startswith("mm->mmap_lock of ")
    d = mwrm["diagnosis"]
    assert d.startswith("MWRM on tmpfs stops scaling at 2 workers")
    assert f"{mwrm['root_cause']['wait_share']:.0%} of worker time waits on sb->s_vfs_rename_mutex" in d
    assert "of the lost capacity" in d


def test_single_point_experiments_say_there_is_no_curve():
    exps = analyze(load_records(DATA / "shared_tmpfs"))
    for e in exps:
        assert e.collapse is None and e.root_cause is None
        assert "only, so there is no scaling curve" in e.diagnosis
        assert e.records[0].locks[0].name in e.diagnosis


def test_load_records_errors_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_records(tmp_path / "nope")
    with pytest.raises(UsageError, match="no run records"):
        load_records(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x.json").write_text('{"schema": "something/1"}')
    with pytest.raises(UsageError, match="not a lockscope run record"):
        load_records(tmp_path)
