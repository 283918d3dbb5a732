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


@pytest.fixture(scope="module")
def swept(e2e, tmp_path_factory):
    """The rows measured once, as one sweep (the probes stay loaded from one
    point to the next: each point must hold its own workers' waits only),
    and what was left mounted under its scratch root after it."""
    from conftest import left_under
    tmp = tmp_path_factory.mktemp("ground_truth")
    out, scratch = tmp / "out", tmp / "scratch"
    p = lockscope("sweep", "MWRM,DWOM,MWCM,MWCL,mmap", "--fs", "tmpfs,ext4", "--workers", "2", "--repeat", "1",
                  "--duration", "1.5", "--warmup", "0.5", "--out", str(out), "--scratch", str(scratch), timeout=600)
    assert p.returncode == 0, p.stderr
    return out, left_under(scratch)


@pytest.mark.e2e
@pytest.mark.parametrize("workload,fs,cls,kind,obj,lead", ROWS, ids=[f"{r[0]}-{r[1]}" for r in ROWS])
def test_names_the_known_culprit(e2e, swept, workload, fs, cls, kind, obj, lead):
    out, left = swept
    assert not left["mounts"] and not left["loop_devices"], f"left behind: {left}"
    rec = json.loads((out / "runs" / f"{workload}-{fs}-w2.json").read_text())
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
    # the point's own workers only: no other point's culprit (the sweep's probes stayed loaded)
    others = {c for w, _, c, *_ in ROWS if w != workload and c != cls}
    assert not others & {lk["class"] for lk in rec["locks"]}, [lk["name"] for lk in rec["locks"][:8]]
    assert {t["tgid"] for t in rec["probe"]["raw"]["tasks"]} == {w["pid"] for w in rec["per_worker"]}


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


@pytest.mark.e2e
def test_dwsl_on_ext4_waits_on_the_journal_not_a_file_lock(tmp_path, e2e, scratch):
    """DWSL (overwrite + fsync of a private file) on ext4: the waits are the
    journal's (jbd2 commit waits off-CPU, or a journal lock), not a lock of
    the file, which no other worker touches."""
    rec = json.loads(lockscope("run", "DWSL", "--fs", "ext4", "--workers", "2", "--duration", "1.5",
                               "--warmup", "0.5", "--out", str(tmp_path / "out"), "--scratch", str(scratch),
                               "--json").stdout)
    assert rec["ops"] > 0 and all(w["ops"] > 0 for w in rec["per_worker"])
    journal_offcpu = sum(o["wait_share"] for o in rec["offcpu"] if o["class"] == "journal commit wait")
    journal_locks = sum(lk["wait_share"] for lk in rec["locks"]
                        if "journal" in lk["name"] or lk["class"].startswith(("journal_t->", "journal->")))
    file_locks = sum(lk["wait_share"] for lk in rec["locks"] if (lk["object"] or "").startswith("<scratch>/w"))
    assert journal_offcpu + journal_locks > 0.01, (journal_offcpu, journal_locks)
    assert journal_offcpu + journal_locks > 5 * file_locks
    # the heaviest non-lock waits are the fsync path's, classified by stack
    classes = {o["class"] for o in rec["offcpu"][:4]}
    assert classes & {"journal commit wait", "block I/O", "page lock / writeback"}, classes
