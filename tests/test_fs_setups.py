"""The file-system setups: each one is made, formatted and mounted for real,
runs a built-in workload and is released; a setup this machine lacks is
reported with the reason and skipped by a sweep; `--device` is refused unless
confirmed, and never on a device in use."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import left_under, lockscope
from lockscope.machine import scratch as sc

AVAILABLE = {name: sc.availability(name) for name in sc.FS_SETUPS}
MISSING = sorted(n for n, (ok, _) in AVAILABLE.items() if not ok)


def _root():
    if os.geteuid() != 0:
        pytest.skip("needs root: it mounts file systems")


def test_the_five_setups_of_the_issue_are_there():
    assert {"tmpfs", "ext4", "ext4-nojournal", "xfs", "btrfs"} <= set(sc.FS_SETUPS)
    assert "-O" in sc.FS_SETUPS["ext4-nojournal"].mkfs and "^has_journal" in sc.FS_SETUPS["ext4-nojournal"].mkfs
    assert all("noatime" in s.mount_options.split(",") for s in sc.FS_SETUPS.values())
    # the image is big enough for every setup's minimum and for MWUL's pre-creation
    size = sc.image_size_bytes()
    assert sc.GIB <= size <= sc.MAX_IMAGE and size % sc.GIB == 0
    inodes = int(sc.FS_SETUPS["ext4"].mkfs_command(size)[4])
    assert inodes == size // sc.BYTES_PER_INODE


@pytest.mark.parametrize("name", sorted(sc.FS_SETUPS))
def test_setup_runs_a_workload_and_leaves_nothing_mounted(name, e2e, scratch, tmp_path):
    ok, why = AVAILABLE[name]
    if not ok:
        pytest.skip(f"{name} is not available here: {why}")
    out = tmp_path / "out"
    p = lockscope("run", "MWRL", "--fs", name, "--workers", "1", "--duration", "0.5", "--warmup", "0.2",
                  "--no-probe", "--scratch", str(scratch), "--out", str(out), "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["fs"] == name and rec["ops"] > 0 and rec["per_worker"][0]["ops"] > 0
    d = rec["fs_detail"]
    assert d["setup"] == name and d["fstype"] == sc.FS_SETUPS[name].fstype and d["journal"]
    assert "noatime" in d["kernel_mount_options"].split(",")      # what the kernel says it mounted
    if sc.FS_SETUPS[name].needs_device:
        assert d["mkfs"][0].startswith("mkfs.") and d["mkfs"][-1] == d["device"]
        assert d["mkfs_options"] == d["mkfs"][1:-1]
        assert d["image_size_bytes"] >= sc.GIB and not d["user_device"]
    assert [f.name for f in scratch.iterdir()] == [sc.OWNED_MARK], "the point's directory is removed"


@pytest.mark.parametrize("name,journal", [("ext4", True), ("ext4-nojournal", False)])
def test_ext4_journal_or_not(name, journal, tmp_path):
    _root()
    root = tmp_path / "scratch"
    with sc.mounted(name, root, image_size=sc.GIB) as m:
        features = subprocess.run(["dumpe2fs", "-h", m.device], capture_output=True, text=True).stdout
        assert ("has_journal" in features) == journal
        assert m.describe()["image_size_bytes"] == sc.GIB
        assert sc.is_mounted(m.mountpoint)
    assert left_under(root) == {"mounts": [], "loop_devices": []}


def test_kernel_support_reads_the_real_kernel():
    ok, why = sc.kernel_support("ext4")
    assert ok and why in ("in /proc/filesystems", "module loaded (modprobe)")
    ok, why = sc.kernel_support("lockscope-nosuchfs")
    assert not ok and "not in /proc/filesystems" in why
    if os.geteuid() == 0 and sc.shutil.which("modprobe"):
        assert "`modprobe lockscope-nosuchfs` failed" in why


def test_doctor_and_list_report_each_setup(e2e):
    doc = json.loads(lockscope("doctor", "--json").stdout)
    fs = {f["name"]: f for f in doc["fs"]}
    assert set(fs) == set(sc.FS_SETUPS)
    for name, f in fs.items():
        assert f["ok"] == AVAILABLE[name][0] and f["ok"] == (f["kernel"] and f["tool"])
        assert "kernel: " in f["detail"]
    assert "mkfs.xfs" in fs["xfs"]["detail"] and "mkfs.btrfs" in fs["btrfs"]["detail"]
    listed = {f["name"]: f for f in json.loads(lockscope("list", "--json").stdout)["fs"]}
    for name in MISSING:
        assert listed[name]["available"] is False and listed[name]["reason"] == AVAILABLE[name][1]


@pytest.mark.skipif(not MISSING, reason="every file-system setup is available on this machine")
def test_sweep_skips_an_unavailable_setup_with_the_reason(e2e, scratch, tmp_path):
    missing = MISSING[0]
    why = AVAILABLE[missing][1]
    out = tmp_path / "out"
    p = lockscope("sweep", "--repeat", "1", "MWRL", "--fs", f"tmpfs,{missing}", "--workers", "1", "--duration", "0.5",
                  "--warmup", "0.2", "--no-probe", "--scratch", str(scratch), "--out", str(out), timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"warning: skipping file system '{missing}': {why}" in p.stderr
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["skipped_fs"] == {missing: why}
    assert manifest["points"] == ["MWRL-tmpfs-w1"]
    assert sorted(x.name for x in (out / "runs").iterdir()) == ["MWRL-tmpfs-w1.json"]


@pytest.mark.skipif(not MISSING, reason="every file-system setup is available on this machine")
def test_run_on_an_unavailable_setup_is_a_clear_error(tmp_path):
    missing = MISSING[0]
    p = lockscope("run", "MWRL", "--fs", missing, "--duration", "0.5", "--scratch", str(tmp_path / "s"),
                  "--out", str(tmp_path / "out"))
    assert p.returncode == 3 and "Traceback" not in p.stderr
    assert f"file system '{missing}' is not available here: {AVAILABLE[missing][1]}" in p.stderr
    assert "fix: " in p.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "s").exists()
    p = lockscope("sweep", "--repeat", "1", "MWRL", "--fs", missing, "--duration", "0.5", "--scratch", str(tmp_path / "s"),
                  "--out", str(tmp_path / "out"))
    assert p.returncode == 3 and "none of the file systems asked for is available here" in p.stderr


# ---- --device ------------------------------------------------------------

def _refused(tmp_path, *args):
    out, scr = tmp_path / "out", tmp_path / "scratch"
    p = lockscope("run", "MWRL", "--duration", "0.5", "--out", str(out), "--scratch", str(scr), *args, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and not out.exists() and not scr.exists()
    return p.stderr


@pytest.fixture
def loop_device(tmp_path):
    """An unmounted loop device over a small image file of the test's own."""
    _root()
    img = tmp_path / "dev.img"
    with open(img, "wb") as f:
        f.truncate(sc.GIB)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def test_device_needs_the_same_path_confirmed(tmp_path, loop_device):
    err = _refused(tmp_path, "--fs", "ext4", "--device", loop_device)
    assert "is formatted" in err and f"fix: add --yes-format-device {loop_device}" in err
    err = _refused(tmp_path, "--fs", "ext4", "--device", loop_device, "--yes-format-device", "/dev/null")
    assert "does not repeat --device" in err
    err = _refused(tmp_path, "--fs", "ext4", "--yes-format-device", loop_device)
    assert "without --device" in err
    err = _refused(tmp_path, "--fs", "tmpfs", "--device", loop_device, "--yes-format-device", loop_device)
    assert "--device is for disk file systems; tmpfs uses none" in err


def test_device_must_be_a_block_device(tmp_path):
    f = tmp_path / "not-a-device"
    f.write_bytes(b"\0" * 4096)
    err = _refused(tmp_path, "--fs", "ext4", "--device", str(f), "--yes-format-device", str(f))
    assert f"--device {f} is not a block device" in err
    err = _refused(tmp_path, "--fs", "ext4", "--device", str(tmp_path / "nope"),
                   "--yes-format-device", str(tmp_path / "nope"))
    assert "No such file or directory" in err


def test_a_mounted_device_is_refused(tmp_path):
    """Our own mounted loop device stands for a disk in use (formatting it by
    mistake would only lose this test's file system)."""
    _root()
    with sc.mounted("ext4", tmp_path / "own", image_size=sc.GIB) as m:
        err = _refused(tmp_path, "--fs", "xfs", "--device", m.device, "--yes-format-device", m.device)
        assert f"--device {m.device} is in use: mounted at {m.mountpoint}" in err
        assert sc.is_mounted(m.mountpoint)


def test_a_confirmed_free_device_is_formatted_and_used(e2e, scratch, tmp_path, loop_device):
    p = lockscope("run", "MWRL", "--fs", "xfs", "--device", loop_device, "--yes-format-device", loop_device,
                  "--workers", "1", "--duration", "0.5", "--warmup", "0.2", "--no-probe", "--scratch", str(scratch),
                  "--out", str(tmp_path / "out"), "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    d = rec["fs_detail"]
    assert rec["ops"] > 0 and d["device"] == os.path.realpath(loop_device) and d["user_device"] is True
    assert d["image"] is None and d["mkfs"][-1] == d["device"]
    blkid = subprocess.run(["blkid", "-o", "value", "-s", "TYPE", loop_device], capture_output=True, text=True)
    assert blkid.stdout.strip() == "xfs"
    assert not sc.is_mounted(Path(d["mountpoint"]))
