"""Issue 29: a fork/exit storm measured right. tests/programs/forkstorm.c's
workers vfork() a child that exits at once, thousands a second: every child
is a new task and a new wake-up edge. The window ends on time whether the
program stops itself or not, no wake-up is lost (the loader drains the
wake-up map while the window runs: probes/tasks.c), and no share of worker
time is above 100%."""
from __future__ import annotations

import pytest

from conftest import REPO, build_c, e2e_missing, lockscope
from lockscope.model import record
from lockscope.analyzer import attribution, timeview
from lockscope.analyzer.results import TimeView


@pytest.fixture(scope="module")
def storm(tmp_path_factory):
    why = e2e_missing()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("forkstorm")
    return build_c(REPO / "tests" / "programs" / "forkstorm.c", tmp / "forkstorm", ("-O2",))


def _run(storm, tmp_path, seconds: str, *extra: str) -> record.RunRecord:
    out = tmp_path / "out"
    p = lockscope("run", "--workers", "4", "--duration", "3", "--out", str(out), *extra, "--", str(storm), "{n}",
                  seconds)
    assert p.returncode == 0, p.stderr
    [f] = (out / "runs").glob("*.json")
    return record.load(f)


@pytest.mark.e2e
def test_a_fork_storm_loses_no_wakeup_and_no_share_exceeds_100_percent(storm, tmp_path):
    rec = _run(storm, tmp_path, "3", "--throughput-regex", r"ops/s: ([0-9.]+)")
    c = rec.probe.counters
    assert c.get("lost_wakeups_map_full", 0) == 0, c
    # more wake-ups than the map holds (16,384 edges), all counted
    assert c["task_wakeups"] > rec.probe.maps["wakeups"].max_entries, c
    assert not [w for w in rec.warnings if "events lost (wakeups" in w], rec.warnings
    waits = attribution.waits(rec).values()
    assert all(0 <= w.wait_share <= 1.0 for w in waits), [(w.name, w.wait_share) for w in waits]
    tv = timeview.timeview(rec)
    assert isinstance(tv, TimeView), tv
    assert all(0 <= x <= 1.0 + 1e-9 for s in tv.series for x in s.wait_share), [(s.name, max(s.wait_share))
                                                                              for s in tv.series]


@pytest.mark.e2e
def test_the_window_ends_on_time_when_the_storm_does_not_stop_itself(storm, tmp_path):
    rec = _run(storm, tmp_path, "1000")
    # within 5% of the asked 3 s: the deadline counts from the window's start
    assert abs(rec.probe.window_s - 3) <= 0.15 and abs(rec.duration_s - 3) <= 0.15, \
        (rec.probe.window_s, rec.duration_s)
    assert any("stopped at the end of --duration" in w for w in rec.warnings), rec.warnings
