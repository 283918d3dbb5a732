"""The rest of the FxMark suite on real tmpfs and ext4 (loop device over a
RAM-backed image): each workload runs briefly, counts ops, and leaves the
traces of its operation (file sizes and contents, entries enumerated,
device I/Os for O_DIRECT and fsync on ext4); a file system that refuses
O_DIRECT gives a clear error event."""
import json
import os
import subprocess

import pytest

from conftest import e2e_missing, left_under

# the workload driver on real file systems, its work sized by the rate it measures (a worker may
# run out of pre-created files when that rate was taken while another test shared the CPUs): run
# with the end-to-end tests, one at a time, not beside the tests that measure nothing
# e2e: they load no probe, but MWUM's precreated files are sized for a quiet machine (run in the
# parallel first pass, a worker ran out of them: `ran_out`), so they run with the measuring tests
pytestmark = pytest.mark.e2e

MIB = 1 << 20
DWAL_CAP = 64 * MIB
MRD_ENTRIES = 1000
NEW = ["DRBL", "DRBM", "DRBH", "DWAL", "DWTL", "DWSL", "MRPM", "MRDL", "MRDM", "MWUM",
       "DRBL_DIO", "DRBM_DIO", "DWOL_DIO", "DWOM_DIO"]


def driver():
    from lockscope import paths
    return str(paths.workload_binary())


def needs_driver():
    if os.geteuid() != 0:
        pytest.skip("these tests mount file systems: they need root")
    why = e2e_missing()
    if why and "C parts" in why:
        pytest.skip(why)


def run_driver(workload, directory, workers):
    return subprocess.run([driver(), "run", "--workload", workload, "--workers", str(workers), "--duration", "0.5",
                           "--warmup", "0.1", "--dir", str(directory)], capture_output=True, text=True, timeout=120)


def run(workload, directory, workers):
    p = run_driver(workload, directory, workers)
    assert p.returncode == 0, p.stderr
    events = [json.loads(line) for line in p.stdout.splitlines()]
    assert [e["event"] for e in events] == ["ready", "reference", "measure_start", "measure_end", "result"]
    r = events[-1]
    assert r["workload"] == workload and len(r["per_worker"]) == workers
    assert r["ops"] == sum(w["ops"] for w in r["per_worker"]) > 0
    assert all(w["ops"] > 0 and not w["ran_out"] for w in r["per_worker"]), r["per_worker"]
    return events[0], r


def device_ios(device):
    """(read I/Os, write I/Os) completed by a block device so far."""
    f = open(f"/sys/block/{os.path.basename(device)}/stat").read().split()
    return int(f[0]), int(f[4])


@pytest.fixture(scope="module", params=["tmpfs", "ext4"])
def fs(request, tmp_path_factory):
    needs_driver()
    from lockscope.machine import scratch as sc
    ok, why = sc.availability(request.param)
    if not ok:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("fxscratch")
    with sc.mounted(request.param, root, image_size_gib=4) as m:
        yield m
    left = left_under(root)
    assert not left["mounts"] and not left["loop_devices"], f"left behind: {left}"


@pytest.fixture
def d(fs, request):
    path = fs.mountpoint / "".join(c if c.isalnum() else "_" for c in request.node.name)
    path.mkdir()
    return path


def test_catalog_documents_every_new_workload():
    needs_driver()
    p = subprocess.run([driver(), "--list"], capture_output=True, text=True, check=True)
    cat = {w["name"]: w for w in json.loads(p.stdout)["workloads"]}
    for name in NEW:
        assert all(cat[name][k] for k in ("operation", "sharing", "component")), cat[name]
    assert "O_DIRECT" in cat["DRBM_DIO"]["operation"] and "1,000" in cat["MRDM"]["operation"]


def test_drbl_reads_private_files(d, fs):
    ready, r = run("DRBL", d, 2)
    for i in range(2):
        assert os.path.getsize(d / f"w{i}" / "file") == 4096
        assert str(d / f"w{i}" / "file") in ready["watch_paths"]


def test_drbm_reads_private_blocks_8mib_apart_in_one_shared_file(d, fs):
    ready, r = run("DRBM", d, 2)
    assert os.path.getsize(d / "share" / "file") == 8 * MIB + 4096
    assert str(d / "share" / "file") in ready["watch_paths"]


def test_drbh_reads_the_same_block(d, fs):
    ready, r = run("DRBH", d, 2)
    assert os.path.getsize(d / "share" / "file") == 4096


def test_dwal_appends_and_truncates_at_the_cap(d, fs):
    _, r = run("DWAL", d, 1)
    w = r["per_worker"][0]
    size = os.path.getsize(d / "w0" / "file")
    assert 0 <= size <= DWAL_CAP and size % 4096 == 0
    # everything appended since the release covers what the window counted
    assert w["truncations"] * DWAL_CAP + size >= w["ops"] * 4096


def test_dwtl_shrinks_a_prefilled_file_block_by_block(d, fs):
    _, r = run("DWTL", d, 1)
    w = r["per_worker"][0]
    size = os.path.getsize(d / "w0" / "file")
    assert size % 4096 == 0 and size <= (w["precreated"] - w["ops"]) * 4096


def test_dwsl_writes_and_syncs(d, fs):
    before = device_ios(fs.device) if fs.device else None
    _, r = run("DWSL", d, 2)
    for i in range(2):
        assert (d / f"w{i}" / "file").read_bytes() == bytes([ord("a") + i]) * 4096
    if before:           # ext4: every fsync reaches the device
        assert device_ios(fs.device)[1] - before[1] >= r["ops"]


def test_mrpm_opens_files_of_a_shared_8ary_tree(d, fs):
    ready, r = run("MRPM", d, 2)
    # rooted at the directory itself, as FxMark roots it at its mount point: five components deep
    files = [os.path.relpath(os.path.join(p, f), d) for p, _, fs_ in os.walk(d) for f in fs_]
    assert len(files) == 8 ** 5 and all(f.count("/") == 4 for f in files)
    assert str(d / "7" / "7") in ready["watch_paths"]


@pytest.mark.parametrize("workload", ["MRDL", "MRDM"])
def test_mrd_enumerates_whole_directories(d, fs, workload):
    _, r = run(workload, d, 2)
    for w in r["per_worker"]:
        where = d / ("share" if workload == "MRDM" else f"w{w['worker']}")
        assert w["dir_entries"] == MRD_ENTRIES == len(os.listdir(where))


def test_mwum_unlinks_precreated_files_in_the_shared_dir(d, fs):
    _, r = run("MWUM", d, 2)
    left = os.listdir(d / "share")
    assert len(left) <= sum(w["precreated"] - w["ops"] for w in r["per_worker"])
    assert all(f.startswith(("f0-", "f1-")) for f in left)


@pytest.mark.parametrize("workload", ["DRBL_DIO", "DRBM_DIO"])
def test_direct_reads(d, fs, workload):
    before = device_ios(fs.device) if fs.device else None
    _, r = run(workload, d, 2)
    if before:           # ext4: each O_DIRECT read is a device read
        assert device_ios(fs.device)[0] - before[0] >= r["ops"]


@pytest.mark.parametrize("workload,path", [("DWOL_DIO", "w{i}/file"), ("DWOM_DIO", "share/file")])
def test_direct_writes(d, fs, workload, path):
    before = device_ios(fs.device) if fs.device else None
    _, r = run(workload, d, 2)
    for i in range(2):
        data = (d / path.format(i=i)).read_bytes()
        off = i * 4096 if workload == "DWOM_DIO" else 0
        assert data[off:off + 4096] == bytes([ord("a") + i]) * 4096
    if before:
        assert device_ios(fs.device)[1] - before[1] >= r["ops"]


def test_refused_o_direct_is_an_error_event(tmp_path):
    needs_driver()
    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "lockscope-test", str(mnt)], check=True)
    try:
        p = run_driver("DWOL_DIO", mnt, 1)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    assert p.returncode == 1
    err = json.loads(p.stdout.splitlines()[-1])
    assert err["event"] == "error" and err["op"] == "open" and err["errno"] == 22
    assert "O_DIRECT" in err["message"] and "O_DIRECT" in p.stderr


def _opens_during_run(workload, directory, params):
    """Run a lookup workload under --control and count the IN_OPEN events of
    its target file (inotify, watched between set-up and the run; inotify
    merges identical events that follow each other unread, so this tells
    none from some, not how many)."""
    import ctypes
    import select
    libc = ctypes.CDLL(None, use_errno=True)
    directory.mkdir()
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert fd >= 0
    p = subprocess.Popen([driver(), "run", "--workload", workload, "--workers", "1", "--duration", "0.3",
                          "--warmup", "0.1", "--dir", str(directory), "--control", *params],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(p.stdout.readline())
        assert ready["event"] == "ready", ready
        target = next(w for w in ready["watch_paths"] if w.endswith("/file"))
        assert libc.inotify_add_watch(fd, target.encode(), 0x20) >= 0      # IN_OPEN
        p.stdin.write("go\n")
        p.stdin.flush()
        while json.loads(p.stdout.readline())["event"] != "measure_end":
            pass
        p.stdin.write("stop\n")
        p.stdin.flush()
        result = json.loads(p.stdout.readline())
        assert p.wait(timeout=30) == 0, p.stderr.read()
        opens = 0
        while select.select([fd], [], [], 0)[0]:
            opens += len(os.read(fd, 65536)) // 16                          # struct inotify_event, no name
        return result, opens
    finally:
        if p.poll() is None:
            p.kill()
        os.close(fd)


def test_mrp_stat_param_stats_instead_of_opening(d, fs):
    """MRP* open+close by default (the paper's operation); --param stat=1
    stats the file instead, as FxMark's code does: no open at all."""
    r, opens = _opens_during_run("MRPL", d / "open", [])
    assert r["ops"] > 0 and r["params"] == {"stat": 0} and opens >= 1   # inotify merges repeated events
    r, opens = _opens_during_run("MRPL", d / "stat", ["--param", "stat=1"])
    assert r["ops"] > 0 and r["params"] == {"stat": 1} and opens == 0
