"""Nothing lost, nothing leaked: an interrupted sweep releases its probes,
workers, mounts and loop devices, keeps its finished points, and resumes;
doctor finds and releases what a SIGKILL left behind."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, bpftool_progs, kill_with_watchdog, left_under, lockscope, our_processes
from lockscope.model import record
from lockscope.machine import ownership, scratch as sc


def assert_released(scratch_root):
    deadline = time.time() + 5
    while our_processes() and time.time() < deadline:   # PDEATHSIG'd children may take a moment
        time.sleep(0.1)
    assert our_processes() == []
    # programs attached to the syscall tracepoints (the futex probe) are freed
    # after an RCU tasks-trace grace period, which can take seconds: wait for it
    deadline = time.time() + 30
    while [p for p in bpftool_progs() if p.startswith("lksc_")] and time.time() < deadline:
        time.sleep(0.2)
    assert not [p for p in bpftool_progs() if p.startswith("lksc_")]
    assert left_under(scratch_root) == {"mounts": [], "loop_devices": []}
    # nothing of it is left recorded either, and its directories are gone
    assert not [s for s in ownership.ledgers() if not s.alive], [s.items for s in ownership.ledgers()]
    folder = Path(scratch_root)
    assert not [p for p in folder.rglob("*") if p.name != sc.OWNED_MARK], list(folder.rglob("*"))


def loops_under(root) -> list[str]:
    """Loop devices backed by a file under root, live owner or not."""
    return [dev for dev, backing in sc.loop_devices() if backing.startswith(str(root) + "/")]


def sweep_cmd(out, scratch_root):
    return [sys.executable, "-m", "lockscope", "sweep", "--repeat", "1", "MWRM", "--fs", "ext4", "--workers", "1,2",
            "--duration", "1.5", "--warmup", "0.3", "--out", str(out), "--scratch", str(scratch_root)]


@pytest.mark.e2e
def test_sigterm_mid_sweep_releases_everything_keeps_points_and_resumes(tmp_path, e2e):
    out, root = tmp_path / "out", tmp_path / "scratch"
    first = out / "runs" / "MWRM-ext4-w1.json"
    p = subprocess.Popen(sweep_cmd(out, root), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not first.exists() and time.time() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert first.exists(), "first point did not finish"
        # wait until the second point holds a mounted ext4 on a loop device and a probe
        while time.time() < deadline and not (loops_under(root) and
                                              any(c == "lockscope-probe" for _, c in our_processes())):
            time.sleep(0.05)
        time.sleep(0.8)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "interrupted (SIGTERM)" in err and "finished points are kept" in err
    assert_released(root)
    # the finished point is intact; the interrupted one left nothing
    rec = record.load(first)
    assert rec.workers == 1 and rec.ops > 0 and rec.probe.attached and rec.probe.window_s > 1.0
    assert sorted(os.listdir(out / "runs")) == ["MWRM-ext4-w1.json"]
    mtime = first.stat().st_mtime_ns

    # rerunning the same sweep measures only what is missing
    again = subprocess.run(sweep_cmd(out, root), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "1 of 2 points already measured" in again.stderr
    assert first.stat().st_mtime_ns == mtime
    assert record.load(out / "runs" / "MWRM-ext4-w2.json").workers == 2
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["points"] == ["MWRM-ext4-w1", "MWRM-ext4-w2"] and manifest["failures"] == {}
    assert_released(root)


@pytest.mark.e2e
def test_ctrl_c_during_a_run_writes_nothing_and_releases_everything(tmp_path, e2e):
    out, root, log = tmp_path / "out", tmp_path / "scratch", tmp_path / "stderr.txt"
    with open(log, "w") as err:
        p = subprocess.Popen([sys.executable, "-m", "lockscope", "run", "DWOM", "--fs", "tmpfs", "--workers", "2",
                              "--duration", "10", "--warmup", "0.2", "--out", str(out), "--scratch", str(root)],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.time() + 60
            while "measuring" not in log.read_text() and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            p.send_signal(signal.SIGINT)      # what Ctrl-C sends
            p.wait(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 130, log.read_text()
    assert "interrupted (SIGINT)" in log.read_text()
    assert not (out / "runs").exists()
    assert_released(root)


@pytest.mark.e2e
def test_doctor_finds_and_cleans_what_a_sigkill_left(tmp_path, e2e):
    root = tmp_path / "scratch"
    p = subprocess.Popen([sys.executable, "-m", "lockscope", "run", "MWRM", "--fs", "ext4", "--workers", "1",
                          "--duration", "10", "--out", str(tmp_path / "out"), "--scratch", str(root)],
                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not loops_under(root) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    # while it runs, its mounts are in use, not leftovers
    doc = json.loads(lockscope("doctor", "--json", "--scratch", str(root)).stdout)
    assert not any(doc["leftovers"].values()), doc["leftovers"]
    assert [r["pid"] for r in doc["in_use"]] == [p.pid]
    # no cleanup can run: lockscope and its watchdog killed at once (the
    # whole session, as a container stop does): the mounts stay
    kill_with_watchdog(p)
    left = ownership.survey()["leftovers"]
    assert left["mounts"] and left["loop_devices"]
    doc = json.loads(lockscope("doctor", "--json", "--scratch", str(root)).stdout)
    assert set(doc["leftovers"]["mounts"]) == set(left["mounts"]) and doc["in_use"] == []
    text = lockscope("doctor", "--scratch", str(root)).stdout
    assert "lockscope doctor --clean" in text
    cleaned = lockscope("doctor", "--clean", "--scratch", str(root))
    assert cleaned.returncode == 0 and "unmounted" in cleaned.stdout and "detached /dev/loop" in cleaned.stdout
    assert_released(root)


@pytest.mark.e2e
def test_doctor_reports_what_works_here(e2e):
    p = lockscope("doctor", "--json")
    assert p.returncode == 0, p.stdout
    doc = json.loads(p.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    probe = next(c for n, c in checks.items() if n.startswith("BPF probes"))
    assert probe["ok"] is True and "loaded and attached" in probe["detail"]
    hw = checks["hardware counters (cycles, instructions)"]
    assert hw["detail"] and (hw["ok"] or "CPI is reported as unavailable" in hw["detail"])
    assert {f["name"]: f["ok"] for f in doc["fs"]}["tmpfs"] is True
    assert doc["ready"] is True
