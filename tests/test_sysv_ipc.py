"""Issue 29: SysV IPC objects' locks named by their fields: a semaphore
set's, a message queue's, a shared memory segment's, and the IPC
namespace's ids rwsem.

A SysV semaphore's lock named by its field. A semaphore set is
kvmalloc'ed (struct sem_array with its trailing sems[] array) in a generic
kmalloc cache and reached by no file; the probe's slab lookup
(bpf_get_kmem_cache) gives the cache and the object's start, locks.toml
[slab_site] types a kmalloc object by the functions its lock's waits pass
through (`__do_semtimedop`, ...), and the kernel's BTF (the trailing
flexible array walked for its first elements) gives the field at the
offset: `sem_array.sems[0].lock`. Before: `spinlock @ __do_semtimedop`.
The recorded run (tests/data/sysvsem) is tests/programs/sysvsem.c, two
workers raising and lowering semaphore 0 of one set. A message queue
(`msg_queue`, by do_msgsnd/do_msgrcv) and a shared memory segment
(`shmid_kernel`, by do_shmat, shm_open, shm_close) are typed the same way
(tests/data/sysvmsg, sysvshm); the rwsem of the namespace's shm ids, which
every attach and detach takes, lies in `init_ipc_ns`, a static object
reached through each task's nsproxy->ipc_ns (the object iterator).
Checked against bpftrace per lock address (bench/README.md)."""
from __future__ import annotations

import re

import pytest

from conftest import load, run_program
from lockscope.analyzer.kernel import naming
from lockscope.analyzer.kernel.knowledge import default, own_functions
from lockscope.analyzer.kernel.slab import resolve as slab_resolve
from lockscope.model.probedata import Slab, SlabEntry

# named by kind and key (the programs use IPC_PRIVATE); the id is in the object
NAME = re.compile(r"sem_array\.sems\[0\]\.lock of a SysV semaphore set \(key IPC_PRIVATE\)")
MSG = re.compile(r"msg_queue\.q_perm\.lock of a SysV message queue \(key IPC_PRIVATE\)")
SHM = re.compile(r"shmid_kernel\.shm_perm\.lock of a SysV shared memory segment \(key IPC_PRIVATE\)")
OBJECT = re.compile(r"SysV [a-z ]+ \(key IPC_PRIVATE\), id \d+, a kmalloc-(cg-)?\d+ object")
SHM_IDS = "ipc_namespace->ids[2].rwsem of the initial IPC namespace"


def test_a_kmalloc_object_is_typed_by_the_functions_its_waits_pass_through():
    kb = default()
    assert kb.slab_type("kmalloc-cg-512", {"__do_semtimedop", "do_semtimedop"}) == "sem_array"
    assert kb.slab_type("kmalloc-512", {"semctl_main"}) == "sem_array"
    assert kb.slab_type("kmalloc-512", {"do_sys_openat2"}) is None          # another kmalloc object
    assert kb.slab_type("ext4_inode_cache", {"__do_semtimedop"}) == "ext4_inode_info"   # the cache says first
    assert kb.slab_type("dentry_cache_x", {"__do_semtimedop"}) is None      # only generic caches
    assert kb.slab_type("kmalloc-cg-256", {"do_msgrcv"}) == "msg_queue"
    assert kb.slab_type("kmalloc-cg-256", {"__shm_close", "remove_vma"}) == "shmid_kernel"


def test_a_kmalloc_object_too_small_for_the_struct_is_not_typed():
    """The slab sheaves' lock of a kmalloc-64 object, taken in an interrupt
    that came in during shmat, is neither typed by the interrupted system
    call's functions nor by a struct larger than the object."""
    slab = Slab(status="ok", entries=[
        SlabEntry(addr=0x1000, cache="kmalloc-64", size=64, object_size=64, base=0x1000),
        SlabEntry(addr=0x2000, cache="kmalloc-cg-256", size=256, object_size=256, base=0x2000,
                  # struct kern_ipc_perm: lock, deleted, id 32829 at 8, key 0x5100abcd at 12
                  head=(bytes(8) + (32829).to_bytes(4, "little") + (0x5100abcd).to_bytes(4, "little")
                        + bytes(16)).hex())])
    irq = ["_raw_spin_lock_irqsave+0x4d", "barn_put_empty_sheaf+0x1c", "rcu_do_batch+0x1b7", "handle_softirqs+0xcd",
           "asm_sysvec_apic_timer_interrupt+0x16", "do_shmat+0x508", "__x64_sys_shmat+0x2e"]
    assert own_functions(irq) == ["_raw_spin_lock_irqsave", "barn_put_empty_sheaf", "rcu_do_batch"]
    out = slab_resolve(slab, functions={0x1000: {"do_shmat", "__shm_open"}, 0x2000: {"do_shmat"}})
    typed = {e.addr: (e.type, e.lock_field) for e in out.entries}
    assert typed[0x1000] == (None, None)                     # shmid_kernel is 256 bytes here
    assert typed[0x2000] == ("shmid_kernel", "shmid_kernel.shm_perm.lock")
    # the key and id, from the object's first bytes (ipcs -m shows the same)
    shm = out.entries[1]
    assert (shm.object, shm.object_id) == ("SysV shared memory segment (key 0x5100abcd)", 32829)


def test_the_recorded_run_names_the_semaphores_own_lock():
    rec = load("sysvsem/sysvsem-none-w2")
    locks = naming.name_locks(rec.probe.raw, rec.workers, int(rec.probe.window_s * 1e9))
    sem = [lk for lk in locks if NAME.fullmatch(lk.name)]
    assert sem and sem[0].tier == "verified" and sem[0].kind == "spinlock", [lk.name for lk in locks[:6]]
    assert sem[0] is locks[0] or sem[0].wait_share > 0.01, [(lk.name, lk.wait_share) for lk in locks[:6]]
    assert OBJECT.fullmatch(sem[0].object), sem[0].object
    assert not [lk for lk in locks if "__do_semtimedop" in lk.name], [lk.name for lk in locks]


def test_the_recorded_runs_name_a_message_queues_and_a_segments_locks():
    rec = load("sysvmsg/sysvmsg-none-w2")
    locks = naming.name_locks(rec.probe.raw, rec.workers, int(rec.probe.window_s * 1e9))
    assert MSG.fullmatch(locks[0].name) and locks[0].tier == "verified", [lk.name for lk in locks[:4]]
    assert OBJECT.fullmatch(locks[0].object), locks[0].object
    rec = load("sysvshm/sysvshm-none-w4")
    locks = naming.name_locks(rec.probe.raw, rec.workers, int(rec.probe.window_s * 1e9))
    top = {lk.name: lk for lk in locks[:4]}
    assert SHM_IDS in top and top[SHM_IDS].kind == "rwsem" and top[SHM_IDS].tier == "verified", list(top)
    assert any(SHM.fullmatch(n) and lk.tier == "verified" for n, lk in top.items()), list(top)
    assert not [lk for lk in locks if "do_shmat" in lk.name or "do_msgsnd" in lk.name], [lk.name for lk in locks]


@pytest.mark.e2e
def test_a_message_queue_and_a_segment_are_named_end_to_end(tmp_path):
    (tmp_path / "msg").mkdir()
    (tmp_path / "shm").mkdir()
    rec = run_program("sysvmsg", tmp_path / "msg", "2")
    assert MSG.fullmatch(rec.locks[0].name) and rec.locks[0].tier == "verified", \
        [(lk.name, lk.wait_share) for lk in rec.locks[:5]]
    rec = run_program("sysvshm", tmp_path / "shm", "2", workers="4")
    names = [lk.name for lk in rec.locks]
    assert any(SHM.fullmatch(n) for n in names[:4]), names[:6]
    # the ids rwsem is named wherever it was waited on: never a static lock "taken in do_shmat"
    assert not [n for n in names if "do_shmat" in n or "__shm_close" in n], names


@pytest.mark.e2e
def test_sysvsem_names_the_semaphores_lock_end_to_end(tmp_path):
    rec = run_program("sysvsem", tmp_path, "2")
    assert any(NAME.fullmatch(lk.name) and lk.tier == "verified" for lk in rec.locks[:3]), \
        [(lk.name, lk.wait_share) for lk in rec.locks[:5]]
