"""The table of lock fields (analyzer/kernel/lockfields.toml) and what is generated
from it agree: the header's struct members and BPF reads
(probes/gen_lockfields.py), the keys the loader emits (probes/objects.c, run
on a record with every field set) and the naming table; and adding a field
is one edit of the table."""
from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, REPO, load
from lockscope.analyzer.kernel import lockfields, naming
from lockscope.model.jsondata import from_dict
from lockscope.model.probedata import RawProbe

PROBES = REPO / "probes"
ARCH = {"x86_64": "x86", "aarch64": "arm64", "ppc64le": "powerpc", "s390x": "s390"}
# keys of the iterators' records that are not lock fields
NOT_LOCKS = {"file": {"path", "tgid", "fd", "ino", "mode", "dev", "fstype", "inode", "sb", "parent_inode",
                      "parent_ino",
                      # the objects behind the file (analyzer/kernel/objlocks.py)
                      "file", "f_release", "private_data", "i_flctx", "s_fs_info", "sk", "sk_family",
                      "sk_type", "sk_protocol", "saddr", "sport", "daddr", "dport", "unix_path"},
             "task": {"tgid", "pid", "ppid", "comm", "mm", "cpu",   # ppid: the parent (issue 44)
                      # the objects the thread holds (analyzer/kernel/objlocks.py)
                      "task", "signal", "files", "fs", "sighand",
                      # its IPC namespace and its working directory's file system (issue 29)
                      "ipc_ns", "cwd_sb", "cwd_fs_info", "cwd_dev", "cwd_fstype"}}
NEW_FIELD = '''
[[field]]
key = "xfs_i_ioend_lock"
base = "xfs_inode"
member = "i_ioend_lock"
type = "spinlock"
class = "xfs_inode->i_ioend_lock"
named = "file"
fstype = "xfs"
component = "xfs inode"
explain = "xfs per-inode list of completed writeback I/O"
'''
# objects.c with one file and one thread whose lock fields are 1, 2, ... in
# table order, emitted as JSON
HARNESS = r'''
#include "objects.c"

int main(void)
{
	struct jw w = { .f = stdout };
	__u64 n = 0;

	if (objects_init())
		return 1;
#define SET_FILE(k) files[0].r.k = ++n;
#define SET_TASK(k) tasks[0].k = ++n;
	LOCKFIELD_KEYS_FILE(SET_FILE)
	LOCKFIELD_KEYS_TASK(SET_TASK)
	nfiles = ntasks = 1;
	jw_obj(&w);
	objects_json(&w);
	jw_obj_end(&w);
	return 0;
}
'''


def generate(table: Path, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = subprocess.run([sys.executable, str(PROBES / "gen_lockfields.py"), str(table)], check=True,
                          capture_output=True, text=True).stdout
    (out / "lockfields.h").write_text(text)
    return text


def x_list(header: str, record: str) -> list[str]:
    body = re.search(rf"#define LOCKFIELD_KEYS_{record.upper()}\(X\)((?:.*\\\n)*.*\n)", header).group(1)
    return re.findall(r"X\((\w+)\)", body)


def base_macro(header: str, base: str) -> str:
    return re.search(rf"#define LOCKFIELDS_{base.upper()}\(r, p\) do {{((?:.*\\\n)*)}} while \(0\)", header).group(1)


def emitted(tmp: Path, header_dir: Path) -> dict:
    """objects_json's output for a record with every lock field set."""
    if not shutil.which("cc"):
        pytest.skip("no C compiler")
    if not (header_dir / "proberows.h").exists():    # common_types.h's other generated header, as the build writes it
        from lockscope import proberows
        (header_dir / "proberows.h").write_text(proberows.c_header(proberows.load()))
    src = tmp / "emit.c"
    src.write_text(HARNESS)
    exe = tmp / "emit"
    subprocess.run(["cc", "-D_GNU_SOURCE", "-Wall", "-Werror", f"-I{header_dir}", f"-I{PROBES}", str(src),
                    str(PROBES / "bpfutil.c"), "-o", str(exe), "-lbpf", "-lelf", "-lz"], check=True, capture_output=True, text=True)
    return json.loads(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)["objects"]


@pytest.fixture
def shipped(tmp_path):
    table = lockfields.default()
    return table, generate(lockfields.TABLE_FILE, tmp_path / "gen")


def test_every_field_has_a_class_component_and_explanation():
    table = lockfields.default()
    assert len(table.fields) >= 45
    for f in table.fields:
        assert f.lock_class and f.component and f.explain, f.key
        assert f.named in lockfields.NAMED and f.type in lockfields.LOCK_TYPES


def test_header_members_and_bpf_reads_follow_the_table(shipped):
    table, header = shipped
    for record in lockfields.RECORDS:
        assert x_list(header, record) == [f.key for f in table.of_record(record)]
    for f in table.fields:
        assert f"(r)->{f.key} = LOCKFIELD_ADDR(p, {f.member});" in base_macro(header, f.base.name), f.key
    assert "struct mm_struct___old {\n\tstruct rw_semaphore mmap_sem;\n}" in header


def test_loader_emits_every_lock_field_under_its_key(shipped, tmp_path):
    table, _ = shipped
    objects = emitted(tmp_path, tmp_path / "gen")
    n = 0
    for record, got in (("file", objects["files"][0]), ("task", objects["tasks"][0])):
        locks = {k: v for k, v in got.items() if k not in NOT_LOCKS[record]}
        keys = [f.key for f in table.of_record(record)]
        assert list(locks) == keys
        assert list(locks.values()) == [f"0x{i:x}" for i in range(n + 1, n + 1 + len(keys))]
        n += len(keys)


def test_recorded_runs_name_only_fields_of_the_table():
    table = lockfields.default()
    keys = {r: {f.key for f in table.of_record(r)} for r in lockfields.RECORDS}
    seen = {"file": set(), "task": set()}
    for path in DATA.glob("*/runs/*.json"):
        objects = json.loads(path.read_text()).get("probe", {}).get("raw", {}).get("objects", {})
        for record in lockfields.RECORDS:
            for entry in objects.get(record + "s", []):
                seen[record] |= set(entry) - NOT_LOCKS[record]
    assert seen["file"] and seen["task"]
    for record in lockfields.RECORDS:
        assert seen[record] <= keys[record]


def test_sleeping_lock_classes_come_from_the_lock_type():
    sleeping = lockfields.default().sleeping_types()
    assert sleeping["inode->i_rwsem"] == "rw_semaphore"
    assert sleeping["sb->s_vfs_rename_mutex"] == "mutex"
    assert "journal_t->j_state_lock" not in sleeping     # an rwlock_t


def xfs_file(key: str) -> dict:
    return {"path": "/mnt/x/f", "fstype": "xfs", "mode": 0o100644, "dev": 7, key: "0x1000"}


def test_adding_a_field_is_one_edit(tmp_path, monkeypatch):
    table_file = tmp_path / "lockfields.toml"
    table_file.write_text(lockfields.TABLE_FILE.read_text() + NEW_FIELD)
    header = generate(table_file, tmp_path / "gen")
    # a struct member, a BPF assignment, an emitted key, a naming entry
    assert x_list(header, "file")[-1] == "xfs_i_ioend_lock"
    assert "(r)->xfs_i_ioend_lock = LOCKFIELD_ADDR(p, i_ioend_lock);" in base_macro(header, "xfs_inode")
    assert list(emitted(tmp_path, tmp_path / "gen")["files"][0])[-1] == "xfs_i_ioend_lock"
    monkeypatch.setattr(lockfields, "default", lambda: lockfields.load(table_file))
    raw = {"mounts": {"7": "/mnt/x"}, "objects": {"files": [xfs_file("xfs_i_ioend_lock")]}}
    v = naming.verified_table(from_dict(RawProbe, raw))[0x1000]
    assert v == naming.Verified("xfs_inode->i_ioend_lock", "xfs_inode->i_ioend_lock of /mnt/x/f (xfs, file)",
                                "/mnt/x/f", "xfs inode", "xfs per-inode list of completed writeback I/O")


def test_a_new_field_compiles_into_the_bpf_object(tmp_path):
    vmlinux = PROBES / "build" / "vmlinux.h"
    if not shutil.which("clang") or not vmlinux.exists():
        pytest.skip("needs clang and probes/build/vmlinux.h (make -C probes)")
    table_file = tmp_path / "lockfields.toml"
    table_file.write_text(lockfields.TABLE_FILE.read_text() + NEW_FIELD)
    generate(table_file, tmp_path / "gen")
    arch = ARCH.get(platform.machine(), "x86")
    subprocess.run(["clang", "-g", "-O2", "-target", "bpf", f"-D__TARGET_ARCH_{arch}", f"-I{tmp_path / 'gen'}",
                    f"-I{PROBES / 'build'}", f"-I{PROBES}", "-Wall", "-Werror", "-c", str(PROBES / "objects.bpf.c"),
                    "-o", str(tmp_path / "objects.bpf.o")], check=True, capture_output=True, text=True)


def test_a_field_of_another_file_system_is_not_named_on_this_one():
    raw = {"objects": {"files": [{**xfs_file("ext4_i_data_sem"), "fstype": "btrfs"}]}}
    assert naming.verified_table(from_dict(RawProbe, raw)) == {}


def test_a_bad_entry_is_refused(tmp_path):
    table_file = tmp_path / "lockfields.toml"
    table_file.write_text(lockfields.TABLE_FILE.read_text() + NEW_FIELD.replace('"xfs_inode"', '"xfs_inod"'))
    with pytest.raises(ValueError, match="xfs_inod"):
        lockfields.load(table_file)


def test_verified_locks_carry_the_tables_component_and_explanation():
    rec = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    locks = naming.name_locks(rec.probe.raw, rec.workers, int(rec.probe.window_s * 1e9))
    # one class can be several fields (a file's d_lock, its parent's)
    by_class: dict[str, set] = {}
    for f in lockfields.default().fields:
        by_class.setdefault(f.lock_class, set()).add((f.component, f.explain))
    verified = [lk for lk in locks if lk.tier == "verified" and lk.lock_class in by_class]
    assert any(lk.name == "sb->s_vfs_rename_mutex of tmpfs at <scratch>" for lk in verified)
    for lk in verified:
        assert (lk.component, lk.explain) in by_class[lk.lock_class], lk.name
    waits = [lk for lk in locks if lk.tier == "verified" and lk.lock_class.endswith(".wait_lock")]
    for lk in waits:
        assert lk.component in {c for c, _ in by_class[lk.lock_class[:-len(".wait_lock")]]}
        assert lk.explain.startswith("the spinlock of the waiter list inside ")
