"""Kernel lock names on recorded real runs (ext4 on a loop device): locks
verified through sb->s_fs_info (ext4, jbd2), per task (runqueue, pi_lock),
inside slab objects (bpf_get_kmem_cache + BTF field), off-CPU classes, and
the named share."""
import platform
from pathlib import Path

import pytest

from conftest import load
from lockscope.analyzer.kernel import btf, naming, slab
from lockscope.analyzer.kernel.knowledge import default
from lockscope.model.jsondata import format_addr, parse_addr
from lockscope.model.probedata import SlabEntry


def names(rec):
    window = int(rec.probe.window_s * 1e9)
    locks = naming.name_locks(rec.probe.raw, rec.workers, window)
    return naming.add_sampled_spin(locks, rec.probe.raw, rec.workers, window)


def lock(locks, name):
    [lk] = [lk for lk in locks if lk.name == name]
    return lk


def wait_at(raw, addr):
    return sum(e.total_ns for e in raw.contention if e.lock == parse_addr(addr))


def test_mwul_ext4_journal_checkpoint_mutex_and_orphan_lock_are_verified():
    rec = load("ext4_journal/MWUL-ext4-w2")
    raw = rec.probe.raw
    locks = names(rec)
    top = locks[0]
    assert top.name == "journal_t->j_checkpoint_mutex of ext4 at <scratch>"
    assert (top.tier, top.kind, top.instances) == ("verified", "mutex", 1)
    ext4_files = [f for f in raw.objects.files if f.fstype == "ext4" and f.addresses.get("jbd2_j_checkpoint_mutex")]
    assert ext4_files and top.addresses == [format_addr(ext4_files[0].addresses["jbd2_j_checkpoint_mutex"])]
    assert top.wait_ns == wait_at(raw, top.addresses[0]) > 0
    assert "__jbd2_log_wait_for_space" in top.stacks[0].frames
    orphan = lock(locks, "ext4_sb_info->s_orphan_lock of ext4 at <scratch>")
    assert orphan.tier == "verified" and orphan.kind == "mutex"
    assert orphan.addresses == [format_addr(ext4_files[0].addresses["ext4_s_orphan_lock"])]
    assert "ext4_orphan_add" in orphan.stacks[0].frames or "ext4_orphan_del" in orphan.stacks[0].frames


def test_ext4_inode_raw_lock_in_slab_objects_is_named_by_btf_field():
    rec = load("ext4_journal/MWUL-ext4-w2")
    raw = rec.probe.raw
    assert raw.slab.status == "ok"
    raw_lock = lock(names(rec), "ext4_inode_info.i_raw_lock (ext4_inode_cache object)")
    assert raw_lock.tier == "verified" and raw_lock.kind == "spinlock"
    # one name, many inodes: every address lies in an ext4_inode_cache object
    # at the same offset, the offset of the field
    assert raw_lock.instances > 1
    entries = {e.addr: e for e in raw.slab.entries}
    offsets = {entries[parse_addr(a)].offset for a in raw_lock.addresses}
    assert len(offsets) == 1
    for a in raw_lock.addresses:
        e = entries[parse_addr(a)]
        assert e.cache == "ext4_inode_cache" and e.type == "ext4_inode_info"
        assert parse_addr(a) - e.base == e.offset and e.offset < e.object_size
    assert raw_lock.stacks[0].site == "ext4_mark_iloc_dirty"


def test_slab_field_must_match_the_lock_family():
    e = SlabEntry(addr=0x10, cache="ext4_inode_cache", lock_field="ext4_inode_info.i_raw_lock", lock="spinlock")
    assert naming._slab_verified(e, "spinlock").name == "ext4_inode_info.i_raw_lock (ext4_inode_cache object)"
    # a rwsem wait cannot be a spinlock field: the object base was wrong
    assert naming._slab_verified(e, "rwsem") is None
    assert slab.consistent("seqlock", "spinlock") and not slab.consistent("mutex", "rwsem")


def test_mwcl_ext4_journal_list_lock_runqueues_and_bdev_slab_lock():
    rec = load("ext4_journal/MWCL-ext4-w2")
    locks = names(rec)
    jl = lock(locks, "journal_t->j_list_lock of ext4 at <scratch>")
    assert jl.tier == "verified" and jl.kind == "spinlock"
    rq = [lk for lk in locks if lk.lock_class == "rq->__lock" and lk.tier == "verified"]
    assert rq and all(lk.name.startswith("rq->__lock (runqueue of CPU ") for lk in rq)
    tasks = rec.probe.raw.objects.tasks
    by_cpu = {t.addresses["rq_lock"]: t.cpu for t in tasks if t.addresses.get("rq_lock")}
    for lk in rq:
        assert lk.name == f"rq->__lock (runqueue of CPU {by_cpu[parse_addr(lk.addresses[0])]})"
    bdev = lock(locks, "bdev_inode.vfs_inode.i_data.i_private_lock (bdev_cache object)")
    assert bdev.tier == "verified"


def test_fsync_command_journal_state_lock_and_offcpu_classes():
    rec = load("ext4_fsync/ext4-fsync-ext4-w2")
    locks = names(rec)
    js = lock(locks, "journal_t->j_state_lock of ext4 at <scratch>")
    assert (js.tier, js.kind) == ("verified", "rwlock")
    window = int(rec.probe.window_s * 1e9)
    off = naming.offcpu_summary(rec.probe.raw, rec.workers, window)
    classes = {}
    for o in off:  # heaviest first
        classes.setdefault(o.wait_class, o)
    assert classes["journal commit wait"].site == "jbd2_log_wait_commit"
    assert "page lock / writeback" in classes and "child/signal wait" in classes
    # every span is classified, none left to the bare task state here
    assert not {"blocked", "sleep", "other"} & set(classes)


def test_classify_offcpu_by_stack_and_state():
    c = naming.classify_offcpu
    io = ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit", "out_of_line_wait_on_bit",
          "__ext4_get_inode_loc"]
    assert c(io, 2) == "block I/O"
    assert c(["__schedule", "schedule", "jbd2_log_wait_commit", "ext4_sync_file"], 2) == "journal commit wait"
    # syncs at 10,000 tasks: handles wait for the locked transaction (wait_transaction_locked inlined)
    assert c(["finish_task_switch.isra.0+0x93", "__schedule+0x3d4", "schedule+0x23", "add_transaction_credits+0x29c",
              "start_this_handle+0x11e", "jbd2__journal_start+0x11a"], 2) == "journal commit wait"
    assert c(["__schedule", "schedule", "io_schedule", "folio_wait_bit_common", "folio_wait_writeback",
              "__filemap_fdatawait_range"], 2) == "page lock / writeback"
    assert c(["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "__wait_rcu_gp",
              "synchronize_rcu_normal"], 2) == "RCU synchronize"
    assert c(["__schedule", "schedule", "anon_pipe_read", "vfs_read"], 1) == "pipe/socket wait"
    assert c(["__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep"], 1) == "sleep"
    assert c(["__schedule", "schedule", "futex_wait_queue", "__futex_wait"], 1) == "futex wait"
    # runnable: preempted whatever the stack; unknown stacks: the task state
    assert c(io, 0) == "preempted"
    assert c(["__schedule", "schedule", "some_driver_wait"], 2) == "blocked"
    assert c(["__schedule", "schedule", "some_driver_wait"], 1) == "sleep"


def test_named_share_counts_verified_and_inferred_wait():
    rec = load("ext4_fsync/ext4-fsync-ext4-w2")
    locks = names(rec)
    total = sum(lk.wait_ns for lk in locks)
    named = sum(lk.wait_ns for lk in locks if lk.tier in ("verified", "inferred"))
    assert naming.named_share(locks) == pytest.approx(named / total) and naming.named_share(locks) >= 0.95
    site = [lk for lk in locks if lk.tier == "site"]
    if site:  # a bare call site counts against the share
        assert naming.named_share(locks) < 1
    assert naming.named_share([]) is None


def test_new_inferred_rules_carry_component_explanation_and_reference():
    kb = default()
    wanted = {"rename_lock", "mount_lock", "inode_hash_lock", "runqueue lock (rq->__lock)", "task->pi_lock",
              "zone->lock (page allocator)", "lruvec->lru_lock", "journal->j_state_lock", "jiffies_lock",
              "sb->s_inode_list_lock", "sbi->cp_rwsem (f2fs)", "nm_i->nat_tree_lock (f2fs)",
              "sit_i->sentry_lock (f2fs)", "btrfs_tree_lock (extent buffer lock)", "cil->xc_ctx_lock (xfs)",
              "pcpu_alloc_mutex", "worker_pool->lock (workqueue)", "socket lock (sk->sk_lock.slock)"}
    rules = {r.name: r for r in kb.rules}
    assert wanted <= set(rules)
    for r in rules.values():
        assert r.component and r.explain and r.ref, r.name
    assert kb.infer("spinlock", ["_raw_spin_lock", "tick_do_update_jiffies64", "tick_nohz_handler"]).name == \
        "jiffies_lock"


@pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs kernel BTF at /sys/kernel/btf/vmlinux")
def test_btf_field_at_offset_on_this_kernel():
    rec = load("ext4_journal/MWUL-ext4-w2")
    if rec.host.kernel != platform.release():
        pytest.skip(f"recorded on kernel {rec.host.kernel}, this is {platform.release()}")
    e = next(e for e in rec.probe.raw.slab.entries if e.lock_field)
    try:
        assert btf.lock_at(e.type, e.offset) == (e.lock_field, e.lock)
    except btf.BtfUnavailable as err:
        pytest.skip(str(err))
    assert btf.lock_at("ext4_inode_info", e.offset + 1) is None
