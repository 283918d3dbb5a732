"""Programs lockscope did not write (issue 9), on records of real runs
(tests/data: pool, rocksdb_tmpfs, dbench_ext4; re-recorded by
tests/data/record.py): what each sleep is, who is a worker, who woke whom,
and an attribution that adds up."""
import re

import pytest

from conftest import DATA, load
from lockscope.analyzer import analyze, attribution, roles, sleepkinds, wakeups
from lockscope.analyzer.kernel import knowledge
from lockscope.analyzer.user import userlocks
from lockscope.analyzer.analyze import load_records


def _role(rec, name):
    return next(r for r in rec.roles if r.name == name)


def _we(rec, ns):
    return ns / (rec.probe.window_s * 1e9)


def _experiment(name):
    (exp,) = analyze.analyze(load_records(DATA / name))
    return exp


# ---- the plain threaded program: workers on one mutex, a joining main, an idle pool ----

def test_pool_workers_counted_join_and_idle_pool_are_not():
    rec = load("pool/pool-none-w2")
    assert rec.worker_roles == {"worker-#"}
    w = _role(rec, "worker-#")
    assert w.threads == 2 and "busiest role" in w.reason
    main, pool = _role(rec, "pool"), _role(rec, "bg-#")
    # the main thread joins (and sleeps between its hand-offs to the pool),
    # the two pool threads wait on their condition variable for work: idle
    assert _we(rec, main.idle_ns) > 0.9 and _we(rec, main.lock_ns) < 0.01
    assert _we(rec, pool.idle_ns) > 1.8 and _we(rec, pool.lock_ns) < 0.01
    assert not main.worker and not pool.worker and "not counted" in pool.reason


def test_pool_top_lock_is_the_hot_mutex_and_no_join_or_idle_condvar_is_a_lock():
    rec = load("pool/pool-none-w2")
    assert rec.locks[0].name == "pthread_mutex hot_lock in pool" and rec.locks[0].tier == "verified"
    assert rec.locks[0].roles and set(rec.locks[0].roles) == {"worker-#"}
    assert not [lk for lk in rec.locks if lk.kind in ("pthread_join", "pthread_cond")]
    assert not [lk for lk in rec.locks if "main" in lk.name]


def test_pool_frames_are_unwound_through_libc():
    rec = load("pool/pool-none-w2")
    frames = rec.locks[0].stacks[0].frames
    fns = [userlocks.frame_function(f) for f in frames]
    assert fns[:3] == ["__lll_lock_wait", "pthread_mutex_lock", "account_update"], frames


def test_pool_diagnosis_and_attribution_add_up():
    exp = _experiment("pool")
    assert "pthread_mutex hot_lock in pool" in exp.diagnosis
    at = exp.point(2)
    a = at.attribution
    assert sum(it.attributed for it in a.items) + a.unexplained == pytest.approx(at.lost_capacity, abs=1e-6)
    assert all(0 <= it.share_of_loss <= 1 for it in a.items)
    assert not [it for it in a.items if "join" in it.wait.name or "bg-#" in it.wait.name]


def test_roles_recomputed_from_the_raw_data_agree_with_the_record():
    for name in ("pool/pool-none-w2", "rocksdb_tmpfs/rocksdb-fillrandom-tmpfs-w2", "dbench_ext4/dbench-ext4-w2"):
        rec = load(name)
        rs = roles.analyze(rec.probe.raw, int(rec.probe.window_s * 1e9))
        assert rs is not None and rs.workers == rec.worker_roles, name


# ---- RocksDB: the idle compaction/flush pool, C++ names ----

def test_rocksdb_pool_threads_are_idle_not_a_lock():
    rec = load("rocksdb_tmpfs/rocksdb-fillrandom-tmpfs-w2")
    assert rec.worker_roles == {"db_bench"}
    for pool in ("rocksdb:low", "rocksdb:high"):
        r = _role(rec, pool)
        assert not r.worker and _we(rec, r.idle_ns) > 0.5, r
    # the pool's condition variable (ThreadPoolImpl::Impl::BGThread) is no lock
    assert not [lk for lk in rec.locks if "BGThread" in lk.name]
    exp = _experiment("rocksdb_tmpfs")
    assert "BGThread" not in exp.diagnosis


def test_rocksdb_names_are_demangled():
    rec = load("rocksdb_tmpfs/rocksdb-fillrandom-tmpfs-w2")
    mangled = re.compile(r"(^|[ @])_Z[NL]")
    user = [lk for lk in rec.locks if lk.component == "user space"]
    assert user and any("rocksdb::" in lk.name for lk in user)
    for lk in user:
        assert not mangled.search(lk.name), lk.name
        for st in lk.stacks:
            assert not [f for f in st.frames if mangled.search(f)], st.frames


def test_rocksdb_write_group_wait_is_a_lock_wait_woken_by_a_peer():
    """A writer waiting for the write group's leader sleeps on a condition
    variable and is woken by another writer: a lock wait, not idle."""
    rec = load("rocksdb_tmpfs/rocksdb-fillrandom-tmpfs-w2")
    await_ = [lk for lk in rec.locks if lk.kind == "pthread_cond" and "WriteThread" in lk.name]
    assert await_ and set(await_[0].roles) == {"db_bench"}


def test_attribution_never_exceeds_the_loss():
    for name in ("pool", "rocksdb_tmpfs", "dbench_ext4"):
        for p in _experiment(name).points:
            a = p.attribution
            assert sum(it.attributed for it in a.items) <= max(0.0, p.lost_capacity) + 1e-6, (name, p.workers)
            if a.waits_exceed_loss:
                assert a.scale < 1 and "scaled by" in a.scaling_note


# ---- dbench: the parent waiting for its clients ----

def test_dbench_parent_wait_is_idle_and_journal_commits_wake_the_clients():
    rec = load("dbench_ext4/dbench-ext4-w2")
    d = _role(rec, "dbench")
    assert d.worker and d.pids == 3                       # parent + 2 clients
    assert _we(rec, d.idle_ns) > 0.8                      # the parent in wait4 the whole window
    waits = attribution.waits(rec)
    assert not [w for w in waits.values() if w.lock_class in ("child/signal wait", "sleep", "poll/epoll wait")]
    top = max(waits.values(), key=lambda w: w.worker_equivalents)
    assert top.lock_class == "journal commit wait"
    assert any(e.waker.startswith("jbd2/") and e.wakee == "dbench" and not e.traced for e in rec.wait_for)


# ---- the tables ----

def test_every_offcpu_class_has_a_sleep_kind():
    """Every off-CPU class of locks.toml has a kind in sleepkinds.toml."""
    classes = sleepkinds.default().classes
    assert [r.wait_class for r in knowledge.default().offcpu_rules if r.wait_class not in classes] == []


@pytest.mark.parametrize("functions,primitive,kind", [
    (["__futex_abstimed_wait_common", "pthread_cond_wait"], "pthread_cond", sleepkinds.HANDOFF),
    (["__futex_abstimed_wait_common", "__pthread_clockjoin_ex", "pthread_join"], "pthread_join", sleepkinds.IDLE),
    (["__lll_lock_wait", "__pthread_mutex_cond_lock", "pthread_cond_wait"], "pthread_mutex", sleepkinds.LOCK),
    (["__futex_abstimed_wait_common", "__pthread_rwlock_wrlock_full64"], "pthread_rwlock", sleepkinds.LOCK),
    (["do_futex_wait", "__new_sem_wait_slow64"], "semaphore", sleepkinds.HANDOFF),
    ([], "futex", sleepkinds.HANDOFF),      # a program's or runtime's own futex: by who woke it
])
def test_futex_primitive_from_the_c_library_frames(functions, primitive, kind):
    assert sleepkinds.default().futex_primitive(0, functions) == (primitive, kind)


def test_a_condvar_wait_is_a_lock_wait_only_when_a_working_peer_woke_it():
    from lockscope.model.probedata import Wakeup
    wakes = [Wakeup(waker_tid=2, waker_tgid=1, waker_comm="w", wakee_tid=1, uaddr=0x10, count=5, wait_ns=300),
             Wakeup(waker_tid=9, waker_tgid=9, waker_comm="main", wakee_tid=1, uaddr=0x10, count=1, wait_ns=100)]
    parts = wakeups.handoff_lock_parts(wakes, [(1, 0x10), (3, 0x10)], working={1, 2})
    assert parts == {(1, 0x10): 0.75}                     # tid 3 was never woken: idle


@pytest.mark.parametrize("comm,role", [("worker-3", "worker-#"), ("kworker/u4:2", "kworker/u4:#"),
                                       ("python3", "python3"), ("rocksdb:low", "rocksdb:low")])
def test_role_names_fold_numbers_after_a_separator(comm, role):
    assert roles.role_name("x", comm) == role


# ---- end to end: the plain threaded program under `lockscope run` ----

@pytest.mark.e2e
def test_threaded_program_end_to_end(tmp_path):
    """Workers on one global mutex, a main thread that joins, a pool idle on
    its condition variable, built without frame pointers: the hot mutex is
    the top lock, named by its symbol, and neither the join nor the pool's
    wait is a lock or counted as work."""
    from conftest import REPO, build_c, e2e_missing, lockscope
    from lockscope.model import record
    why = e2e_missing()
    if why:
        pytest.skip(why)
    exe = build_c(REPO / "tests" / "programs" / "pool.c", tmp_path / "pool")
    p = lockscope("run", "--workers", "2", "--out", str(tmp_path / "out"), "--throughput-regex",
                  r"ops/s: ([0-9.]+)", "--", str(exe), "{n}", "2")
    assert p.returncode == 0, p.stderr
    (path,) = (tmp_path / "out" / "runs").glob("*.json")
    rec = record.load(path)
    assert rec.ops_per_sec and rec.ops_per_sec > 0
    assert rec.worker_roles == {"worker-#"}
    assert {"pool", "bg-#"} <= {r.name for r in rec.roles if not r.worker}
    assert rec.locks[0].name == "pthread_mutex hot_lock in pool", [lk.name for lk in rec.locks[:3]]
    assert not [lk for lk in rec.locks if lk.kind in ("pthread_join", "pthread_cond")]
    assert "roles (worker-equivalents" in p.stdout and "worker-#" in p.stdout
