"""End to end on the real kernel: every row of GROUND_TRUTH.md (tmpfs, and
mmap) at 2 workers names the known culprit lock, verified by address."""
import json

import pytest

from conftest import lockscope

# workload, fs, lock class, kind, object (None: not checked), must lead
ROWS = [
    ("MWRM", "tmpfs", "sb->s_vfs_rename_mutex", "mutex", None, True),
    ("DWOM", "tmpfs", "inode->i_rwsem", "rwsem", "<scratch>/share/file", True),
    ("MWCM", "tmpfs", "inode->i_rwsem", "rwsem", "<scratch>/share", True),
    # small at 2 cores and not always the top lock: present and named
    ("MWCL", "tmpfs", "sb->s_inode_list_lock", "spinlock", None, False),
    ("mmap", "none", "mm->mmap_lock", "rwsem", None, True),
    # the same culprit on a disk file system on a loop device
    ("MWRM", "ext4", "sb->s_vfs_rename_mutex", "mutex", None, True),
    ("DWOM", "ext4", "inode->i_rwsem", "rwsem", "<scratch>/share/file", True),
    ("MWCM", "ext4", "inode->i_rwsem", "rwsem", "<scratch>/share", True),
]


@pytest.mark.e2e
@pytest.mark.parametrize("workload,fs,cls,kind,obj,lead", ROWS, ids=[f"{r[0]}-{r[1]}" for r in ROWS])
def test_names_the_known_culprit(tmp_path, e2e, scratch, workload, fs, cls, kind, obj, lead):
    args = [workload] + (["--fs", fs] if fs != "none" else [])
    rec = json.loads(lockscope("run", *args, "--workers", "2", "--duration", "1.5", "--warmup", "0.5",
                               "--out", str(tmp_path / "out"), "--scratch", str(scratch),
                               "--json").stdout)
    assert rec["workload"] == workload and rec["fs"] == fs and rec["workers"] == 2
    assert rec["ops"] > 0 and rec["ops_per_sec"] > 0
    assert [w["ops"] > 0 for w in rec["per_worker"]] == [True, True]
    assert rec["probe"]["attached"] and 1.0 < rec["probe"]["window_s"] < 3.0
    lost = {k: v for k, v in rec["probe"]["counters"].items() if k.startswith("lost_") and v}
    assert not lost, lost
    named = [lk for lk in rec["locks"] if lk["class"] == cls]
    assert named, f"{cls} not among {[lk['name'] for lk in rec['locks'][:8]]}"
    lock = named[0]
    assert lock["tier"] == "verified" and lock["kind"] == kind and lock["instances"] == 1
    assert lock["count"] > 0 and lock["wait_ns"] > 0
    if obj:
        assert lock["object"] == obj
    if lead:
        assert rec["locks"][0]["class"] == cls, [lk["name"] for lk in rec["locks"][:5]]
        assert lock["wait_share"] > 0.02
    # the record is on disk too, where analyze and report find it
    on_disk = json.loads((tmp_path / "out" / "runs" / f"{rec['id']}.json").read_text())
    assert on_disk["locks"][0]["name"] == rec["locks"][0]["name"]


@pytest.mark.e2e
def test_profiles_any_command_with_fork_following(tmp_path, e2e, scratch):
    """`run -- CMD`: {n} and {dir} substituted, the command's children (the
    driver forks its workers) followed, the locks named."""
    from lockscope import paths
    driver = str(paths.workload_binary())
    p = lockscope("run", "--fs", "tmpfs", "--workers", "2", "--duration", "20", "--name", "mwrm-cmd",
                  "--out", str(tmp_path / "out"), "--scratch", str(scratch), "--json", "--",
                  driver, "run", "--workload", "MWRM", "--dir", "{dir}", "--workers", "{n}",
                  "--duration", "1", "--warmup", "0.2")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["kind"] == "command" and rec["workload"] == "mwrm-cmd" and rec["fs"] == "tmpfs"
    assert rec["command"][5] == rec["fs_detail"]["mountpoint"] and rec["command"][7] == "2"
    assert rec["ops"] == 1 and rec["throughput_unit"] == "runs/s"
    assert rec["ops_per_sec"] == pytest.approx(1 / rec["duration_s"])
    assert rec["probe"]["counters"]["forks_tracked"] >= 2
    assert rec["locks"][0]["class"] == "sb->s_vfs_rename_mutex" and rec["locks"][0]["tier"] == "verified"


@pytest.mark.e2e
def test_command_throughput_from_its_output(tmp_path, e2e, scratch):
    from lockscope import paths
    p = lockscope("run", "--fs", "tmpfs", "--workers", "1", "--out", str(tmp_path / "out"),
                  "--scratch", str(scratch), "--json", "--throughput-regex", r'"ops_per_sec":([0-9.e+]+)', "--",
                  str(paths.workload_binary()), "run", "--workload", "MWRL", "--dir", "{dir}",
                  "--workers", "{n}", "--duration", "0.5", "--warmup", "0.1")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["throughput_unit"] == "ops/s (from the command's output)"
    assert rec["ops_per_sec"] > 1000 and rec["ops"] is None


@pytest.mark.e2e
def test_a_failing_command_is_an_error_with_its_output(tmp_path, e2e, scratch):
    p = lockscope("run", "--workers", "1", "--out", str(tmp_path / "out"), "--scratch", str(scratch),
                  "--", "/bin/sh", "-c", "echo broken >&2; exit 3")
    assert p.returncode == 1
    assert "exited with code 3: broken" in p.stderr
    assert not (tmp_path / "out" / "runs").exists()
