"""lockscope removes, unmounts or kills only what it recorded making
(lockscope/machine/ownership.py), never what looks like its own by name: a user's
files under --scratch survive a run, a SIGKILL and the reclaim of the next
run byte for byte; doctor leaves a live run alone; a reused pid fools
nothing."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, kill_with_watchdog, left_under, lockscope
from lockscope.machine import ownership, scratch as sc


# ---- the ledger, without a kernel ---------------------------------------------

@pytest.fixture
def state(tmp_path, monkeypatch):
    """A ledger directory of this test's own."""
    d = tmp_path / "state"
    monkeypatch.setattr(ownership, "STATE_DIR", d)
    monkeypatch.setattr(ownership, "_ledger", None)
    return d


def _ledger_of(owner: ownership.Owner, items: list[dict]) -> None:
    ownership.STATE_DIR.mkdir(parents=True, exist_ok=True)
    owner.ledger.write_text(json.dumps({"owner": owner.__dict__, "command": ["lockscope", "run"], "items": items}))


def _sleeper() -> subprocess.Popen:
    """A process in a group (and session) of its own, like a workload."""
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_a_reused_pid_is_a_dead_owner(state):
    me = ownership.Owner.of(os.getpid())
    assert me.alive()
    assert not ownership.Owner(me.pid, me.start + 1, me.boot).alive()       # same pid, another process
    assert not ownership.Owner(me.pid, me.start, "another-boot").alive()    # same pid and ticks, after a reboot


def test_reclaim_releases_what_a_dead_run_recorded_and_nothing_else(state, tmp_path):
    made_empty, made_full, users = tmp_path / "ours-empty", tmp_path / "ours-full", tmp_path / "users"
    for d in (made_empty, made_full, users):
        d.mkdir()
    (made_full / "thesis.tex").write_text("not lockscope's")
    me = ownership.Owner.of(os.getpid())
    dead = ownership.Owner(me.pid, me.start - 1, me.boot)                     # this pid, an earlier process
    group = _sleeper()
    try:
        _ledger_of(dead, [{"kind": "dir", "path": str(made_empty)}, {"kind": "dir", "path": str(made_full)},
                          {"kind": "mount", "path": str(users), "source": "lockscope", "fstype": "tmpfs"},
                          {"kind": "loop", "backing": str(users / "fs.img")},
                          {"kind": "group", "pgid": group.pid, "start": ownership.start_time(group.pid)}])
        done = ownership.reclaim()
        assert group.wait(timeout=5) == -signal.SIGKILL
    finally:
        if group.poll() is None:
            group.kill()
    assert not made_empty.exists()                                            # rmdir: it was empty
    assert (made_full / "thesis.tex").read_text() == "not lockscope's"       # never a recursive delete
    assert users.is_dir()                                                     # not mounted: nothing to undo
    assert any(f"killed process group {group.pid}" in d for d in done), done
    assert any(f"left {made_full}" in d for d in done), done
    assert not dead.ledger.exists() and ownership.reclaim() == []


def test_a_live_runs_ledger_is_never_touched(state, tmp_path):
    made = tmp_path / "in-use"
    made.mkdir()
    group = _sleeper()
    try:
        me = ownership.Owner.of(os.getpid())
        _ledger_of(me, [{"kind": "dir", "path": str(made)},
                        {"kind": "group", "pgid": group.pid, "start": ownership.start_time(group.pid)}])
        assert ownership.reclaim() == []
        assert made.is_dir() and group.poll() is None
        survey = ownership.survey()
        assert [r["pid"] for r in survey["in_use"]] == [me.pid] and not any(survey["leftovers"].values())
    finally:
        group.kill()
        group.wait()


def test_a_group_whose_leader_pid_was_reused_is_not_killed(state):
    other = _sleeper()                  # stands for an unrelated process that got the recorded pid
    try:
        me = ownership.Owner.of(os.getpid())
        _ledger_of(ownership.Owner(me.pid, me.start - 1, me.boot),
                   [{"kind": "group", "pgid": other.pid, "start": ownership.start_time(other.pid) - 5}])
        assert ownership.reclaim() == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_scratch_folder_of_its_own_inside_a_users_directory(tmp_path, capsys):
    users = tmp_path / "disk"
    (users / "lockscope").mkdir(parents=True)           # the user's folder of that name: not ours either
    (users / "notes.txt").write_text("mine")
    folder = sc.workdir(users)
    assert folder == users / "lockscope-2" and (folder / sc.OWNED_MARK).is_file()
    assert "holds files lockscope did not make" in capsys.readouterr().err
    assert sc.workdir(users) == folder                  # the same folder next time
    assert sorted(p.name for p in users.iterdir()) == ["lockscope", "lockscope-2", "notes.txt"]
    assert list((users / "lockscope").iterdir()) == []
    assert sc.workdir(tmp_path / "new") == tmp_path / "new"           # made by lockscope: used as it is
    empty = tmp_path / "empty"
    empty.mkdir()
    assert sc.workdir(empty) == empty and (empty / sc.OWNED_MARK).is_file()


@pytest.mark.parametrize("where,why", [("/proc", "virtual file system"), ("/sys/fs/x", "virtual file system")])
def test_scratch_on_a_virtual_file_system_is_a_usage_error(where, why):
    p = lockscope("run", "MWRM", "--fs", "tmpfs", "--workers", "1", "--duration", "1", "--scratch", where)
    assert p.returncode == 2 and why in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"lockscope: error: --scratch {where}:")


def test_scratch_that_is_a_file_is_a_usage_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    p = lockscope("run", "MWRM", "--fs", "tmpfs", "--workers", "1", "--duration", "1", "--scratch", str(f))
    assert p.returncode == 2 and "is not a directory" in p.stderr


# ---- end to end: the user's files under --scratch --------------------------------

USER_FILES = {"photos/a.jpg": b"\xff\xd8 a photo", "thesis.tex": b"\\documentclass{article}",
              "tmpfs-1-0/notes.txt": b"looks like lockscope's point directory",
              "mnt/keep.txt": b"looks like a mount point", "lockscope/mine.txt": b"a folder named lockscope",
              "ext4-99999-0/ram/fs.img": b"looks like an image"}


def _user_tree(root: Path) -> Path:
    for name, data in USER_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "empty-dir").mkdir()
    return root


def _digest(root: Path) -> dict[str, str]:
    """Every file and directory under root except lockscope's own folder."""
    own = {p.parent for p in root.rglob(sc.OWNED_MARK)}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in root.rglob("*") if not any(o == p or o in p.parents for o in own)}


@pytest.mark.e2e
def test_users_files_survive_runs_a_sigkill_and_the_reclaim(tmp_path, e2e):
    root = _user_tree(tmp_path / "disk")
    before = _digest(root)
    for fs in ("tmpfs", "ext4"):
        p = lockscope("run", "MWRM", "--fs", fs, "--workers", "1", "--duration", "1", "--warmup", "0",
                      "--scratch", str(root), "--out", str(tmp_path / f"out-{fs}"))
        assert p.returncode == 0, p.stderr
        assert "reclaimed" not in p.stderr and f"it works in {root}/lockscope-2" in p.stderr
    assert _digest(root) == before
    assert sorted(p.name for p in (root / "lockscope-2").iterdir()) == [sc.OWNED_MARK]

    # killed with its watchdog (no cleanup at all), then the next run reclaims
    proc = subprocess.Popen([sys.executable, "-m", "lockscope", "run", "MWRM", "--fs", "ext4", "--workers", "1",
                             "--duration", "10", "--warmup", "0", "--scratch", str(root),
                             "--out", str(tmp_path / "killed")], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not left_under(root)["loop_devices"]:
            time.sleep(0.1)
        time.sleep(1)
        kill_with_watchdog(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert ownership.survey()["leftovers"]["mounts"], "the killed run left nothing to reclaim"
    p = lockscope("run", "MWRL", "--fs", "tmpfs", "--workers", "1", "--duration", "1", "--warmup", "0",
                  "--scratch", str(root), "--out", str(tmp_path / "again"))
    assert p.returncode == 0, p.stderr
    reclaimed = [ln for ln in p.stderr.splitlines() if "reclaimed from a killed run" in ln]
    assert reclaimed and all(f"{root}/lockscope-2/" in ln or "/dev/loop" in ln for ln in reclaimed), reclaimed
    assert _digest(root) == before
    assert left_under(root) == {"mounts": [], "loop_devices": []}
    assert sorted(p.name for p in (root / "lockscope-2").iterdir()) == [sc.OWNED_MARK]


@pytest.mark.e2e
def test_doctor_and_doctor_clean_leave_a_live_run_alone(tmp_path, e2e):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "lockscope", "run", "MWRM", "--fs", "ext4", "--workers", "1",
                             "--duration", "4", "--warmup", "0", "--scratch", str(tmp_path / "scratch"),
                             "--out", str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not left_under(tmp_path / "scratch")["loop_devices"]:
            time.sleep(0.1)
        time.sleep(0.5)
        doc = json.loads(lockscope("doctor", "--json").stdout)
        run = next(r for r in doc["in_use"] if r["pid"] == proc.pid)
        assert any(i.startswith("mount: ") for i in run["items"]) and any(i.startswith("group: ") for i in run["items"])
        assert not any(doc["leftovers"].values()), doc["leftovers"]
        assert not [u for u in doc["unrecorded"] if "lockscope-" in u], doc["unrecorded"]
        text = lockscope("doctor").stdout
        assert f"in use by run {proc.pid}" in text and "lockscope doctor --clean" not in text
        cleaned = lockscope("doctor", "--clean")
        assert cleaned.returncode == 0 and "nothing to clean" in cleaned.stdout
        assert f"in use by run {proc.pid}" in cleaned.stdout
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert (out / "runs" / "MWRM-ext4-w1.json").is_file()
