"""Issue 29: global kernel locks named from the kernel's own text, on a kernel
whose /proc/kallsyms lists no data symbols. The probe reads the bytes before
the return addresses of the waits on static locks and the first bytes of the
functions called there (probes/ktext.c); analyzer/kernel/ktext.py finds the
constant loaded into %rdi and names the lock where a function of
globals.toml loads exactly the contended address.

The bytes below are this machine's kernel (6.18), read with bpftrace
(`buf(kaddr("rtnl_lock"), 32)`): rtnl_lock is `nop5; mov $0xffffffff831f5aa0,
%rdi; jmp mutex_lock`. The recorded run (tests/data/netdev) is
tests/programs/netdev.c: two processes, each in a network namespace of its
own, setting the MTU of their own loopback: both wait on rtnl_mutex."""
from __future__ import annotations

import pytest

from conftest import load, run_program
from lockscope.analyzer.kernel import ktext, naming
from lockscope.analyzer.kernel.knowledge import function
from lockscope.model.ktextdata import TextCall

RTNL_LOCK = bytes.fromhex("0f1f44000048c7c7a05a1f83e9cf3238000f1f400066662e0f1f840000000000")
RTNL_MUTEX = 0xffffffff831f5aa0


def call_site(before: bytes, target_rel: int = 0x1234) -> bytes:
    """KTEXT_BYTES ending in `call rel32`, `before` just ahead of it."""
    code = before + b"\xe8" + target_rel.to_bytes(4, "little", signed=True)
    return b"\x90" * (ktext.KTEXT_BYTES - len(code)) + code


def test_a_wrapper_is_read_for_the_address_it_loads():
    assert ktext.wrapper_loads(RTNL_LOCK) == RTNL_MUTEX
    # with ftrace on, the 5-byte nop is a call to __fentry__; an endbr64 may come first
    fentry = b"\xe8\x11\x22\x33\x44" + RTNL_LOCK[5:]
    assert ktext.wrapper_loads(fentry) == RTNL_MUTEX
    assert ktext.wrapper_loads(b"\xf3\x0f\x1e\xfa" + RTNL_LOCK[:-4]) == RTNL_MUTEX
    # a function that does something else first is not a wrapper
    assert ktext.wrapper_loads(bytes.fromhex("0f1f440000534889fb2e2e2e31c0") + b"\x00" * 18) is None


def test_the_constant_loaded_before_a_call_is_found():
    code = call_site(b"\x48\xc7\xc7" + (RTNL_MUTEX & 0xFFFFFFFF).to_bytes(4, "little") + b"\x31\xf6")
    assert ktext.rdi_before_call(code) == RTNL_MUTEX
    movabs = call_site(b"\x48\xbf" + (0xffff888100002000).to_bytes(8, "little"))
    assert ktext.rdi_before_call(movabs) == 0xffff888100002000
    assert ktext.rdi_before_call(call_site(b"\x48\x89\xdf")) is None       # mov %rbx,%rdi: not a constant


def _calls() -> list[TextCall]:
    caller = 0xffffffff81ea4400                     # a return address in dev_ioctl
    target = 0xffffffff81e7b510                     # rtnl_lock
    code = call_site(b"\x48\x89\xdf", target - caller)
    regions = {caller - ktext.KTEXT_BYTES: code, target: RTNL_LOCK,
               0xffffffff81000000: b"\x90" * ktext.KTEXT_BYTES}   # no call before: left out
    names = {caller: "dev_ioctl+0xf0", target: "rtnl_lock+0x0"}
    return ktext.text_calls(regions, lambda a: names.get(a, f"f+0x{a:x}"))


def test_calls_are_kept_with_what_they_load():
    [c] = _calls()
    assert c.caller == "dev_ioctl+0xf0" and c.function == "rtnl_lock" and c.target == 0xffffffff81e7b510
    assert bytes.fromhex(c.target_bytes) == RTNL_LOCK


def test_the_lock_is_named_only_where_the_address_matches():
    calls = _calls()
    stacks = [["bpf_prog_x+0x1", "__mutex_lock.constprop.0+0x1f1", "dev_ioctl+0xf0", "sock_do_ioctl+0x5e"]]
    found = ktext.find(RTNL_MUTEX, stacks, calls)
    assert found and found.rule.variable == "rtnl_mutex" and found.function == "rtnl_lock" and found.wrapper
    assert ktext.find(RTNL_MUTEX + 8, stacks, calls) is None          # another address: not named
    assert ktext.find(RTNL_MUTEX, [["other+0x10"]], calls) is None    # a stack that does not pass there


def test_each_function_names_one_variable():
    table = ktext.table()
    assert table["rtnl_lock"].variable == table["rtnl_trylock"].variable == "rtnl_mutex"
    assert all(g.explain and g.component for g in table.values())


# ---- a recorded run: tests/programs/netdev.c, 2 workers ----------------------

def test_the_recorded_run_names_rtnl_mutex_from_the_kernels_text():
    rec = load("netdev/netdev-none-w2")
    assert not rec.probe.raw.kernel_image.symbols          # no data symbols on this kernel
    locks = naming.name_locks(rec.probe.raw, rec.workers, int(rec.probe.window_s * 1e9))
    top = locks[0]
    assert top.name == "rtnl_mutex" and top.tier == "verified" and top.kind == "mutex", \
        [(lk.name, lk.tier) for lk in locks[:5]]
    assert "rtnl_lock() (called in dev_ioctl) loading this address" in top.explain and top.component == "networking"
    assert top.wait_share > 0.2
    [addr] = top.addresses
    assert any(ktext.wrapper_loads(bytes.fromhex(c.target_bytes)) == int(addr, 16)
               for c in rec.probe.raw.kernel_image.text_calls if c.function == "rtnl_lock")


@pytest.mark.e2e
def test_netdev_names_rtnl_mutex_end_to_end(tmp_path):
    rec = run_program("netdev", tmp_path, "2")
    top = rec.locks[0]
    assert top.name == "rtnl_mutex" and top.tier == "verified", [(lk.name, lk.tier) for lk in rec.locks[:5]]
    assert top.wait_share > 0.1 and rec.ops_per_sec > 0


def test_globals_a_function_takes_directly_are_named_from_its_own_text():
    """A fork storm (tests/programs/forkstorm.c, 2 workers vfork/exit/wait):
    tasklist_lock, css_set_lock and pidmap_lock are taken directly
    (write_lock_irq(&tasklist_lock) in copy_process, spin_lock_irq(&css_set_lock)
    in cgroup_exit, ... in alloc_pid): the mov before the call loads the
    contended address. Before, the rules of locks.toml inferred them."""
    rec = load("forkstorm/forkstorm-none-w2")
    locks = {lk.name: lk for lk in naming.name_locks(rec.probe.raw, rec.workers, int(rec.probe.window_s * 1e9))}
    for name, kind in (("tasklist_lock", "rwlock"), ("css_set_lock", "spinlock"), ("pidmap_lock", "spinlock")):
        lk = locks[name]
        assert lk.tier == "verified" and lk.kind == kind, (name, lk.tier, lk.explain)
        assert "the kernel's text shows" in lk.explain and lk.rule == f"globals.toml: {name}"
        [addr] = lk.addresses
        assert any(ktext.rdi_before_call(bytes.fromhex(c.caller_bytes)) == int(addr, 16)
                   for c in rec.probe.raw.kernel_image.text_calls
                   if ktext.table().get(function(c.caller), None) and ktext.table()[function(c.caller)].variable == name)
