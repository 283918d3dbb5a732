"""A Java monitor (`synchronized`) named by the class of the locked object
(analyzer/user/usdt.toml): with -XX:+DTraceMonitorProbes from HotSpot's
monitor__contended__enter/entered probes (in libjvm.so, a library the java
launcher maps; the class name a counted string); without, at
ObjectMonitor::EnterI's entry and return, the class read through the
monitor with the JVM's own gHotSpotVMStructs offsets (probes/jvmmon.c).
Checked against the program's own clock (tests/programs/Monitor.java:
System.nanoTime before `synchronized` and first thing inside)."""
from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
from collections import Counter
from typing import NamedTuple

import pytest

from conftest import REPO, lockscope
from lockscope.model import record
from lockscope.analyzer.user import jvmframes

LOCK = "Java monitor of Monitor$Counter"
# JDK 25 (enter_internal, its own VMStructs names) where a Temurin 25 is installed beside Debian's 17
JDK25 = sorted(glob.glob("/usr/lib/jvm/temurin-25*/bin/java")) or sorted(glob.glob("/usr/lib/jvm/*-25*/bin/java"))


@pytest.fixture(scope="module")
def monitor(tmp_path_factory):
    if not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("javac/java not found: tests/programs/Monitor.java needs a JDK (apt-get install "
                    "default-jdk-headless)")
    classes = tmp_path_factory.mktemp("monitor")
    subprocess.run(["javac", "-d", str(classes), str(REPO / "tests" / "programs" / "Monitor.java")], check=True,
                   capture_output=True)
    return classes


def _run(tmp_path, classes, *jvm_flags: str, java: str = "java") -> tuple[record.RunRecord, float]:
    clock = tmp_path / "clock.txt"
    out = tmp_path / "out"
    r = lockscope("run", "--workers", "2", "--duration", "4", "--out", str(out), "--name", "jv", "--force",
                  "--throughput-regex", r"ops/s: ([0-9.]+)", "--", java, *jvm_flags, "-cp", str(classes),
                  "Monitor", "{n}", "100", "20", "8", str(clock), timeout=240)
    assert r.returncode == 0, r.stderr
    [path] = (out / "runs").glob("*.json")
    return record.load(path), Clock(*map(float, clock.read_text().split()))


# the program's own share of its threads' time waiting, at least: the lock is contended, so agreeing
# with its clock says something. How contended 2 threads of 100 us inside and 20 us outside get
# depends on the CPUs the machine gives them: 0.47 on a quiet machine, 0.20 in a CI run with 10-40%
# of the CPUs stolen by the hypervisor (the seconds agreed there too)
CONTENDED = 0.1


class Clock(NamedTuple):
    """The program's own clock of its waits: their share of its threads'
    time since they started, and the seconds they waited. The JVM starts
    inside lockscope's window and the program is stopped at its end, within
    0.1 s of its clock's last write: the seconds compare with lockscope's
    (the shares differ by the JVM's start-up, a second of a 4-s window)."""
    share: float
    seconds: float

    def agrees(self, rec: record.RunRecord, lock) -> bool:
        """lockscope's wait on `lock` within 10 points of the workers' time
        in the window of the program's seconds waited."""
        return abs(lock.wait_ns / 1e9 - self.seconds) <= 0.10 * rec.workers * rec.probe.window_s


def _check_named(rec: record.RunRecord, own: Clock, probe: str) -> None:
    print({"program's clock": own, "lockscope": [(lk.name, round(lk.wait_share, 3)) for lk in rec.locks[:4]]})
    top = rec.locks[0]
    assert (top.name, top.kind, top.component, top.tier) == (LOCK, "Java monitor", "Java", "verified")
    # one way named them: the probes, or EnterI, never both (each enter counted once)
    assert {w.probe for w in rec.probe.raw.usdt if w.kind == "Java monitor"} == {probe}
    assert own.share > CONTENDED, own
    assert own.agrees(rec, top), (top.wait_ns, own)
    # the waiters' PlatformEvent::park sleeps inside the monitor wait are that wait, not a lock as well
    park = sum(lk.wait_share for lk in rec.locks if "PlatformEvent::park" in lk.name)
    assert park < 0.05, [(lk.name, lk.wait_share) for lk in rec.locks[:5]]
    assert not [w for w in rec.warnings if "DTraceMonitorProbes" in w or "Java monitors" in w], rec.warnings


def test_java_monitor_named_by_class_and_sized_as_the_programs_own_clock(e2e, tmp_path, monitor):
    rec, own = _run(tmp_path, monitor, "-XX:+DTraceMonitorProbes")
    _check_named(rec, own, "hotspot:monitor__contended__enter")
    [jvm] = rec.probe.raw.usdt_probe.jvms
    assert jvm.by_probes and not jvm.named, jvm


@pytest.mark.parametrize("jdk", ["17", "25"])
def test_without_the_monitor_probes_flag_enteri_names_the_class(e2e, tmp_path, monitor, jdk, request):
    """No flag: EnterI (JDK 17) or enter_internal (JDK 25) times the wait,
    and the class comes through the monitor, as large as the program's
    clock says. (JDK 17's run is the one JFR records too, below: the
    flight recorder is no monitor probe.)"""
    if jdk == "17":
        rec, own, _ = request.getfixturevalue("monitor_jfr")
    else:
        if not JDK25:
            pytest.skip("no JDK 25 under /usr/lib/jvm (Temurin 25: its enter_internal and VMStructs names)")
        rec, own = _run(tmp_path, monitor, java=JDK25[0])        # the classes JDK 17's javac made
    _check_named(rec, own, "ObjectMonitor::EnterI()")
    [jvm] = rec.probe.raw.usdt_probe.jvms
    assert jvm.named and not jvm.by_probes, jvm
    assert jvm.frames == "java", jvm      # its code heaps read: compiled frames walked too
    # where: the interpreted method holding the synchronized block (no flag needed), then its callers
    stack = rec.locks[0].stacks[0]
    assert stack.site == "Monitor.lambda$main$0" and stack.frames[0] == stack.site, stack
    [w] = [w for w in rec.probe.raw.usdt if w.lock == LOCK]      # its waits, without the spin before them
    assert "java.lang.Thread.run" in stack.frames and stack.wait_ns > 0.5 * w.total_ns, stack


JFC = """<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0">
  <event name="jdk.JavaMonitorEnter"><setting name="enabled">true</setting>
    <setting name="stackTrace">true</setting><setting name="threshold">0 ms</setting></event>
</configuration>
"""


def _jfr_frames(event: dict) -> list[str]:
    """The Java methods of a JFR event's stack trace, innermost first."""
    return [f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
            for f in (event.get("stackTrace") or {}).get("frames") or []]


def _jfr_seconds(text: str) -> float:
    """A JFR duration as `jfr print --json` writes it (PT0.001234S, PT1M2.5S)."""
    m = re.fullmatch(r"PT(?:(\d+)M)?([\d.]+)S", text)
    assert m, text
    return int(m.group(1) or 0) * 60 + float(m.group(2))


@pytest.fixture(scope="module")
def monitor_jfr(monitor, tmp_path_factory):
    """One JDK 17 run of Monitor without the monitor probes flag, with the
    JVM's flight recorder on: (record, the program's clock, the recording)."""
    where = tmp_path_factory.mktemp("monitor-jfr")
    return _jfr_run(where, JFC, lambda *flags: _run(where, monitor, *flags))


def _jfr_run(where, settings: str, run) -> tuple:
    """run(*jvm_flags) with the flight recorder recording `settings` into
    where/run.jfr: (record, the program's clock, the recording), or the
    recording None where the JDK has no `jfr` tool to read it."""
    if not shutil.which("jfr"):
        return *run(), None
    jfc, jfr = where / "events.jfc", where / "run.jfr"
    jfc.write_text(settings)
    return *run(f"-XX:StartFlightRecording=filename={jfr},settings={jfc}"), jfr


def needs_jfr(jfr) -> None:
    if jfr is None:
        pytest.skip("jfr not found: the JDK's flight recorder tool (default-jdk-headless has it)")


def test_enteri_waits_agree_with_jfr_in_the_same_run(e2e, monitor_jfr):
    """The JVM's own flight recorder, in the same run: jdk.JavaMonitorEnter
    (threshold 0) times each contended enter of Monitor$Counter as EnterI's
    entry to return does. Its recording starts later than lockscope's window
    and ends at exit, so their counts differ by that; the mean wait of an
    enter is the same."""
    rec, _, jfr = monitor_jfr
    needs_jfr(jfr)
    [w] = [w for w in rec.probe.raw.usdt if w.lock == LOCK]
    assert w.probe == "ObjectMonitor::EnterI()"
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "64", "--events", "jdk.JavaMonitorEnter",
                          str(jfr)],
                         capture_output=True, text=True, check=True).stdout
    events = [e["values"] for e in json.loads(out)["recording"]["events"]]
    mine = [e for e in events if e["monitorClass"]["name"] == "Monitor$Counter"]
    waits = [_jfr_seconds(e["duration"]) for e in mine]
    jfr_mean, ours = sum(waits) / len(waits), w.total_ns / w.count / 1e9
    print({"jfr": (len(waits), round(sum(waits), 3), jfr_mean), "lockscope": (w.count, w.total_ns / 1e9, ours)})
    assert len(waits) > 500 and w.count > 500
    assert abs(ours - jfr_mean) <= 0.10 * jfr_mean, (ours, jfr_mean)
    # the method that entered: JFR's top frame, and lockscope's site
    [(jfr_top, _)] = Counter(_jfr_frames(e)[0] for e in mine).most_common(1)
    site = next(lk for lk in rec.locks if lk.name == LOCK).stacks[0].site
    assert site == jfr_top == "Monitor.lambda$main$0", (site, jfr_top)


def test_a_jvm_whose_layout_is_not_read_says_why(e2e, tmp_path, monitor):
    """JDK 25's compact object headers keep the class in the mark word,
    which is not read: the record says so, and its monitors stay unnamed."""
    if not JDK25:
        pytest.skip("no JDK 25 under /usr/lib/jvm (-XX:+UseCompactObjectHeaders needs JDK 24 or later)")
    rec, _ = _run(tmp_path, monitor, "-XX:+UseCompactObjectHeaders", java=JDK25[0])
    assert not [lk for lk in rec.locks if lk.kind == "Java monitor"]
    assert any(w.startswith("Java monitors of process ") and "UseCompactObjectHeaders" in w
               for w in rec.warnings), rec.warnings


PARK_JFC = JFC.replace("jdk.JavaMonitorEnter", "jdk.ThreadPark")


@pytest.fixture(scope="module")
def parking(tmp_path_factory):
    """One run of Parking (tests/programs/Parking.java) with the JVM's flight
    recorder timing its parks: (record, the program's clock, the recording)."""
    if not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("javac/java not found: tests/programs/Parking.java needs a JDK (apt-get install "
                    "default-jdk-headless)")
    classes = tmp_path_factory.mktemp("parking")
    subprocess.run(["javac", "-d", str(classes), str(REPO / "tests" / "programs" / "Parking.java")], check=True,
                   capture_output=True)
    return _jfr_run(classes, PARK_JFC, lambda *flags: _run_parking(classes, *flags))


JUC = "j.u.c. lock java.util.concurrent.locks.ReentrantLock$NonfairSync"


def _run_parking(classes, *jvm_flags: str) -> tuple[record.RunRecord, float]:
    clock, out = classes / "clock.txt", classes / "out"
    r = lockscope("run", "--workers", "2", "--duration", "4", "--out", str(out), "--name", "pk", "--force",
                  "--throughput-regex", r"ops/s: ([0-9.]+)", "--", "java", *jvm_flags, "-cp", str(classes),
                  "Parking", "{n}", "100", "20", "6", str(clock), timeout=240)
    assert r.returncode == 0, r.stderr
    [path] = (out / "runs").glob("*.json")
    return record.load(path), Clock(*map(float, clock.read_text().split()))


def test_a_juc_lock_parks_and_is_a_lock_while_an_idle_pool_parked_the_same_way_is_idle(e2e, parking):
    """java.util.concurrent: a ReentrantLock's waiters park (LockSupport.park
    with the lock's Sync as blocker; the JVM's Unsafe_Park, a Parker on a
    pthread condition variable), and so do a pool's threads waiting for
    work in LinkedBlockingQueue.take() (blocker: a ConditionObject). The
    workers' parks are named by their blocker's class and sized as the
    program's own clock (tests/programs/Parking.java: System.nanoTime around
    lock()); the pool's, not a lock's blocker, are left to the wake-ups:
    woken by nobody, idle."""
    rec, own, _ = parking
    top = rec.locks[0]
    print({"program's clock": own, "lockscope": [(lk.name, round(lk.wait_share, 3)) for lk in rec.locks[:3]]})
    assert (top.name, top.kind, top.component, top.tier) == (JUC, "j.u.c. lock", "Java", "verified"), \
        [lk.name for lk in rec.locks[:3]]
    assert own.share > CONTENDED and own.agrees(rec, top), (top.wait_ns, own)
    # the parks inside the lock's waits are those waits, not a condition variable as well
    park = sum(lk.wait_share for lk in rec.locks if "Parker::park" in lk.name)
    assert park < 0.05, [(lk.name, lk.wait_share) for lk in rec.locks[:5]]
    pool = next(ro for ro in rec.roles if ro.name == "pool-#-thread-#")
    assert not pool.worker and pool.lock_ns < 0.01 * pool.idle_ns, pool
    [jvm] = rec.probe.raw.usdt_probe.jvms
    assert jvm.parks_named, jvm


def test_juc_parks_agree_with_jfr_in_the_same_run(e2e, parking):
    """JFR's jdk.ThreadPark (threshold 0) times each Unsafe.park and names
    its parkedClass: the same class, and the same mean park, as lockscope's
    in the same run."""
    rec, _, jfr = parking
    needs_jfr(jfr)
    [w] = [w for w in rec.probe.raw.usdt if w.lock == JUC]
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "64", "--events", "jdk.ThreadPark", str(jfr)],
                         capture_output=True, text=True, check=True).stdout
    events = [e["values"] for e in json.loads(out)["recording"]["events"]
              if (e["values"].get("parkedClass") or {}).get("name") ==
              "java/util/concurrent/locks/ReentrantLock$NonfairSync"]
    waits = [_jfr_seconds(e["duration"]) for e in events]
    jfr_mean, ours = sum(waits) / len(waits), w.total_ns / w.count / 1e9
    print({"jfr": (len(waits), round(sum(waits), 3), jfr_mean), "lockscope": (w.count, w.total_ns / 1e9, ours)})
    assert len(waits) > 500 and w.count > 500
    assert abs(ours - jfr_mean) <= 0.10 * jfr_mean, (ours, jfr_mean)
    # the method that took the lock, through the JDK's lock code (compiled by now: no JVM flag needed
    # for its frames), JFR's stacks and lockscope's agree
    [(jfr_site, _)] = Counter(jvmframes.site(_jfr_frames(e)) for e in events).most_common(1)
    stack = rec.locks[0].stacks[0]
    print({"jfr": jfr_site, "lockscope": stack.frames[:6]})
    assert stack.site == jfr_site == "Parking.lambda$main$0", (stack.site, jfr_site)
    assert "java.util.concurrent.locks.ReentrantLock.lock" in stack.frames, stack.frames
    assert sum(st.wait_ns for st in rec.locks[0].stacks) > 0.8 * w.total_ns


def _unhidden(frames: list[str]) -> list[str]:
    """Frames without the JVM's hidden lambda classes (JFR and lockscope number them apart)."""
    return [f for f in frames if "$$Lambda" not in f]


def test_compiled_frames_are_walked_without_flags_as_jfr_sees_them(e2e, tmp_path):
    """The JDK's Hashtable, shared by 2 threads of tests/programs/JdkLocks.java:
    within a second its synchronized put is compiled, inlined into the
    caller's loop, and enters the monitor through the JIT's runtime stub.
    lockscope walks the compiled frames from the thread's last Java frame
    (no -XX:+PreserveFramePointer, no perf map): the compiled method the put
    was inlined into is the site, and the frames are those of JFR's
    jdk.JavaMonitorEnter stack traces in the same run, less the inlined put."""
    if not shutil.which("javac") or not shutil.which("jfr"):
        pytest.skip("javac or jfr not found: tests/programs/JdkLocks.java needs a JDK (apt-get install "
                    "default-jdk-headless)")
    subprocess.run(["javac", "-d", str(tmp_path), str(REPO / "tests" / "programs" / "JdkLocks.java")], check=True,
                   capture_output=True)
    jfc, jfr, out = tmp_path / "monitor.jfc", tmp_path / "run.jfr", tmp_path / "out"
    jfc.write_text(JFC)
    r = lockscope("run", "--workers", "2", "--duration", "4", "--out", str(out), "--name", "jl", "--force", "--",
                  "java", f"-XX:StartFlightRecording=filename={jfr},settings={jfc}", "-cp", str(tmp_path),
                  "JdkLocks", "7", timeout=240)
    assert r.returncode == 0, r.stderr
    [path] = (out / "runs").glob("*.json")
    rec = record.load(path)
    [jvm] = rec.probe.raw.usdt_probe.jvms
    assert jvm.frames == "java", jvm
    lock = next(lk for lk in rec.locks if lk.name == "Java monitor of java.util.Hashtable")
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "64", "--events", "jdk.JavaMonitorEnter",
                          str(jfr)], capture_output=True, text=True, check=True).stdout
    stacks = Counter(tuple(_jfr_frames(e["values"])) for e in json.loads(out)["recording"]["events"]
                     if e["values"]["monitorClass"]["name"] == "java/util/Hashtable")
    [(jfr_stack, _)] = stacks.most_common(1)
    compiled = [st for st in lock.stacks if st.site == "JdkLocks.lambda$main$0"]
    print({"jfr": jfr_stack, "lockscope": [(st.frames, st.count) for st in lock.stacks]})
    assert jfr_stack[:2] == ("java.util.Hashtable.put", "JdkLocks.lambda$main$0"), jfr_stack
    # the put inlined: lockscope's frames begin at its caller, and are JFR's from there
    assert compiled and compiled[0].frames[0] == "JdkLocks.lambda$main$0", lock.stacks
    assert _unhidden(compiled[0].frames) == _unhidden(list(jfr_stack[1:])), (compiled[0].frames, jfr_stack)
    # every calling context lockscope walked is one of JFR's (the leaf's own frame absent where it was
    # inlined), and most waits were walked through the compiled method: the put is compiled within the
    # first of the run's 4 seconds. Counted in waits, not wait time: the few waits before the compile
    # last longer (the JIT's compiler threads take one of the 2 CPUs then), so their share of the time
    # depends on when the compile lands, not on the walk.
    seen = {tuple(_unhidden(list(s[i:]))) for s in stacks for i in (0, 1)}
    assert all(tuple(_unhidden(st.frames)) in seen for st in lock.stacks), (lock.stacks, list(stacks))
    [w] = [w for w in rec.probe.raw.usdt if w.lock == lock.name]   # its waits, without the spin before them
    assert sum(st.count for st in compiled) > 0.5 * w.count, (lock.stacks, w.count)
