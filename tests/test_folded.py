"""Folded stacks of recorded real runs: totals match the probe's aggregates,
the lock-wait graph charges each lock exactly its table wait, frames are
clean function names outermost first, and the file format round-trips."""
import re

import pytest

from conftest import load
from lockscope.analyzer import folded
from lockscope.analyzer.kernel import naming


def renamed(rec):
    """The record with its locks recomputed from the raw aggregates it kept
    (the recording trims the raw data, not the lock table)."""
    window = int(rec.probe.window_s * 1e9)
    locks = naming.name_locks(rec.probe.raw, rec.workers, window)
    rec.locks = naming.add_sampled_spin(locks, rec.probe.raw, rec.workers, window)
    return rec


def by_leaf(stacks):
    out = {}
    for k, v in stacks.items():
        leaf = k.rsplit(";", 1)[-1]
        out[leaf] = out.get(leaf, 0) + v
    return out


def test_lock_wait_graph_charges_each_lock_its_wait():
    rec = renamed(load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2"))
    stacks = folded.fold(rec, "lockwait")
    leaves = by_leaf(stacks)
    top = rec.locks[0]
    assert top.name == "sb->s_vfs_rename_mutex of tmpfs at <scratch>"
    # unsampled waits are spread over the sampled stacks, none lost (µs, rounded per stack)
    assert leaves[top.name] == pytest.approx(top.wait_ns / 1e3, abs=len(stacks))
    assert sum(stacks.values()) == pytest.approx(sum(lk.wait_ns for lk in rec.locks) / 1e3, abs=len(stacks))
    heaviest = max(stacks, key=stacks.get)
    assert heaviest.split(";")[:4] == ["entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_rename",
                                       "do_renameat2"]


def test_lock_wait_graph_includes_sampled_rwsem_spin():
    rec = renamed(load("mwrm_mmap_tmpfs/mmap-none-w2"))
    top = rec.locks[0]
    assert top.lock_class == "mm->mmap_lock" and top.sampled_spin_ns > top.wait_ns / 2
    stacks = folded.fold(rec, "lockwait")
    assert by_leaf(stacks)[top.name] == pytest.approx(top.wait_ns / 1e3, abs=len(stacks))
    assert any(k.endswith(";rwsem_spin_on_owner;" + top.name) for k in stacks)


def test_cpu_graph_counts_every_kept_sample():
    rec = load("mwrm_mmap_tmpfs/mmap-none-w1")
    stacks = folded.fold(rec, "cpu")
    raw = rec.probe.raw.cpu_samples
    assert sum(stacks.values()) == sum(e.count for e in raw)
    user = sum(e.count for e in raw if e.stack == folded.STACK_USER)
    assert user > 0 and stacks["[user space]"] == user
    assert any(k.endswith("vm_mmap_pgoff;do_mmap;__mmap_region") for k in stacks)


def test_offcpu_graph_marks_state_and_lock_waits():
    rec = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    stacks = folded.fold(rec, "offcpu")
    raw = rec.probe.raw.offcpu
    assert sum(stacks.values()) == pytest.approx(sum(e.total_ns for e in raw) / 1e3, abs=len(stacks))
    in_lock = sum(e.total_ns for e in raw if e.in_lock_wait) / 1e3
    assert in_lock > 0
    assert by_leaf(stacks)["[in lock wait]"] == pytest.approx(in_lock, abs=len(stacks))
    assert "[preempted]" in by_leaf(stacks)
    assert any(";__mutex_lock;" in k and k.endswith("[in lock wait]") for k in stacks)


@pytest.mark.parametrize("kind", list(folded.KINDS))
def test_folded_format_is_clean_and_round_trips(kind):
    # holders: a record /3 with them (a mutex held across fdatasync)
    rec = load("holders_sync/holders-ext4-w2" if kind == "holders" else "mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    stacks = folded.fold(rec, kind)
    txt = folded.text(stacks)
    assert txt and folded.parse(txt) == stacks
    for line in txt.splitlines():
        assert re.fullmatch(r"\S.* \d+", line), line
        frames = line.rpartition(" ")[0].split(";")
        assert not any("+0x" in f or f.startswith("bpf_") for f in frames), line
    counts = [int(line.rpartition(" ")[2]) for line in txt.splitlines()]
    assert counts == sorted(counts, reverse=True)


def test_system_strings_cannot_break_the_format():
    rec = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    rec.locks[0].name = "evil;lock\nname"
    stacks = folded.fold(rec, "lockwait")
    assert any(k.endswith(";evil:lock name") for k in stacks)
    assert all("\n" not in k for k in stacks)


def test_a_record_without_probe_data_folds_to_nothing():
    rec = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    rec.probe.raw = None
    assert all(folded.fold(rec, k) == {} for k in folded.KINDS)


def test_holders_graph_charges_the_release_site():
    rec = load("holders_sync/holders-ext4-w2")
    stacks = folded.fold(rec, "holders")
    lock = next(lk for lk in rec.locks if lk.holders)
    assert sum(stacks.values()) == pytest.approx(sum(h.hold_ns for h in lock.holders) / 1e3, abs=len(stacks))
    top = max(stacks, key=stacks.get)
    assert top.endswith(f";flush_journal;{lock.name}"), top
