"""Issue 29: a SysV semaphore's lock named by its field. A semaphore set is
kvmalloc'ed (struct sem_array with its trailing sems[] array) in a generic
kmalloc cache and reached by no file; the probe's slab lookup
(bpf_get_kmem_cache) gives the cache and the object's start, locks.toml
[slab_site] types a kmalloc object by the functions its lock's waits pass
through (`__do_semtimedop`, ...), and the kernel's BTF (the trailing
flexible array walked for its first elements) gives the field at the
offset: `sem_array.sems[0].lock`. Before: `spinlock @ __do_semtimedop`.
The recorded run (tests/data/sysvsem) is tests/programs/sysvsem.c, two
workers raising and lowering semaphore 0 of one set."""
from __future__ import annotations

import re

import pytest

from conftest import load, run_program
from lockscope.analyzer.kernel import naming
from lockscope.analyzer.kernel.knowledge import default

NAME = re.compile(r"sem_array\.sems\[0\]\.lock \(kmalloc-(cg-)?\d+ object\)")


def test_a_kmalloc_object_is_typed_by_the_functions_its_waits_pass_through():
    kb = default()
    assert kb.slab_type("kmalloc-cg-512", {"__do_semtimedop", "do_semtimedop"}) == "sem_array"
    assert kb.slab_type("kmalloc-512", {"semctl_main"}) == "sem_array"
    assert kb.slab_type("kmalloc-512", {"do_sys_openat2"}) is None          # another kmalloc object
    assert kb.slab_type("ext4_inode_cache", {"__do_semtimedop"}) == "ext4_inode_info"   # the cache says first
    assert kb.slab_type("dentry_cache_x", {"__do_semtimedop"}) is None      # only generic caches


def test_the_recorded_run_names_the_semaphores_own_lock():
    rec = load("sysvsem/sysvsem-none-w2")
    locks = naming.name_locks(rec.probe.raw, rec.workers, int(rec.probe.window_s * 1e9))
    sem = [lk for lk in locks if NAME.fullmatch(lk.name)]
    assert sem and sem[0].tier == "verified" and sem[0].kind == "spinlock", [lk.name for lk in locks[:6]]
    assert sem[0] is locks[0] or sem[0].wait_share > 0.01, [(lk.name, lk.wait_share) for lk in locks[:6]]
    assert not [lk for lk in locks if "__do_semtimedop" in lk.name], [lk.name for lk in locks]


@pytest.mark.e2e
def test_sysvsem_names_the_semaphores_lock_end_to_end(tmp_path):
    rec = run_program("sysvsem", tmp_path, "2")
    assert any(NAME.fullmatch(lk.name) and lk.tier == "verified" for lk in rec.locks[:3]), \
        [(lk.name, lk.wait_share) for lk in rec.locks[:5]]
