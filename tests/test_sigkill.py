"""lockscope killed with SIGKILL (a dead terminal, a CI runner's timeout)
leaves nothing behind: 2 s later no process it started is alive and nothing
it mounted is mounted (lockscope/machine/watchdog.py); the next run reclaims
anything left and leaves the machine as it was; a killed sweep keeps its
finished points and resumes."""
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, e2e_missing, lockscope, our_processes
from lockscope.machine import ownership, scratch as sc

OURS = ("lockscope-probe", "lockscope-workl")


def _bpf_programs() -> list[str]:
    p = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    return [x["name"] for x in json.loads(p.stdout or "[]") if str(x.get("name", "")).startswith("lksc_")] \
        if p.returncode == 0 else []


def _state(root: Path) -> dict:
    r = str(root.resolve())
    return {"processes": [f"{comm} ({pid})" for pid, comm in our_processes()], "bpf": _bpf_programs(),
            "mounts": [m[1] for m in sc.mounts() if m[1].startswith(r)],
            "loops": [d for d, backing in sc.loop_devices() if backing.startswith(r)]}


def _kill_at(args: list[str], marker: str, delay: float, timeout: float = 120) -> str:
    """Start lockscope ARGS, SIGKILL it `delay` s after a progress line
    containing `marker`; its output so far."""
    proc = subprocess.Popen([sys.executable, "-m", "lockscope", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=1):
                continue
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if marker in line:
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
                return "".join(seen)
        pytest.fail(f"never saw {marker!r}: {''.join(seen)[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.fixture
def clean_machine(tmp_path):
    why = e2e_missing()
    if why:
        pytest.skip(why)
    root = tmp_path / "scratch"
    before = _state(root)
    assert not before["processes"], f"lockscope processes already running: {before['processes']}"
    yield root
    ownership.reclaim()


@pytest.mark.e2e
@pytest.mark.parametrize("marker,delay", [
    ("preparing ext4", 0.2),       # set-up: mkfs / mount in progress
    ("warming up", 0.3),           # warm-up: probe loaded, workers running
    ("measuring", 1.0),            # the timed window
])
def test_sigkill_leaves_nothing_behind(clean_machine, tmp_path, marker, delay):
    root = clean_machine
    out = _kill_at(["run", "MWRM", "--fs", "ext4", "--workers", "2", "--duration", "4", "--warmup", "1",
                    "--out", str(tmp_path / "out"), "--scratch", str(root)], marker, delay)
    time.sleep(2)
    assert _state(root) == {"processes": [], "bpf": [], "mounts": [], "loops": []}, out
    # one more run works and leaves the machine as it was
    p = lockscope("run", "MWRL", "--fs", "tmpfs", "--workers", "1", "--duration", "1", "--warmup", "0",
                  "--out", str(tmp_path / "again"), "--scratch", str(root))
    assert p.returncode == 0, p.stderr
    assert _state(root) == {"processes": [], "bpf": [], "mounts": [], "loops": []}


@pytest.mark.e2e
def test_sigkill_of_a_sweep_keeps_finished_points_and_it_resumes(clean_machine, tmp_path):
    root, out = clean_machine, tmp_path / "out"
    args = ["sweep", "--repeat", "1", "MWRM", "--fs", "tmpfs", "--workers", "1,2", "--duration", "1", "--warmup", "0",
            "--out", str(out), "--scratch", str(root)]
    # killed while the second point is set up, after the first point's record was written
    _kill_at(args, "[2/2]", 0.3)
    time.sleep(2)
    assert _state(root) == {"processes": [], "bpf": [], "mounts": [], "loops": []}
    assert [f.name for f in (out / "runs").glob("*.json")] == ["MWRM-tmpfs-w1.json"]
    json.loads((out / "runs" / "MWRM-tmpfs-w1.json").read_text())      # whole, readable
    assert not [f for f in out.rglob("*") if f.name.startswith(".") and f.suffix == ".tmp"]
    p = lockscope(*args)
    assert p.returncode == 0, p.stderr
    assert "1 points measured, 1 already there" in p.stdout
    assert sorted(f.name for f in (out / "runs").glob("*.json")) == ["MWRM-tmpfs-w1.json", "MWRM-tmpfs-w2.json"]


@pytest.mark.e2e
def test_next_run_reclaims_what_a_killed_run_left(clean_machine, tmp_path):
    """Without the watchdog (killed with lockscope, as a whole process group
    would be), the next run reclaims the dead run's mounts and says so."""
    root = clean_machine
    proc = subprocess.Popen([sys.executable, "-m", "lockscope", "run", "MWRM", "--fs", "ext4", "--workers", "1",
                             "--duration", "5", "--warmup", "0", "--out", str(tmp_path / "out"),
                             "--scratch", str(root)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _state(root)["mounts"]:
            time.sleep(0.1)
        time.sleep(1.5)
        # the whole session at once, its watchdog included
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if os.getsid(int(d.name)) == proc.pid or \
                            b"lockscope.machine.watchdog" in (d / "cmdline").read_bytes():
                        os.kill(int(d.name), signal.SIGKILL)
                except OSError:
                    pass
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    time.sleep(1)
    assert _state(root)["mounts"], "the killed run left no mount to reclaim"
    # its workers and probe die with it (PDEATHSIG); had one lived on, its
    # recorded group would be killed first (tests/test_ownership.py)
    p = lockscope("run", "MWRL", "--fs", "tmpfs", "--workers", "1", "--duration", "1", "--warmup", "0",
                  "--out", str(tmp_path / "again"), "--scratch", str(root))
    assert p.returncode == 0, p.stderr
    assert "reclaimed from a killed run: unmounted" in p.stderr
    assert _state(root) == {"processes": [], "bpf": [], "mounts": [], "loops": []}
