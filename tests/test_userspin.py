"""Issue 28: user-space spinning charged to the lock it spins on. CPU samples
carry the thread's user stack (frame pointers, and for the first samples of
a window a copy of the registers and stack top unwound with the ELF CFI);
a sample in a lock's acquire path (sleepkinds.toml [[spin]]) is added to
that lock as "spinning (sampled)". Go's lock2 is tests/test_gochan.py's;
here glibc's pthread_spin_lock, which never sleeps (no futex wait names it),
in tests/programs/spinlock.c built without frame pointers (Debian's
default): pthread_spin_lock keeps no frame, so only the CFI unwinding finds
its caller, transfer()."""
from __future__ import annotations

import math
import re

import pytest

from conftest import REPO, build_c, e2e_missing, lockscope
from lockscope.model import record
from lockscope.analyzer.user import userspin


def test_samples_are_unwound_from_their_copies_and_merged():
    """resolve() on the probe's rows: the rows of one thread and stack are
    merged, a row without a user stack is kept as it came."""
    data = {"cpu_samples": [
        {"stack": -3, "in_lock_wait": False, "tgid": 7, "tid": 8, "user_stack": 3, "count": 2},
        {"stack": -3, "in_lock_wait": False, "tgid": 7, "tid": 8, "user_stack": 3, "count": 1},
        {"stack": 5, "in_lock_wait": False, "count": 4}],
        "sample_user_stacks": {"3": ["0x401000"]}, "user_maps": {}}
    out = userspin.resolve(data)
    assert out["sample_user_stacks"] == {"7:3": ["[unknown]"]}
    rows = {r.get("user_stack"): r["count"] for r in data["cpu_samples"]}
    assert rows == {"7:3": 3, None: 4}


@pytest.mark.e2e
def test_a_glibc_spinlock_is_named_by_its_caller_and_timed_from_samples(tmp_path):
    why = e2e_missing()
    if why:
        pytest.skip(why)
    exe = build_c(REPO / "tests" / "programs" / "spinlock.c", tmp_path / "spinlock")
    out, log = tmp_path / "out", tmp_path / "spinlock.out"
    p = lockscope("run", "--workers", "2", "--duration", "3", "--sample-hz", "99",
                  "--throughput-regex", r"ops/s: ([0-9.]+)", "--out", str(out),
                  "--", "sh", "-c", f"{exe} {{n}} 2 > {log}; cat {log}")
    assert p.returncode == 0, p.stderr
    [f] = (out / "runs").glob("*.json")
    rec = record.load(f)
    top = rec.locks[0]
    assert (top.name, top.kind, top.component) == ("pthread_spinlock @ transfer", "pthread_spinlock", "user space"), \
        [(lk.name, lk.wait_share) for lk in rec.locks[:4]]
    assert top.sampled_spin_ns == top.wait_ns > 0
    # the program's own profile: a timer on each thread's CPU clock asks whether the thread is
    # in pthread_spin_lock (the TSC around the call counts a spin preempted by another task as
    # spinning too; samples, the program's and lockscope's, see only the CPU time). Both are
    # counts of samples: each share is off by its own sampling error, share/sqrt(samples in
    # the spin) (Poisson); the two agree within 3 of their combined errors (99.7%).
    log_text = log.read_text()
    share = float(re.search(r"cpu spin share: ([0-9.]+)", log_text).group(1))
    own_samples = int(re.search(r"spinning ([0-9]+)", log_text).group(1))
    ours = top.sampled_spin_ns / rec.probe.raw.sample_period_ns
    err = math.hypot(top.wait_share / math.sqrt(ours), share / math.sqrt(own_samples))
    print(f"lockscope {top.wait_share:.1%} ({ours:.0f} samples), the program's CPU profile {share:.1%}, "
          f"its TSC around the call {re.search(r'^spin share: ([0-9.]+)', log_text, re.M).group(1)}")
    assert share > 0.05 and abs(top.wait_share - share) < 3 * err, (top.wait_share, share, err)


def test_a_monitors_spin_goes_to_the_monitor_the_probes_named():
    """HotSpot spins in ObjectMonitor::enter before its contended__enter
    probe fires; JIT frames name no site, so the spin goes to the heaviest
    Java monitor of the record (attach = "kind"). Inside EnterI the probe's
    wait has it already; a sample in the uprobe's own trap is the probe's."""
    from lockscope.analyzer import sleepkinds
    from lockscope.model.probedata import CpuSample, RawProbe
    from lockscope.model.record import Lock
    table = sleepkinds.default()
    assert table.spinning(["ObjectMonitor::enter(JavaThread*)", "ObjectSynchronizer::enter(...)"]) == "Java monitor"
    assert table.spinning(["ObjectMonitor::TrySpin(JavaThread*)", "ObjectMonitor::EnterI(JavaThread*)"]) is None
    # a park under EnterI: a futex sleep, no spin (the spin must be on top of the stack)
    assert table.spinning(["__futex_abstimed_wait_common", "pthread_cond_timedwait", "os::PlatformEvent::park(long)",
                           "ObjectMonitor::EnterI(JavaThread*)", "ObjectMonitor::enter(JavaThread*)"]) is None
    jvm = "[libjvm.so]"
    raw = RawProbe(sample_period_ns=10_000_000, sample_user_stacks={
        "9:1": [f"ObjectMonitor::enter(JavaThread*)+0x6a5 {jvm}", f"ObjectSynchronizer::enter(Handle)+0xa4 {jvm}",
                "[unknown]"],
        "9:2": [f"ObjectMonitor::TrySpin(JavaThread*)+0x1c6 {jvm}", f"ObjectMonitor::EnterI(JavaThread*)+0x49 {jvm}"]},
        sample_stacks={7: ["irqentry_exit_to_user_mode+0x105", "asm_exc_int3+0x35"]},
        cpu_samples=[CpuSample(stack=-3, count=3, tgid=9, tid=10, user_stack="9:1"),
                     CpuSample(stack=-3, count=5, tgid=9, tid=10, user_stack="9:2"),       # in the probe's wait
                     CpuSample(stack=7, count=4, tgid=9, tid=10, user_stack="9:1")])      # the uprobe's trap
    monitor = Lock(name="Java monitor of Monitor$Counter", lock_class="Java monitor", kind="Java monitor",
                   count=10, wait_ns=400_000_000)
    [lk] = userspin.add_spin([monitor], raw, 2, 1_000_000_000)
    assert lk is monitor and lk.sampled_spin_ns == 30_000_000 and lk.wait_ns == 430_000_000
    # without the probes no monitor is named: the spin is charged to nothing
    assert userspin.add_spin([], raw, 2, 1_000_000_000) == []
