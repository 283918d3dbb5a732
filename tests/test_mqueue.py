"""Issue 29: a POSIX message queue's lock named by the queue. An mq
descriptor is a file of the mqueue file system whose inode is embedded in
the queue's struct mqueue_inode_info (fileobjects.toml [fs.mqueue]), so the
file iterator's inode address gives the queue's `lock`, which every
mq_send and mq_timedreceive takes. Before: `spinlock @ do_mq_timedreceive`
(a call site). The recorded run (tests/data/mqueue) is
tests/programs/mqueue.c with two workers on one queue; on this machine
bpftrace (`contention_begin`/`_end` for comm mq, summed per address) gave
1.193 s on the queue's lock address where lockscope gave 1.140 s in its
2.04-s window, the same address."""
from __future__ import annotations

import re

import pytest

from conftest import load, run_program
from lockscope.analyzer.kernel import naming


def test_the_recorded_run_names_the_queues_lock():
    rec = load("mqueue/mqueue-none-w2")
    locks = naming.name_locks(rec.probe.raw, rec.workers, int(rec.probe.window_s * 1e9))
    top = locks[0]
    assert re.fullmatch(r"mqueue_inode_info->lock of /lksc-mq-\d+", top.name), [lk.name for lk in locks[:5]]
    assert top.tier == "verified" and top.kind == "spinlock" and top.instances == 1
    assert {s.syscall for s in top.stacks} & {"mq_timedreceive", "mq_timedsend"}
    assert not [lk for lk in locks if lk.name.startswith("spinlock @ do_mq_")], [lk.name for lk in locks]


@pytest.mark.e2e
def test_mqueue_names_the_queues_lock_end_to_end(tmp_path):
    rec = run_program("mqueue", tmp_path, "2")
    assert re.fullmatch(r"mqueue_inode_info->lock of /lksc-mq-\d+", rec.locks[0].name), \
        [(lk.name, lk.wait_share) for lk in rec.locks[:5]]
    assert rec.locks[0].tier == "verified" and rec.ops_per_sec > 0
