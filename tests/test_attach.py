"""`lockscope attach` on a program lockscope did not start
(tests/programs/hotmutex.c: threads contending on the global pthread mutex
`hot_lock`): by pid, by comm and by cgroup v2; the mutex named by its
symbol; the target keeps running, unsignalled, after lockscope detaches;
no BPF program, map or link of lockscope's probe is left, nor a uprobe;
a target that exits, SIGINT and SIGKILL during the window; bad input."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO, build_c, lockscope
from lockscope.model import record

SOURCE = REPO / "tests" / "programs" / "hotmutex.c"


@pytest.fixture(scope="module")
def hotmutex(tmp_path_factory) -> Path:
    return build_c(SOURCE, tmp_path_factory.mktemp("hotmutex") / "hotmutex", ("-O1", "-g", "-fno-omit-frame-pointer", "-pthread"))


class Target:
    """hotmutex started outside lockscope (a child of the test, in a
    session of its own); it runs until its stdin is closed."""

    def __init__(self, binary: Path, log: Path, threads: int = 3):
        self.log = log
        self.proc = subprocess.Popen([str(binary), str(threads)], stdin=subprocess.PIPE, stdout=open(log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 10
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.pid = self.proc.pid

    def counts(self) -> list[int]:
        return [int(line.split()[1]) for line in self.log.read_text().splitlines() if line.startswith("count ")]

    def signals(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if line.startswith("signal ")]

    def state(self) -> str:
        return Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    def assert_undisturbed(self) -> None:
        """Alive, not stopped, no signal received, and still counting."""
        assert self.proc.poll() is None, f"the target exited ({self.proc.returncode})"
        assert self.state() in ("R", "S"), f"the target is in state {self.state()}"
        before = self.counts()[-1]
        time.sleep(0.5)
        assert self.counts()[-1] > before, "the target stopped counting"
        assert self.signals() == [], f"the target received {self.signals()}"

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def target(hotmutex, tmp_path):
    t = Target(hotmutex, tmp_path / "target.log")
    yield t
    t.end()


def _fdinfo_ids(pid: int) -> dict[str, set[int]]:
    """The ids of the BPF programs, maps and links a process holds."""
    ids: dict[str, set[int]] = {"prog": set(), "map": set(), "link": set()}
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in ("prog_id", "map_id", "link_id") and value.strip().isdigit():
                ids[key.removesuffix("_id")].add(int(value))
    return ids


def _loaded_ids() -> dict[str, set[int]]:
    out = {}
    for what in ("prog", "map", "link"):
        text = subprocess.run(["bpftool", "-j", what, "show"], capture_output=True, text=True).stdout
        out[what] = {e["id"] for e in json.loads(text or "[]")}
    return out


def _probe_child(pid: int) -> int | None:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == pid and (d / "comm").read_text().strip() == "lockscope-probe":
                    return int(d.name)
            except (OSError, IndexError, ValueError):
                continue
    return None


class Attach:
    """`lockscope attach ARGS` started in the background; `attached()` waits
    for its window to start and notes the BPF objects its probe holds."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "lockscope", "attach", *args], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self.ids: dict[str, set[int]] = {}

    def attached(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            if "attached to" in line:
                probe = _probe_child(self.proc.pid)
                assert probe, "no lockscope-probe under lockscope attach"
                self.ids = _fdinfo_ids(probe)
                assert self.ids["prog"] and self.ids["link"], self.ids
                return
        raise AssertionError("lockscope attach ended before its window: " + "".join(self.err))

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, "".join(self.err) + err

    def assert_detached(self) -> None:
        """None of the probe's programs, maps or links is loaded any more
        (ids are never reused while the kernel runs), and no uprobe is."""
        deadline = time.monotonic() + 5
        while True:
            loaded = _loaded_ids()
            left = {k: v & loaded[k] for k, v in self.ids.items() if v & loaded[k]}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)      # maps are freed by the kernel shortly after the last reference
        assert not left, f"left loaded after lockscope attach: {left}"
        names = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                                          text=True).stdout or "[]")
        assert not [p for p in names if p["id"] in self.ids["prog"]]
        for events in ("/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"):
            if Path(events).exists():
                assert "lksc" not in Path(events).read_text()


def _record(out: Path) -> record.RunRecord:
    files = list((out / "runs").glob("*.json"))
    assert len(files) == 1, files
    return record.load(files[0])


def _top_user_lock(rec: record.RunRecord):
    """The heaviest lock at a user-space address ("pid:address")."""
    user = [lk for lk in rec.locks if any(isinstance(a, str) and ":" in a for a in lk.addresses)]
    assert user, [lk.name for lk in rec.locks]
    return user[0]


def _assert_names_hot_lock(rec: record.RunRecord, pid: int) -> None:
    assert rec.kind == "attach" and rec.ops_per_sec is None
    top = _top_user_lock(rec)
    assert "hot_lock" in top.name and top.tier == "verified", top
    assert top.kind == "pthread_mutex" and top.wait_share > 0.01
    assert [p.pid for p in rec.attach.processes] == [pid]
    assert any("throughput unknown (attach)" in w for w in rec.warnings)


@pytest.fixture
def need_bpftool(e2e):
    if not shutil.which("bpftool"):
        pytest.skip("bpftool is needed to see which BPF programs, maps and links are loaded")


def test_attach_pid_names_the_mutex_and_leaves_the_target_alone(need_bpftool, target, tmp_path):
    out = tmp_path / "out"
    run = Attach("--pid", str(target.pid), "--duration", "2", "--out", str(out))
    run.attached()
    rc, stdout, stderr = run.finish()
    assert rc == 0, stderr
    assert "hot_lock" in stdout and "throughput unknown (attach)" in stdout
    rec = _record(out)
    _assert_names_hot_lock(rec, target.pid)
    # workers: the target's threads at the start (3 workers, the main thread, its stdin reader)
    assert rec.workers == 5 and rec.attach.threads == 5 and rec.attach.ended == "duration"
    assert 1.9 < rec.duration_s < 3 and rec.probe.window_s > 1.9
    # the roles pick the target's threads as the work, unchanged
    assert rec.roles and rec.worker_roles == {"hotmutex"}
    # the time view: lock waits per --interval (1 s)
    assert rec.probe.raw.series and rec.probe.raw.series.interval_ns == 1_000_000_000
    target.assert_undisturbed()
    run.assert_detached()
    # the results commands read the attach record
    r = lockscope("analyze", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["experiments"][0]["kind"] == "attach"
    for args in (("report", str(out)), ("export", str(out)), ("compare", str(out), str(out))):
        r = lockscope(*args)
        assert r.returncode == 0, (args, r.stderr)


def test_attach_comm(e2e, hotmutex, tmp_path):
    name = f"hotmx{uuid.uuid4().hex[:8]}"       # unique among the machine's processes
    shutil.copy(hotmutex, tmp_path / name)
    t = Target(tmp_path / name, tmp_path / "target.log")
    try:
        out = tmp_path / "out"
        r = lockscope("attach", "--comm", name, "--duration", "1.5", "--out", str(out))
        assert r.returncode == 0, r.stderr
        rec = _record(out)
        _assert_names_hot_lock(rec, t.pid)
        assert rec.workload == name and rec.attach.how == "comm"
        t.assert_undisturbed()
    finally:
        t.end()


def _cgroup2() -> Path | None:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if parts[2] == "cgroup2":
            return Path(parts[1])
    return None


@pytest.fixture
def cgroup(e2e):
    """A fresh cgroup v2 directory with a child, removed afterwards (its
    processes moved back to where they were first)."""
    root = _cgroup2()
    if root is None:
        pytest.skip("cgroup v2 is not mounted on this machine")
    d = root / f"lockscope-test-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    (d / "leaf").mkdir()
    moved: dict[int, str] = {}

    def move(pid: int, where: Path) -> None:
        line = next(ln for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ln.startswith("0::"))
        moved.setdefault(pid, line[3:])
        (where / "cgroup.procs").write_text(str(pid))

    yield d, move
    for pid, old in moved.items():
        try:
            (root / old.lstrip("/") / "cgroup.procs").write_text(str(pid))
        except OSError:
            pass                 # it exited
    for sub in (d / "leaf", d):
        for _ in range(50):
            try:
                sub.rmdir()
                break
            except OSError:
                time.sleep(0.1)  # an exited process leaves the cgroup shortly after


def test_attach_cgroup_with_descendants(cgroup, target, tmp_path):
    d, move = cgroup
    move(target.pid, d / "leaf")         # in a child cgroup: found from the parent
    out = tmp_path / "out"
    r = lockscope("attach", "--cgroup", str(d), "--duration", "1.5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rec = _record(out)
    _assert_names_hot_lock(rec, target.pid)
    assert rec.attach.how == "cgroup" and rec.attach.target == str(d) and rec.workload == d.name
    target.assert_undisturbed()


def test_attach_cgroup_by_unit_name(cgroup, target, tmp_path):
    """--cgroup NAME.service: a systemd unit's cgroup found by its name below
    cgroup v2's mount (here a directory named like one; a real systemd 252
    transient unit is in bench/README.md); two of that name are ambiguous."""
    d, move = cgroup
    unit = f"{d.name}.service"
    (d / "leaf" / unit).mkdir()
    try:
        move(target.pid, d / "leaf" / unit)
        out = tmp_path / "out"
        r = lockscope("attach", "--cgroup", unit, "--duration", "1.5", "--out", str(out))
        assert r.returncode == 0, r.stderr
        rec = _record(out)
        _assert_names_hot_lock(rec, target.pid)
        assert rec.attach.target == str(d / "leaf" / unit) and rec.workload == unit
        (d / unit).mkdir()
        r = lockscope("attach", "--cgroup", unit, "--duration", "1")
        assert r.returncode == 2 and f"2 cgroups are named {unit}: " in r.stderr, r.stderr
        r = lockscope("attach", "--cgroup", "lockscope-no-such.service", "--duration", "1")
        assert r.returncode == 2
        assert r.stderr.startswith("lockscope: error: --cgroup: no cgroup named lockscope-no-such.service below "), r.stderr
    finally:
        move(target.pid, d)
        for sub in (d / unit, d / "leaf" / unit):
            if sub.exists():
                sub.rmdir()
    target.assert_undisturbed()


def test_empty_cgroup_is_an_error(cgroup):
    d, _ = cgroup
    r = lockscope("attach", "--cgroup", str(d), "--duration", "1")
    assert r.returncode == 2
    assert r.stderr.strip() == f"lockscope: error: --cgroup: {d} and the cgroups below it have no process"


def test_target_exiting_ends_the_window(e2e, target, tmp_path):
    out = tmp_path / "out"
    run = Attach("--pid", str(target.pid), "--duration", "60", "--out", str(out))
    run.attached()
    time.sleep(1.5)
    target.end()                                  # it exits by itself (stdin closed)
    rc, stdout, stderr = run.finish(timeout=60)
    assert rc == 0, stderr
    rec = _record(out)
    assert rec.attach.ended == "exited" and rec.duration_s < 10
    assert any(f"pid {target.pid} (hotmutex) exited" in w for w in rec.warnings), rec.warnings
    assert any("ended early: the targets exited" in w for w in rec.warnings)
    assert "hot_lock" in _top_user_lock(rec).name


def test_sigint_ends_the_window_and_writes_the_record(e2e, target, tmp_path):
    out = tmp_path / "out"
    run = Attach("--pid", str(target.pid), "--out", str(out))      # no --duration: until Ctrl-C
    run.attached()
    time.sleep(1.5)
    run.proc.send_signal(signal.SIGINT)
    rc, stdout, stderr = run.finish()
    assert rc == 0, stderr
    rec = _record(out)
    assert rec.attach.ended == "SIGINT" and 1 < rec.duration_s < 10
    assert "hot_lock" in _top_user_lock(rec).name
    target.assert_undisturbed()


def test_sigkill_of_lockscope_leaves_the_target_alone(need_bpftool, target, tmp_path):
    """The watchdog kills what lockscope started (the probe), never the target."""
    run = Attach("--pid", str(target.pid), "--duration", "60", "--out", str(tmp_path / "out"))
    run.attached()
    run.proc.kill()
    run.proc.wait()
    run.assert_detached()
    target.assert_undisturbed()


@pytest.mark.parametrize("args, message", [
    (("--comm", "no-such-comm-x"), "lockscope: error: --comm: no process named 'no-such-comm-x' "
                                   "(the name in /proc/PID/comm, at most 15 characters)"),
    (("--pid", "abc"), "lockscope: error: --pid 'abc': expected process ids, comma-separated (e.g. 1234,5678)"),
    (("--cgroup", "/tmp"), None),
])
def test_bad_targets_are_one_line_errors(args, message):
    r = lockscope("attach", *args, "--duration", "1")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    if message:
        assert r.stderr.strip() == message
    else:
        assert "is not a cgroup v2 directory" in r.stderr


def test_no_such_pid():
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1       # never a process
    r = lockscope("attach", "--pid", str(pid), "--duration", "1")
    assert (r.returncode, r.stderr.strip()) == (2, f"lockscope: error: --pid: no such process {pid}")
