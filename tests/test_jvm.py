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
