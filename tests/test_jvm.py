"""A Java monitor (`synchronized`) named by the class of the locked object,
from HotSpot's monitor__contended__enter/entered probes (analyzer/user/
usdt.toml: probes in libjvm.so, a library the java launcher maps; the class
name a counted string). Checked against the program's own clock
(tests/programs/Monitor.java: System.nanoTime before `synchronized` and
first thing inside). Without -XX:+DTraceMonitorProbes the JVM fires no
probe, and lockscope says what it needs."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO, lockscope
from lockscope import record

LOCK = "Java monitor of Monitor$Counter"


@pytest.fixture
def monitor(tmp_path):
    if not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("javac/java not found: tests/programs/Monitor.java needs a JDK (apt-get install "
                    "default-jdk-headless)")
    subprocess.run(["javac", "-d", str(tmp_path), str(REPO / "tests" / "programs" / "Monitor.java")], check=True,
                   capture_output=True)
    return tmp_path


def _run(tmp_path, classes, *jvm_flags: str) -> tuple[record.RunRecord, float]:
    clock = tmp_path / "clock.txt"
    out = tmp_path / "out"
    r = lockscope("run", "--workers", "2", "--duration", "4", "--out", str(out), "--name", "jv", "--force",
                  "--throughput-regex", r"ops/s: ([0-9.]+)", "--", "java", *jvm_flags, "-cp", str(classes),
                  "Monitor", "{n}", "100", "20", "8", str(clock), timeout=240)
    assert r.returncode == 0, r.stderr
    [path] = (out / "runs").glob("*.json")
    return record.load(path), float(clock.read_text())


def test_java_monitor_named_by_class_and_sized_as_the_programs_own_clock(e2e, tmp_path, monitor):
    rec, own = _run(tmp_path, monitor, "-XX:+DTraceMonitorProbes")
    print({"program's clock": own, "lockscope": [(lk.name, round(lk.wait_share, 3)) for lk in rec.locks[:4]]})
    top = rec.locks[0]
    assert (top.name, top.kind, top.component, top.tier) == (LOCK, "Java monitor", "Java", "verified")
    assert own > 0.3, own
    assert abs(top.wait_share - own) <= 0.10, (top.wait_share, own)
    # the waiters' PlatformEvent::park sleeps inside the monitor wait are that wait, not a lock as well
    park = sum(lk.wait_share for lk in rec.locks if "PlatformEvent::park" in lk.name)
    assert park < 0.05, [(lk.name, lk.wait_share) for lk in rec.locks[:5]]


def test_without_the_monitor_probes_flag_lockscope_says_what_it_needs(e2e, tmp_path, monitor):
    rec, _ = _run(tmp_path, monitor)
    assert not [lk for lk in rec.locks if lk.kind == "Java monitor"]
    assert any("HotSpot JVM" in w and "-XX:+DTraceMonitorProbes" in w for w in rec.warnings), rec.warnings


def test_a_juc_lock_parks_and_is_a_lock_while_an_idle_pool_parked_the_same_way_is_idle(e2e, tmp_path):
    """java.util.concurrent: a ReentrantLock's waiters park (LockSupport.park,
    the JVM's Parker on a pthread condition variable), and so do a pool's
    threads waiting for work in LinkedBlockingQueue.take(). Who woke each
    park decides (roles.py): the workers' parks, woken by the worker that
    unlocked, are the lock's wait, sized as the program's own clock
    (tests/programs/Parking.java: System.nanoTime around lock()); the
    pool's, woken by nobody, are idle."""
    if not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("javac/java not found: tests/programs/Parking.java needs a JDK (apt-get install "
                    "default-jdk-headless)")
    subprocess.run(["javac", "-d", str(tmp_path), str(REPO / "tests" / "programs" / "Parking.java")], check=True,
                   capture_output=True)
    clock, out = tmp_path / "clock.txt", tmp_path / "out"
    r = lockscope("run", "--workers", "2", "--duration", "4", "--out", str(out), "--name", "pk",
                  "--throughput-regex", r"ops/s: ([0-9.]+)", "--", "java", "-cp", str(tmp_path), "Parking",
                  "{n}", "100", "20", "6", str(clock), timeout=240)
    assert r.returncode == 0, r.stderr
    [path] = (out / "runs").glob("*.json")
    rec = record.load(path)
    own = float(clock.read_text())
    top = rec.locks[0]
    print({"program's clock": own, "lockscope": [(lk.name, round(lk.wait_share, 3)) for lk in rec.locks[:3]]})
    assert top.name.startswith("pthread_cond @ Parker::park(") and own > 0.3, [lk.name for lk in rec.locks[:3]]
    assert abs(top.wait_share - own) <= 0.10, (top.wait_share, own)
    pool = next(ro for ro in rec.roles if ro.name == "pool-#-thread-#")
    assert not pool.worker and pool.lock_ns < 0.01 * pool.idle_ns, pool
