"""The workload driver on a real tmpfs: every workload performs its
operation (checked on the files it leaves) and counts it; bad input fails
with a clear message."""
import json
import os
import subprocess

import pytest

from conftest import e2e_missing

# the workload driver on real file systems, its work sized by the rate it measures (a worker may
# run out of pre-created files when that rate was taken while another test shared the CPUs): run
# with the end-to-end tests, one at a time, not beside the tests that measure nothing
pytestmark = pytest.mark.e2e

WORKERS = 2


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("workload tests mount a tmpfs: they need root")


def driver():
    from lockscope import paths
    return str(paths.workload_binary())


def run(workload, directory, workers=WORKERS, duration="0.3"):
    p = subprocess.run([driver(), "run", "--workload", workload, "--workers", str(workers), "--duration", duration,
                        "--warmup", "0.1", "--dir", str(directory)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    events = [json.loads(line) for line in p.stdout.splitlines()]
    assert [e["event"] for e in events] == ["ready", "reference", "measure_start", "measure_end", "result"]
    result = events[-1]
    ref = events[1]    # the warm-up's first part (--warmup 0.1: all of it), before the window
    assert ref["seconds"] == pytest.approx(0.1, abs=0.05) and ref["t_ns"] <= events[2]["t_ns"]
    assert ref["ops_per_sec"] == pytest.approx(ref["ops"] / ref["seconds"], rel=1e-3)
    assert result["workers"] == workers and len(result["per_worker"]) == workers
    assert result["ops"] == sum(w["ops"] for w in result["per_worker"]) > 0
    assert all(w["ops"] > 0 and not w["ran_out"] for w in result["per_worker"])
    assert result["ops_per_sec"] == pytest.approx(result["ops"] / result["duration_s"], rel=1e-3)
    assert 0.25 < result["duration_s"] < 0.6
    return events[0], result


@pytest.fixture(scope="module")
def fs(tmp_path_factory):
    needs_root()
    if e2e_missing() and "C parts" in e2e_missing():
        pytest.skip(e2e_missing())
    from lockscope.machine import scratch
    with scratch.mounted("tmpfs", tmp_path_factory.mktemp("scratch")) as m:
        yield m.mountpoint


@pytest.fixture
def d(fs, request):
    path = fs / "".join(c if c.isalnum() else "_" for c in request.node.name)
    path.mkdir()
    return path


def files(path):
    return sorted(os.listdir(path))


def test_dwol_overwrites_private_files(d):
    _, r = run("DWOL", d)
    for i in range(WORKERS):
        assert os.path.getsize(d / f"w{i}" / "file") == 4096


def test_dwom_overwrites_private_blocks_of_one_shared_file(d):
    ready, r = run("DWOM", d)
    assert os.path.getsize(d / "share" / "file") == 4096 * WORKERS
    assert str(d / "share" / "file") in ready["watch_paths"]


def test_mwcl_creates_files_in_private_dirs(d):
    _, r = run("MWCL", d)
    for w in r["per_worker"]:
        assert len(files(d / f"w{w['worker']}")) >= w["ops"]     # warm-up files too


def test_mwcm_creates_files_in_one_shared_dir(d):
    _, r = run("MWCM", d)
    assert len(files(d / "share")) >= r["ops"]


def test_mwul_unlinks_precreated_files(d):
    _, r = run("MWUL", d)
    for w in r["per_worker"]:
        left = len(files(d / f"w{w['worker']}"))
        assert left <= w["precreated"] - w["ops"]


def test_mwrl_renames_within_a_private_dir(d):
    _, r = run("MWRL", d)
    for i in range(WORKERS):
        assert len(set(files(d / f"w{i}")) & {"a", "b"}) == 1


def test_mwrm_renames_into_the_shared_dir_and_back(d):
    ready, r = run("MWRM", d)
    shared = files(d / "share")
    for i in range(WORKERS):
        here = (d / f"w{i}" / "f").exists()
        there = f"f{i}" in shared
        assert here != there                     # exactly one place
    assert str(d / "share") in ready["watch_paths"]


@pytest.mark.parametrize("workload,path", [("MRPL", "w{i}/0/1/2/file"), ("MRPH", "share/0/1/2/file")],
                         ids=["MRPL", "MRPH"])
def test_path_lookups_open_files_five_levels_deep(d, workload, path):
    run(workload, d)
    for i in range(WORKERS):
        assert (d / path.format(i=i)).is_file()


def test_mmap_runs_threads_of_one_process(fs):
    ready, r = run("mmap", fs)
    assert len(set(ready["worker_pids"])) == 1 and len(set(ready["worker_tids"])) == WORKERS


def test_oversubscription_is_recorded(d):
    cpus = len(os.sched_getaffinity(0))
    ready, r = run("MWRL", d, workers=cpus + 1)
    assert r["oversubscribed"] is True and ready["oversubscribed"] is True


@pytest.mark.parametrize("args,message", [
    (["--workload", "NOPE"], "unknown workload"),
    (["--workload", "MWRM", "--workers", "0"], "workers"),
    (["--workload", "MWRM", "--dir", "/nonexistent/dir"], "/nonexistent/dir"),
])
def test_driver_rejects_bad_input(args, message):
    base = {"--workers": "1", "--duration": "1", "--dir": "/tmp"}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    argv = [driver(), "run", "--workload", base.pop("--workload")] + [x for kv in base.items() for x in kv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and p.stderr.startswith("lockscope-workload: error: ") and message in p.stderr


def test_stdout_closed_mid_run_kills_the_workers_and_fails(d):
    """A reader that goes away (lockscope killed, its pipe closed) ends the
    driver with the reason and exit 1, and takes its workers with it: the
    fatal path kills and reaps them (the cleanup children.c registers)."""
    import signal
    import time
    p = subprocess.Popen([driver(), "run", "--workload", "MWRL", "--workers", "2", "--duration", "30",
                          "--warmup", "0.1", "--interval", "0.05", "--dir", str(d)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(p.stdout.readline())
        assert ready["event"] == "ready", ready
        workers = ready["worker_pids"]
        p.stdout.close()                   # the next event's write fails with EPIPE
        assert p.wait(timeout=10) == 1
        assert "cannot write to stdout" in p.stderr.read()
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
    deadline = time.time() + 5
    alive = workers
    while alive and time.time() < deadline:
        alive = [w for w in workers if os.path.exists(f"/proc/{w}")]
        time.sleep(0.05)
    assert not alive, f"workers outlived their driver: {alive}"
