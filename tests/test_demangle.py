"""C++ and Rust names demangled where lockscope shows them (issue 9, item 2):
the demangler itself, frames whose function holds '+' or spaces, and a real
C++ program whose hot std::mutex is named after the method that took it."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO, lockscope
from lockscope.model import record
from lockscope.analyzer.user import demangle, userlocks

needs_cxxfilt = pytest.mark.skipif(demangle.unavailable() is not None, reason=str(demangle.unavailable()))


@needs_cxxfilt
def test_cpp_and_both_rust_manglings_are_demangled_and_c_names_kept():
    names = demangle.demangle_all([
        "_ZN7rocksdb14ThreadPoolImpl4Impl8BGThreadEm",                  # C++ (Itanium)
        "_ZN3std4sync5mutex5Mutex4lock17hb2b36b7b1a2f7c2fE",          # Rust legacy: the hash goes
        "_RNvMs_NtCs4fqI2P2rA04_4core3fmtNtB4_9Formatter3pad",         # Rust v0: so do crate ids
        "_ZL12global_mutex",                                          # a C++ static
        "pthread_mutex_lock", "main",                                 # C: not sent at all
    ])
    assert names == {
        "_ZN7rocksdb14ThreadPoolImpl4Impl8BGThreadEm": "rocksdb::ThreadPoolImpl::Impl::BGThread(unsigned long)",
        "_ZN3std4sync5mutex5Mutex4lock17hb2b36b7b1a2f7c2fE": "std::sync::mutex::Mutex::lock",
        "_RNvMs_NtCs4fqI2P2rA04_4core3fmtNtB4_9Formatter3pad": "<core::fmt::Formatter>::pad",
        "_ZL12global_mutex": "global_mutex",
    }


def test_frame_function_of_demangled_names():
    assert userlocks.frame_function("Big::operator+=(Big const&)+0x1f [prog]") == "Big::operator+=(Big const&)"
    assert userlocks.frame_function("std::thread::_State_impl<main::{lambda()#1}>::_M_run()+0x31 [prog]") == \
        "std::thread::_State_impl<main::{lambda()#1}>::_M_run()"
    assert userlocks.frame_function("__lll_lock_wait+0x2b [libc.so.6]") == "__lll_lock_wait"
    assert userlocks.frame_function("[libc.so.6+0x8f3a0]") == "[libc.so.6+0x8f3a0]"


@pytest.mark.e2e
@needs_cxxfilt
def test_cpp_heap_mutex_is_named_by_its_demangled_method(e2e, tmp_path):
    if not shutil.which("g++"):
        pytest.skip("g++ not found: the C++ test program cannot be built")
    prog = tmp_path / "account"
    subprocess.run(["g++", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", str(prog),
                    str(REPO / "tests" / "programs" / "account.cpp")], check=True)
    out = tmp_path / "out"
    r = lockscope("run", "--workers", "2", "--duration", "1.5", "--name", "account", "--out", str(out),
                  "--", str(prog), "{n}", "1000000000")
    assert r.returncode == 0, r.stderr
    rec = record.load(out / "runs" / "account-none-w2.json")
    user = [lk for lk in rec.locks if lk.component == "user space"]
    hot = next((lk for lk in user if lk.kind == "pthread_mutex"), None)
    assert hot is not None, [lk.name for lk in user]
    assert hot.name == "pthread_mutex @ bank::Account::deposit(long) (heap)"
    assert any(f.startswith("bank::Account::deposit(long)+0x") for f in hot.stacks[0].frames)
    shown = [lk.name for lk in user] + [f for lk in user for st in lk.stacks for f in st.frames]
    assert not [s for s in shown if "_Z" in s], shown
