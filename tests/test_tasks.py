"""Per-thread times and wake-ups (probes/tasks.bpf.c), end to end: a small
threaded program (tests/programs/handoff.c) profiled with `lockscope run`."""
from __future__ import annotations


import pytest

from conftest import REPO, build_c, lockscope
from lockscope.model import record
from lockscope.model.jsondata import parse_addr

SECONDS = 1.5          # each worker computes this long


@pytest.mark.e2e
def test_threads_times_and_who_woke_whom(e2e, tmp_path):
    prog = build_c(REPO / "tests" / "programs" / "handoff.c", tmp_path / "handoff",
                   ("-O2", "-g", "-fno-omit-frame-pointer", "-pthread"))
    out = tmp_path / "out"
    r = lockscope("run", "--workers", "2", "--duration", "20", "--name", "handoff", "--out", str(out),
                  "--", str(prog), "{n}", str(SECONDS))
    assert r.returncode == 0, r.stderr
    rec = record.load(out / "runs" / "handoff-none-w2.json")
    raw = rec.probe.raw
    assert raw.tasks is not None and raw.wakeups is not None, rec.warnings
    threads = [t for t in raw.tasks if t.process == "handoff"]
    main = next(t for t in threads if t.tid == t.tgid)
    workers = {t.tid: t for t in threads if t.comm == "worker"}
    assert len(workers) == 2, raw.tasks

    # the main thread only creates and joins the workers: it slept through their run...
    assert main.sleep_ns > 0.8 * SECONDS * 1e9 and main.on_cpu_ns < 0.05 * main.sleep_ns, main
    # ...and the exiting workers woke it (in pthread_join, a futex wait on the thread's tid)
    joins = [w for w in raw.wakeups if w.wakee_tid == main.tid and w.waker_tid in workers]
    assert joins and max(w.wait_ns for w in joins) > 0.8 * SECONDS * 1e9, raw.wakeups
    assert all(w.uaddr for w in joins) and {w.waker_comm for w in joins} == {"worker"}

    # the workers computed: on CPU more than asleep, and runnable (on CPU or
    # preempted, on a shared machine) most of their lives
    for t in workers.values():
        assert t.tgid == main.tgid and t.on_cpu_ns > t.sleep_ns, t
        assert t.on_cpu_ns + t.preempted_ns > 0.8 * SECONDS * 1e9, t
        assert t.switches > 0

    # the contended pthread mutex: its futex waits are per worker thread, and
    # the worker that unlocked it woke the other, the edge carrying its address
    lock = next(parse_addr(k.split(":")[1]) for k, a in raw.futex_addresses.items()
                if a.symbol == "contended_lock")
    waiters = {e.tid for e in raw.futex if e.uaddr == lock}
    assert waiters and waiters <= set(workers), raw.futex
    handoffs = [w for w in raw.wakeups if w.uaddr == lock]
    assert handoffs, raw.wakeups
    assert all(w.waker_tid in workers and w.wakee_tid in workers and w.waker_tid != w.wakee_tid
               and w.waker_tgid == main.tgid for w in handoffs), handoffs
    assert sum(w.count for w in handoffs) <= rec.probe.counters["task_wakeups"]
