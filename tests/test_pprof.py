"""`lockscope export` writes pprof profiles that `go tool pprof` reads: on
recorded real runs (a pthread mutex in user space with kernel spinlocks
beside it; an mmap_lock that is mostly rwsem optimistic spinning), the top
entry of each point's mutex profile is the record's top lock with its
exact delay and contentions, the totals are the lock table's, and the
off-CPU and CPU profiles carry the record's off-CPU time and CPU samples."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, load, lockscope
from lockscope.reports.pprof import apportion


def _go() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    return "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None


GO = _go()
needs_go = pytest.mark.skipif(GO is None, reason="go not found (on PATH or /usr/local/go/bin/go): "
                                                 "`go tool pprof` reads the profiles")


def pprof(*args: str) -> str:
    p = subprocess.run([GO, "tool", "pprof", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def top(path: Path, index: str) -> tuple[list[tuple[int, str]], int]:
    """(flat value, name) of the top entries in nanoseconds or counts, and the total."""
    out = pprof("-top", "-unit=ns", f"-sample_index={index}", "-nodecount=5", str(path))
    total = int(re.search(r"Total samples = (\d+)", out).group(1))
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)(?:ns)?\s+\S+%\s+\S+%\s+\S+\s+\S+%\s+(.*)$", line)
        if m:
            rows.append((int(m.group(1)), m.group(2)))
    return rows, total


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    for name in ("pmutex", "mwrm_mmap_tmpfs"):
        r = lockscope("export", str(DATA / name), "--out", str(out / name))
        assert r.returncode == 0, r.stderr
        for run in (DATA / name / "runs").glob("*.json"):
            for suffix in ("", "-offcpu", "-cpu"):
                assert f"pprof/{run.stem}{suffix}.pb.gz" in r.stdout      # the summary lists them
    return out


POINTS = [("pmutex", "PMUTEX-none-w2"), ("mwrm_mmap_tmpfs", "MWRM-tmpfs-w2"),
          ("mwrm_mmap_tmpfs", "MWRM-tmpfs-w1"), ("mwrm_mmap_tmpfs", "mmap-none-w2")]


@needs_go
@pytest.mark.parametrize("data,point", POINTS)
def test_mutex_profile_top_is_the_records_top_lock(exported, data, point):
    rec = load(f"{data}/{point}")
    path = exported / data / "pprof" / f"{point}.pb.gz"
    lk = rec.locks[0]
    rows, total = top(path, "delay")
    assert rows[0] == (lk.wait_ns, lk.name)
    assert total == sum(x.wait_ns for x in rec.locks)
    rows, total = top(path, "contentions")
    assert rows[0] == (lk.count, lk.name)
    assert total == sum(x.count for x in rec.locks)
    # the lock's name is the leaf, above its wait stack
    traces = pprof("-traces", str(path))
    assert f"{lk.name}\n" in traces and f"kind:  {lk.kind}" in traces


@needs_go
def test_a_point_without_lock_waits_has_an_empty_mutex_profile(exported):
    assert not load("pmutex/PMUTEX-none-w1").locks         # one thread: the mutex is never contended
    rows, total = top(exported / "pmutex" / "pprof" / "PMUTEX-none-w1.pb.gz", "delay")
    assert rows == [] and total == 0


@needs_go
def test_user_and_kernel_frames(exported):
    raw = pprof("-traces", str(exported / "pmutex" / "pprof" / "PMUTEX-none-w2.pb.gz"))
    block = raw.split("pthread_mutex pmutex_global_lock in lockscope-workload\n", 1)[1].split("-----", 1)[0]
    assert block.split() == ["__lll_lock_wait", "lock_loop", "thread_main", "start_thread"]
    assert re.search(r"futex hash bucket lock\n\s+__pv_queued_spin_lock_slowpath\n\s+_raw_spin_lock\n"
                     r"\s+futex_wake\n", raw)


@needs_go
def test_spinning_is_under_the_rwsem(exported):
    rec = load("mwrm_mmap_tmpfs/mmap-none-w2")
    lk = rec.locks[0]
    assert lk.sampled_spin_ns > 0
    out = pprof("-top", "-unit=ns", "-sample_index=delay", "-focus=optimistic spinning",
                str(exported / "mwrm_mmap_tmpfs" / "pprof" / "mmap-none-w2.pb.gz"))
    assert re.search(rf"^\s*{lk.sampled_spin_ns}ns .*{re.escape(lk.name)}$", out, re.M)


@needs_go
@pytest.mark.parametrize("data,point", POINTS + [("pmutex", "PMUTEX-none-w1")])
def test_offcpu_and_cpu_profiles_read(exported, data, point):
    rec = load(f"{data}/{point}")
    raw = rec.probe.raw
    d = exported / data / "pprof"
    _, total = top(d / f"{point}-offcpu.pb.gz", "offcpu")
    assert total == sum(e.total_ns for e in raw.offcpu)
    _, waits = top(d / f"{point}-offcpu.pb.gz", "waits")
    assert waits == sum(e.count for e in raw.offcpu)
    heaviest = max(rec.offcpu, key=lambda o: o.wait_ns).wait_class
    tags = pprof("-tags", str(d / f"{point}-offcpu.pb.gz"))
    assert re.search(rf"\): {re.escape(heaviest)}\n", tags.split("sleep kind:")[0])
    samples = sum(e.count for e in raw.cpu_samples)
    _, total = top(d / f"{point}-cpu.pb.gz", "samples")
    assert total == samples
    _, total = top(d / f"{point}-cpu.pb.gz", "cpu")
    assert total == samples * raw.sample_period_ns
    head = pprof("-raw", str(d / f"{point}-cpu.pb.gz"))
    assert f"PeriodType: cpu nanoseconds\nPeriod: {raw.sample_period_ns}\n" in head
    assert f"Comment: lockscope CPU profile (on-CPU samples): {rec.workload}-{rec.fs}, {rec.workers} worker" in head


def test_apportion_adds_up_exactly():
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert sum(apportion(1658909158, [3, 7, 11, 0.5])) == 1658909158
    assert apportion(5, [0, 0]) == [3, 2]
    assert apportion(0, [2, 1]) == [0, 0]


@needs_go
def test_holders_profile_charges_the_release_site(tmp_path):
    """Go's convention beside the waiters' profile: the delay on the holder's stack."""
    r = lockscope("export", str(DATA / "holders_sync"), "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rec = load("holders_sync/holders-ext4-w2")
    path = tmp_path / "pprof" / "holders-ext4-w2-holders.pb.gz"
    _, total = top(path, "delay")
    assert total == sum(h.hold_ns for lk in rec.locks for h in lk.holders)
    traces = pprof("-traces", str(path))
    block = traces.split("pthread_mutex ledger_lock in holders\n", 1)[1].split("-----", 1)[0]
    assert block.split()[0] == "flush_journal", block
