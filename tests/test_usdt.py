"""Application lock names from USDT probes (probes/usdt.bpf.c, the probe
table analyzer/user/usdt.toml), checked against the program's own view:
PostgreSQL 15's lwlock__wait__start/done and lock__wait__start/done while
pgbench (tpcb-like, scale 1: hot rows) runs on a private cluster that
`lockscope attach --pid <postmaster>` traces, and pg_stat_activity's
wait_event_type/wait_event sampled every 50 ms over the same window. The
lock waits lockscope names must agree with what PostgreSQL reports: the
same top wait type (Lock or LWLock), and the heaviest named waits among
the events PostgreSQL sampled."""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import pgcluster
from conftest import REPO, e2e_missing, leaked_progs
from lockscope.model import record
from lockscope.analyzer.user import jvmframes, usdt

PROBES = ("lwlock__wait__start", "lwlock__wait__done", "lock__wait__start", "lock__wait__done")
WINDOW_S = 4
CLIENTS = int(os.environ.get("LOCKSCOPE_USDT_CLIENTS", "4"))   # bench/README.md also used 8
SAMPLE_S = 0.05
WAIT_SQL = ("SELECT wait_event_type || '|' || wait_event FROM pg_stat_activity WHERE backend_type = "
            "'client backend' AND wait_event_type IN ('Lock', 'LWLock') AND pid <> pg_backend_pid();")


def sdt_missing() -> str | None:
    b = pgcluster.bindir()
    if b is None:
        return None
    notes = subprocess.run(["readelf", "-n", str(b / "postgres")], capture_output=True, text=True).stdout
    lacking = [p for p in PROBES if p not in notes]
    if lacking:
        return f"{b / 'postgres'} was built without the SDT probes {', '.join(lacking)} (--enable-dtrace)"
    return None


def test_table_covers_postgres_probes():
    """The table is data: PostgreSQL is an entry with its two waits; the
    cookie carries the entry and the arguments usdt.bpf.c reads."""
    table = usdt.default()
    specs = {s.start: s for s in table.probes_for("/usr/lib/postgresql/15/bin/postgres")}
    assert set(specs) == {"lwlock__wait__start", "lock__wait__start"}
    lw, hw = specs["lwlock__wait__start"], specs["lock__wait__start"]
    assert lw.cookie & 0xff == lw.entry and (lw.cookie >> 8) & 0xf == 1 and lw.cookie & (1 << 12)
    assert (hw.cookie >> 8) & 0xf == 5 and not hw.cookie & (1 << 12) and (hw.cookie >> 16) & 0xf == 6
    assert lw.lock_name(0, "WALWrite") == "LWLock WALWrite"
    assert hw.lock_name(5, "") == "heavyweight lock on transactionid"
    assert hw.lock_name(4, "") == "heavyweight lock on tuple"
    assert hw.mode_name(5) == "ShareLock" and lw.mode_name(0) == "exclusive"
    assert table.probes_for("/usr/bin/python3") == []


SDT_TABLE = """
[[program]]
name = "queue server"
component = "qsrv"
binaries = ["*/qsrv"]
provider = "qsrv"

# queue__lock__wait(queue name, mode) .. queue__lock__acquired(queue name, mode)
[[program.probe]]
start = "queue__lock__wait"
done = "queue__lock__acquired"
kind = "queue lock"
prefix = "queue lock "
name_arg = 1
name_string = true
"""


def test_another_program_is_a_table_entry(tmp_path):
    """A program built with <sys/sdt.h>: one more [[program]], no code."""
    f = tmp_path / "usdt.toml"
    f.write_text(usdt.TABLE_FILE.read_text() + SDT_TABLE)
    table = usdt.Table.load(f)
    [spec] = table.probes_for("/opt/qsrv/bin/qsrv")
    n = sum(len(p.probes) for p in usdt.default().programs)     # the entries before it
    assert spec.entry == n and spec.cookie == n | 1 << 8 | 1 << 12
    assert spec.lock_name(0, "orders") == "queue lock orders"
    assert spec.mode_name(7) == "" and table.entry(n) is spec
    raw = type("Raw", (), {})()
    raw.__dict__.update(usdt.resolve({"usdt_probe": {"loaded": True}, "usdt": [
        {"tgid": 7, "entry": n, "value": 0, "mode": 0, "name": "orders", "count": 3, "total_ns": 900,
         "max_ns": 500}]}, table))
    [lock] = usdt.name_usdt(raw, 2, 1000)
    assert (lock.name, lock.kind, lock.component, lock.tier) == ("queue lock orders", "queue lock", "qsrv",
                                                                 "verified")
    assert lock.count == 3 and lock.wait_share == 900 / 2000


def test_the_jvm_monitor_probes_name_the_class_from_a_counted_string():
    """HotSpot's class name is a Symbol's bytes (no NUL): its length is the
    fourth argument; internal names read with dots. Without the probes'
    flag, ObjectMonitor::EnterI (enter_internal in JDK 25) is timed from its
    entry to its return, the class read through its ObjectMonitor (bit 13)."""
    specs = usdt.default().probes_for("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so")
    [spec, enter, park] = specs
    assert (spec.provider, spec.start, spec.kind) == ("hotspot", "monitor__contended__enter", "Java monitor")
    assert (spec.cookie >> 8) & 0xf == 3 and spec.cookie & (1 << 12) and (spec.cookie >> 20) & 0xf == 4
    assert spec.lock_name(0, "java/util/HashMap") == "Java monitor of java.util.HashMap"
    assert spec.attachments[1][0] == "done"
    assert enter.start.split(",") == ["_ZN13ObjectMonitor6EnterIEP10JavaThread",
                                      "_ZN13ObjectMonitor14enter_internalEP10JavaThread"]
    assert (enter.probe_provider, enter.kind, enter.probe) == ("-", "Java monitor", "ObjectMonitor::EnterI()")
    assert (enter.cookie >> 8) & 0xf == 1 and enter.cookie & (1 << 13) and not enter.cookie & (1 << 12)
    assert [(w, n) for w, n, _ in enter.attachments] == [("start", enter.start), ("return", enter.start)]
    assert enter.lock_name(0, "Monitor$Counter") == "Java monitor of Monitor$Counter"
    assert enter.lock_name(0, "") == "Java monitor of [unreadable name]"
    # a j.u.c. lock: Unsafe_Park named by the park blocker's class, only a lock's (bit 15: by suffix)
    assert park.cookie & (1 << 14) and park.cookie & (1 << 15) and not (park.cookie >> 8) & 0xf
    assert "$NonfairSync" in park.name_suffixes and park.attachments[1][0] == "return"
    assert park.lock_name(0, "java/util/concurrent/locks/ReentrantLock$NonfairSync") == \
        "j.u.c. lock java.util.concurrent.locks.ReentrantLock$NonfairSync"


def test_a_return_done_or_a_monitor_name_needs_a_function(tmp_path):
    f = tmp_path / "usdt.toml"
    f.write_text(SDT_TABLE.replace('done = "queue__lock__acquired"', 'done = "return"'))
    with pytest.raises(ValueError, match='done = "return" needs attach = "function"'):
        usdt.Table.load(f)
    f.write_text(SDT_TABLE.replace("name_string = true", 'name_from = "hotspot_monitor"'))
    with pytest.raises(ValueError, match="name_from"):
        usdt.Table.load(f)
    f.write_text(SDT_TABLE.replace("name_string = true", 'name_suffixes = ["a", "b", "c", "d", "e"]'))
    with pytest.raises(ValueError, match="name_suffixes: at most 4"):
        usdt.Table.load(f)


def _jvm_raw(jvms, waits=()):
    path = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
    raw = type("Raw", (), {})()
    raw.__dict__.update(usdt.resolve({"usdt_probe": {"loaded": True, "jvms": jvms, "attached": [
        {"probe": "start", "provider": "hotspot", "name": "monitor__contended__enter", "path": path}]},
        "usdt": list(waits)}))
    return raw


def test_the_waits_of_a_jvms_objects_count_their_instances():
    """EnterI's waits are kept by monitor (the key's value): one lock entry
    per class, its instances the monitors seen; other entries' values are
    names, not instances."""
    path = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
    enter = next(s for s in usdt.default().probes_for(path) if s.name_from == "hotspot_monitor")
    rows = [{"tgid": 7, "entry": enter.entry, "value": mon, "mode": 0, "name": "Account", "count": 2,
             "total_ns": 500, "max_ns": 400} for mon in (0x7f0010, 0x7f0020, 0x7f0030)]
    raw = type("Raw", (), {})()
    raw.__dict__.update(usdt.resolve({"usdt_probe": {"loaded": True}, "usdt": rows}))
    [w] = raw.usdt
    assert (w.lock, w.count, w.total_ns, w.max_ns, w.instances) == ("Java monitor of Account", 6, 1500, 400, 3)
    [lock] = usdt.name_usdt(raw, 2, 1000)
    assert lock.instances == 3 and lock.count == 6


# lines of a perf map Temurin 25 wrote (-XX:+DumpPerfMapAtExit) in a run of tests/programs/Parking.java
PERF_MAP = """0x00007f35a793fd60 0x00000000000194c8 Interpreter
0x00007f35a7938ee0 0x0000000000004f60 StubRoutines (initialstubs)
0x00007f35a7ed1500 0x0000000000000148 void jdk.internal.misc.Unsafe.park(boolean, long)
0x00007f35a7ed4b00 0x0000000000000440 void java.util.concurrent.locks.ReentrantLock.lock()
0x00007f35a0415100 0x00000000000001b0 boolean java.util.regex.Pattern$$Lambda/0x800000027.is(int)
0x00007f35a7a6fee0 0x0000000000000050 C2 Runtime complete_monitor_locking
"""


def test_a_jvm_waits_call_path_is_its_java_methods(tmp_path, monkeypatch):
    """A JVM wait's call path as usdt.bpf.c walks it: compiled frames named
    by the JVM's perf map, an interpreted one by the Method the probe named;
    the JVM's stubs before the first Java frame dropped, and the frames past
    the last one named; the site the first method outside the JDK's lock
    code. Without a perf map, the compiled frames are not named."""
    monkeypatch.setattr(jvmframes, "PERF_MAP", str(tmp_path / "perf-{pid}.map"))
    (tmp_path / "perf-7.map").write_text(PERF_MAP)
    path = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
    park = next(s for s in usdt.default().probes_for(path) if s.name_from == "hotspot_park_blocker")
    method = 0x7f0000801230
    pcs = [0x7f35a7a6ff00, 0x7f35a7ed1580, jvmframes.METHOD_FRAME | method, 0x7f35a7ed4c00,
           jvmframes.METHOD_FRAME | 0x7f0000809990, 0x7f35a7938f00, 0x1000]
    data = {"usdt_probe": {"loaded": True}, "jvm_methods": [
        {"tgid": 7, "method": hex(method), "class": "java/util/concurrent/locks/AbstractQueuedSynchronizer",
         "name": "acquire"},
        {"tgid": 7, "method": "0x7f0000809990", "class": "Parking$$Lambda$1+0x00007fc5cc000a08", "name": "run"}],
        "usdt_stacks": [{"id": "0x51", "tgid": 7, "pcs": [hex(p) for p in pcs]}],
        "usdt": [{"tgid": 7, "entry": park.entry, "value": 0, "mode": 0, "count": 3, "total_ns": 900,
                  "max_ns": 400, "stack": "0x51", "name": "java/util/concurrent/locks/ReentrantLock$NonfairSync"},
                 {"tgid": 7, "entry": park.entry, "value": 0, "mode": 0, "count": 1, "total_ns": 100,
                  "max_ns": 100, "name": "java/util/concurrent/locks/ReentrantLock$NonfairSync"}]}
    raw = type("Raw", (), {})()
    raw.__dict__.update(usdt.resolve(data))
    [w] = raw.usdt
    assert w.count == 4 and len(w.stacks) == 1
    assert w.stacks[0].frames == ["jdk.internal.misc.Unsafe.park",
                                  "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire",
                                  "java.util.concurrent.locks.ReentrantLock.lock", "Parking$$Lambda$1.run",
                                  "[StubRoutines (initialstubs)]"]
    assert (w.stacks[0].count, w.stacks[0].total_ns) == (3, 900)
    [lock] = usdt.name_usdt(raw, 2, 1000)
    assert lock.stacks[0].site == "Parking$$Lambda$1.run" and lock.count == 4
    (tmp_path / "perf-7.map").unlink()
    raw.__dict__.update(usdt.resolve(data))
    assert raw.usdt[0].stacks[0].frames == ["java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire",
                                            "[unknown]", "Parking$$Lambda$1.run"]


def test_perf_map_symbols_are_java_methods_or_the_jvms_stubs():
    assert jvmframes.perf_method("void JdkLocks.lambda$main$0(long, java.util.Hashtable, long[], int)") == \
        "JdkLocks.lambda$main$0"
    assert jvmframes.perf_method("boolean java.util.regex.Pattern$$Lambda/0x800000027.is(int)") == \
        "java.util.regex.Pattern$$Lambda.is"
    assert jvmframes.perf_method("java.util.Hashtable::put(Ljava/lang/Object;)") == "java.util.Hashtable.put"
    for stub in ("Interpreter", "StubRoutines (initialstubs)", "C2 Runtime complete_monitor_locking"):
        assert jvmframes.perf_method(stub) is None, stub
    pm = jvmframes.parse_perf_map(PERF_MAP + "garbage\n")
    assert pm.symbol(0x7f35a7ed4b01).endswith("ReentrantLock.lock()")
    assert pm.symbol(0x7f35a7ed4b00) is None            # a return address: the call is just before it
    assert pm.symbol(0x7f35a7ed4f40).endswith("ReentrantLock.lock()") and pm.symbol(0x7f35a7ed4f41) is None


def test_a_jvm_named_at_enteri_needs_no_flag_and_one_that_is_not_says_why():
    """The monitor probes' flag warning is for a JVM nobody looked at; a JVM
    whose layout was not read says why (its -XX:+UseCompactObjectHeaders);
    one whose monitor probes name its monitors needs no word."""
    path = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
    assert any("-XX:+DTraceMonitorProbes" in w for w in usdt.usdt_warnings(_jvm_raw([])))
    named = _jvm_raw([{"tgid": 9, "file": path, "named": True, "by_probes": False, "parks_named": True}])
    assert usdt.usdt_warnings(named) == [] and named.usdt_probe.jvms[0].named
    flag = _jvm_raw([{"tgid": 9, "file": path, "named": False, "by_probes": True, "parks_named": True}])
    assert usdt.usdt_warnings(flag) == []
    [w] = usdt.usdt_warnings(_jvm_raw([{"tgid": 9, "file": path, "named": True, "parks_named": False}]))
    assert w.startswith("java.util.concurrent locks of process 9 not named by class"), w
    compact = _jvm_raw([{"tgid": 9, "file": path, "named": False, "by_probes": False,
                         "reason": "-XX:+UseCompactObjectHeaders: the class is in the object's mark word"}])
    [w] = usdt.usdt_warnings(compact)
    assert w.startswith("Java monitors of process 9 not named by class: -XX:+UseCompactObjectHeaders"), w


def pg_event(lock: record.Lock) -> tuple[str, str] | None:
    """A lockscope lock named from PostgreSQL's probes as pg_stat_activity's
    (wait_event_type, wait_event)."""
    if lock.component != "PostgreSQL":
        return None
    if lock.kind == "LWLock":
        return "LWLock", lock.name.removeprefix("LWLock ")
    if lock.kind == "heavyweight lock":
        return "Lock", lock.name.removeprefix("heavyweight lock on ")
    return None


class Sampler(threading.Thread):
    """pg_stat_activity's Lock/LWLock waits of the client backends every
    SAMPLE_S, through one psql session, until stopped."""

    def __init__(self, cluster: pgcluster.Cluster):
        super().__init__(daemon=True)
        self.psql = cluster.popen("psql", *cluster.conn, "-X", "-Atq", "-d", "postgres",
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.samples = 0
        self.events: Counter = Counter()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            self.psql.stdin.write(WAIT_SQL + "\nSELECT 'END';\n")
            self.psql.stdin.flush()
            for line in self.psql.stdout:
                line = line.strip()
                if line == "END":
                    break
                if "|" in line:
                    self.events[tuple(line.split("|", 1))] += 1
            self.samples += 1
            time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - t)))

    def close(self) -> None:
        self.stop.set()
        self.join(10)
        self.psql.stdin.close()
        self.psql.wait(10)


def run_experiment(cluster: pgcluster.Cluster, out: Path) -> tuple[record.RunRecord, Sampler, str]:
    """attach to the postmaster; pgbench and the sampler over the window."""
    attach = subprocess.Popen(
        ["python3", "-m", "lockscope", "attach", "--pid", str(cluster.pid), "--duration", str(WINDOW_S + 1),
         "--out", str(out), "--name", "postgres"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    log = []
    for line in attach.stderr:
        log.append(line)
        if "attached to" in line:
            break
    else:
        attach.wait()
        pytest.fail(f"lockscope attach failed: {''.join(log)}")
    sampler = Sampler(cluster)
    bench = cluster.popen("pgbench", *cluster.conn, "-c", str(CLIENTS), "-j", str(CLIENTS), "-T", str(WINDOW_S),
                          "-n", "postgres", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler.start()
    bench_out = bench.communicate(timeout=60)[0]
    sampler.close()
    rest = attach.communicate(timeout=120)
    assert attach.returncode == 0, "".join(log) + rest[1]
    runs = sorted((out / "runs").glob("*.json"))
    assert runs, f"no record written: {rest}"
    return record.load(runs[-1]), sampler, bench_out


@pytest.fixture(scope="module")
def experiment(e2e, tmp_path_factory):
    why = e2e_missing() or pgcluster.missing() or sdt_missing()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("usdt")
    with pgcluster.Cluster() as cluster:
        cluster.as_user("pgbench", *cluster.conn, "-i", "-s", "1", "-q", "postgres")
        rec, sampler, bench_out = run_experiment(cluster, out)
    summary = {
        "lockscope": {lk.name: {"kind": lk.kind, "waits": lk.count, "wait_ms": round(lk.wait_ns / 1e6, 1),
                                "modes": {m: round(ns / 1e6, 1) for m, ns in lk.modes.items()}}
                      for lk in rec.locks if pg_event(lk)},
        "pg_stat_activity": {"samples": sampler.samples,
                             "events": {f"{t}:{e}": n for (t, e), n in sampler.events.most_common()}},
        "tps": [line for line in bench_out.splitlines() if line.startswith("tps")],
    }
    print(json.dumps(summary, indent=1))
    return rec, sampler


def test_lwlock_sleeps_not_counted_twice(experiment):
    """An LWLock waiter's semaphore sleep (a futex wait in LWLockAcquire) is
    the LWLock wait lockscope named from the probe: not a futex lock too."""
    rec, _ = experiment
    twice = [lk.name for lk in rec.locks if lk.component != "PostgreSQL" and any(
        "LWLockAcquire" in f for st in lk.stacks for f in st.frames)]
    assert not twice, twice


def test_nothing_left_attached(experiment):
    """The USDT programs go with the probe (their links are closed)."""
    assert not leaked_progs("lksc_usdt")


def test_usdt_lock_names_agree_with_pg_stat_activity(experiment):
    rec, sampler = experiment
    named = [(pg_event(lk), lk) for lk in rec.locks if pg_event(lk)]
    assert named, f"no lock named from PostgreSQL's USDT probes; warnings: {rec.warnings}"
    for _, lk in named:
        assert lk.tier == "verified" and lk.component == "PostgreSQL" and lk.count > 0
    assert any(lk.kind == "heavyweight lock" for _, lk in named), [lk.name for _, lk in named]
    assert sampler.samples >= WINDOW_S / SAMPLE_S / 4, f"only {sampler.samples} pg_stat_activity samples"
    assert sampler.events, "pg_stat_activity never showed a client backend in a Lock or LWLock wait"

    # the same top wait type: lockscope by wait time, PostgreSQL by samples
    ls_type: Counter = Counter()
    for (typ, _), lk in named:
        ls_type[typ] += lk.wait_ns
    pg_type: Counter = Counter()
    for (typ, _), n in sampler.events.items():
        pg_type[typ] += n
    assert ls_type.most_common(1)[0][0] == pg_type.most_common(1)[0][0], (ls_type, pg_type)

    # by name: lockscope's heaviest wait is PostgreSQL's most sampled one, or
    # close to it (sampling error), and the events PostgreSQL sampled most are named
    ls_events = {ev: lk.wait_ns for ev, lk in named}
    top_pg = [ev for ev, _ in sampler.events.most_common(2)]
    top_ls = max(ls_events, key=ls_events.get)
    assert top_ls in top_pg, (top_ls, sampler.events.most_common(5))
    assert sampler.events.most_common(1)[0][0] in ls_events, (ls_events, sampler.events)
