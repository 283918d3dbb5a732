"""Issue 25: kernel locks spun on inside the futex syscalls (the futex hash
bucket lock, a runqueue lock taken to wake a waiter) belong to the
user-space lock whose futex word the syscall works on. Checked on a recorded
real run (tests/data/bank_cpp: tests/programs/bank.cpp, a std::mutex member
of a heap object, 2 workers beside `stress-ng --cpu 2`)."""
import copy
import dataclasses

import pytest

from conftest import DATA, load
from lockscope import textout
from lockscope.model import record
from lockscope.analyzer import attribution, roles
from lockscope.analyzer.kernel import naming
from lockscope.analyzer.user import futexspin, usdt, userlocks
from lockscope.model.jsondata import from_dict, to_dict

MUTEX = "pthread_mutex @ bank::Account::deposit(long) (heap)"
HASH_BUCKET = "futex hash bucket lock"


def _bank():
    return load("bank_cpp/bank-cpp-none-w2")


def _locks(rec: record.RunRecord, raw=None) -> list[record.Lock]:
    """The locks of a record named again from its raw data, as the runner does."""
    raw = raw or rec.probe.raw
    window = int(round(rec.probe.window_s * 1e9))
    kernel = naming.add_sampled_spin(naming.name_locks(raw, rec.workers, window), raw, rec.workers, window)
    rs = roles.analyze(raw, window)
    folded = usdt.folded_futexes(raw)
    user = userlocks.name_futexes(raw, rec.workers, window, rs, folded, naming.futex_spin(raw, folded))
    return sorted(kernel + user, key=lambda lk: -lk.wait_ns)


def _without_words(raw):
    """The raw data as a probe without futexspin.bpf.h would have it."""
    return dataclasses.replace(raw, futex_kernel=None)


def _by_name(locks):
    return {lk.name: lk for lk in locks}


def test_the_mutex_carries_the_hash_bucket_time_and_no_hash_bucket_entry_remains():
    rec = _bank()
    before = _by_name(_locks(rec, _without_words(rec.probe.raw)))
    after = _by_name(_locks(rec))
    assert HASH_BUCKET in before and before[HASH_BUCKET].wait_ns > 0
    assert HASH_BUCKET not in after, list(after)[:4]
    mutex = after[MUTEX]
    spin = {k.name: k for k in mutex.kernel_spin}
    # every hash-bucket wait of this run was inside a futex call on the mutex's word
    assert spin[HASH_BUCKET].wait_ns == before[HASH_BUCKET].wait_ns
    assert spin[HASH_BUCKET].count == before[HASH_BUCKET].count
    assert mutex.wait_ns == before[MUTEX].wait_ns + sum(k.wait_ns for k in mutex.kernel_spin)
    assert mutex.count == before[MUTEX].count          # the waits/s of a mutex are its own sleeps
    assert list(after)[0] == MUTEX


def test_the_time_moves_once_total_and_per_kernel_lock():
    rec = _bank()
    before = _locks(rec, _without_words(rec.probe.raw))
    after = _locks(rec)
    assert sum(lk.wait_ns for lk in after) == sum(lk.wait_ns for lk in before)
    # a user lock's count is its own waits: the spins it took over are counted under kernel_spin
    assert sum(lk.count for lk in after) + sum(k.count for lk in after for k in lk.kernel_spin) == \
        sum(lk.count for lk in before)
    moved = {k.name: k.wait_ns for lk in after for k in lk.kernel_spin}
    b, a = _by_name(before), _by_name(after)
    for name, ns in moved.items():
        # what a kernel lock entry lost is exactly what the user lock lists under its name
        assert b[name].wait_ns - (a[name].wait_ns if name in a else 0) == ns, name
    # kernel locks waited on outside a futex call (in an interrupt: no futex word) keep their entry
    kept = [lk for lk in after if lk.component != "user space"]
    assert [lk for lk in kept if lk.name.startswith("rq->__lock")] and all(lk.count > 0 for lk in kept)


def test_the_attribution_still_adds_up():
    """Lock waits in worker-equivalents: the same total, the mutex's grown
    by what the hash bucket lock had; with and without roles."""
    for with_roles in (True, False):
        rec, base = _bank(), _bank()
        if not with_roles:
            rec.roles = base.roles = []
        base.locks = _locks(base, _without_words(base.probe.raw))
        rec.locks = _locks(rec)
        w, b = attribution.waits(rec), attribution.waits(base)
        assert HASH_BUCKET in b and HASH_BUCKET not in w
        assert sum(x.worker_equivalents for x in w.values()) == pytest.approx(
            sum(x.worker_equivalents for x in b.values()), rel=1e-9)
        spun = {k.name: k.wait_ns for k in _by_name(rec.locks)[MUTEX].kernel_spin}
        window_ns = rec.probe.window_s * 1e9
        assert spun[HASH_BUCKET] / window_ns == pytest.approx(b[HASH_BUCKET].worker_equivalents, rel=1e-9)
        assert w[MUTEX].worker_equivalents == pytest.approx(
            b[MUTEX].worker_equivalents + sum(spun.values()) / window_ns, rel=1e-6)


def test_the_record_says_it_and_so_do_the_text_and_the_report(tmp_path):
    rec = _bank()
    top = rec.locks[0]
    assert top.name == MUTEX and top.kernel_spin and top.kernel_spin[0].name == HASH_BUCKET
    assert HASH_BUCKET not in [lk.name for lk in rec.locks]
    text = textout.summarize(rec)
    assert "of which spinning in the kernel inside its futex calls: futex hash bucket lock" in text
    from lockscope.reports import html
    index = html.write_report(DATA / "bank_cpp", tmp_path / "report")
    page = next(p for p in index.parent.glob("*.html") if p != index).read_text()
    assert "of which spinning in the kernel inside its futex calls: futex hash bucket lock" in page


def test_an_unknown_word_keeps_the_kernel_lock_as_it_was():
    rec = _bank()
    raw = copy.deepcopy(rec.probe.raw)
    for r in raw.futex_kernel:
        r.uaddr += 0x1000          # a word no recorded lock sleeps on
    before = _by_name(_locks(rec, _without_words(rec.probe.raw)))
    after = _by_name(_locks(rec, raw))
    assert after[HASH_BUCKET].wait_ns == before[HASH_BUCKET].wait_ns
    assert not after[MUTEX].kernel_spin and after[MUTEX].wait_ns == before[MUTEX].wait_ns


def test_a_condition_variables_word_is_no_lock_word():
    """A condition variable is a lock or idle by its wake-ups: its futex
    calls' spinning stays the kernel lock's."""
    raw = _bank().probe.raw
    words = userlocks.lock_words(raw)
    mutex_words = {(e.tgid, e.uaddr) for e in raw.futex if userlocks.futex_kind(e.op, raw.user_frames(e))
                   == "pthread_mutex"}
    cond_words = {(e.tgid, e.uaddr) for e in raw.futex if userlocks.futex_kind(e.op, raw.user_frames(e))
                  == "pthread_cond"}
    assert mutex_words and mutex_words <= words
    assert cond_words and not cond_words & words


def test_a_charge_never_exceeds_the_kernel_aggregate_it_comes_from():
    raw = copy.deepcopy(_bank().probe.raw)
    for r in raw.futex_kernel:
        r.count, r.total_ns = r.count * 3, r.total_ns * 3      # as if the kernel map had been full
    charged = futexspin.charges(raw, userlocks.lock_words(raw))
    held = {(e.lock, e.flags, e.stack): e for e in raw.contention}
    for c in charged:
        e = held[(c.lock, c.flags, c.stack)]
        assert c.count <= e.count and c.total_ns <= e.total_ns
    left = futexspin.remaining(raw, charged)
    assert sum(e.total_ns for es in left.values() for e in es) + sum(c.total_ns for c in charged) == \
        sum(e.total_ns for e in raw.contention)


def test_split_adds_up_exactly():
    assert futexspin.split(10, [1, 1, 1]) == [4, 3, 3] or sum(futexspin.split(10, [1, 1, 1])) == 10
    assert futexspin.split(7, [0, 0]) in ([4, 3], [3, 4])
    assert futexspin.split(1000, [3, 1]) == [750, 250]
    assert futexspin.split(5, []) == []


def test_older_records_load_and_name_as_before():
    rec = load("pmutex/PMUTEX-none-w2")
    assert rec.probe.raw.futex_kernel is None
    assert all(not lk.kernel_spin for lk in rec.locks)
    d = to_dict(rec.locks[0])
    assert "kernel_spin" not in d                 # omitted when empty
    lk = record.Lock(name="m", lock_class="m", kernel_spin=[record.KernelSpin(HASH_BUCKET, 3, 1234)])
    back = from_dict(record.Lock, to_dict(lk))
    assert back.kernel_spin == lk.kernel_spin


def test_the_lock_wait_flame_graph_puts_the_hash_bucket_stacks_under_the_mutex():
    from lockscope.analyzer import folded
    lines = folded.lockwait(_bank())
    assert not [k for k in lines if k.endswith(HASH_BUCKET)]
    under = [k for k in lines if k.endswith(MUTEX.replace(";", ":"))]
    assert any("futex" in k for k in under), list(lines)[:5]
