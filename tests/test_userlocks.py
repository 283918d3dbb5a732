"""User-space locks: futex addresses and user stacks resolved through real
ELF files and /proc/PID/maps (a small program built here), naming from a
recorded real run, and PMUTEX end to end on the real kernel."""
import json
import shutil
import subprocess

import pytest

from conftest import build_c, lockscope
from lockscope.analyzer.user import userlocks
from lockscope.model.jsondata import from_dict
from lockscope.model.probedata import RawProbe

PROGRAM = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static pthread_mutex_t app_lock = PTHREAD_MUTEX_INITIALIZER;
static char big_table[1 << 20];          /* .bss beyond the file's pages */
pthread_mutex_t after_table = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) void app_worker(void) { pthread_mutex_lock(&app_lock); pthread_mutex_unlock(&app_lock); }
int main(void)
{
    void *heap = malloc(64);
    big_table[7] = 1;
    app_worker();
    printf("%p %p %p %p %p\n", (void *)&app_lock, (void *)&after_table, heap, (void *)app_worker,
           (void *)pthread_mutex_lock);
    fflush(stdout);
    getchar();
    return big_table[7] - 1;
}
"""


@pytest.fixture(scope="module")
def running_program(tmp_path_factory):
    """A small program with a static and a global mutex, alive while the test
    reads its maps: (maps lines, printed addresses, binary path)."""
    d = tmp_path_factory.mktemp("elf")
    (d / "prog.c").write_text(PROGRAM)
    build_c(d / "prog.c", d / "prog", ("-O1", "-g", "-fno-omit-frame-pointer", "-pthread"))
    proc = subprocess.Popen([str(d / "prog")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        addrs = [int(a, 16) for a in proc.stdout.readline().split()]
        maps = open(f"/proc/{proc.pid}/maps").read().splitlines()
        yield maps, addrs, str(d / "prog")
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_static_and_global_mutexes_are_named_by_symbol(running_program):
    maps, (app_lock, after_table, heap, _, _), binary = running_program
    space = userlocks.AddressSpace(userlocks.parse_maps(maps))
    r = space.resolve_data(app_lock)
    assert (r.region, r.symbol, r.symbol_offset, r.file) == ("object", "app_lock", 0, binary)
    # inside the mutex (e.g. its futex word at an offset) names the same object
    assert space.resolve_data(app_lock + 4).symbol == "app_lock"
    assert space.resolve_data(after_table).symbol == "after_table"
    assert space.resolve_data(heap).region == "heap"


def test_user_stack_frames_are_symbolized(running_program):
    maps, (_, _, _, worker, mutex_lock), _ = running_program
    space = userlocks.AddressSpace(userlocks.parse_maps(maps))
    assert space.symbolize(worker + 3) == "app_worker+0x3 [prog]"
    # the C library: its own symbols or those of its debug file
    assert space.symbolize(mutex_lock).split("+")[0] in ("pthread_mutex_lock", "__pthread_mutex_lock",
                                                          "___pthread_mutex_lock")
    assert space.symbolize(8) == "[unknown]"



RUST_PROGRAM = r"""
use std::io::Read;
use std::sync::Mutex;
static LEDGER: Mutex<u64> = Mutex::new(7);
static mut COUNTS: [u64; 4] = [0; 4];
fn main() {
    let g = LEDGER.lock().unwrap();
    println!("{:p} {:p}", &LEDGER, std::ptr::addr_of!(COUNTS));
    drop(g);
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}
"""


def _shared_writable_page(binary: str) -> bool:
    """Whether a writable LOAD segment of `binary` starts in a file page the
    writable segment before it also covers."""
    from elftools.elf.elffile import ELFFile
    with open(binary, "rb") as f:
        segs = sorted((s["p_offset"], s["p_filesz"]) for s in ELFFile(f).iter_segments()
                      if s["p_type"] == "PT_LOAD" and s["p_flags"] & 2)
    return any(b[0] & ~(userlocks.PAGE - 1) < a[0] + a[1] for a, b in zip(segs, segs[1:]))


def test_a_rust_static_resolves_to_its_symbol_where_writable_segments_share_a_page(tmp_path):
    """rustc links with two writable LOAD segments (RELRO data, then .data
    and .bss) whose file ranges share a page: the second's mapping starts at
    a file offset inside the first. Addresses come from the load bias, so the
    `static` is found, not something 0x1000 away (issue 16)."""
    rustc = shutil.which("rustc")
    if not rustc:
        pytest.skip("rustc not found: the Rust test program cannot be built")
    (tmp_path / "ledger.rs").write_text(RUST_PROGRAM)
    binary = str(tmp_path / "ledger")
    subprocess.run([rustc, "-O", "-o", binary, str(tmp_path / "ledger.rs")], check=True, capture_output=True)
    assert _shared_writable_page(binary), "rustc's layout changed: no two writable segments share a page"
    proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ledger, counts = (int(a, 16) for a in proc.stdout.readline().split())
        maps = open(f"/proc/{proc.pid}/maps").read().splitlines()
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    space = userlocks.AddressSpace(userlocks.parse_maps(maps))
    for addr, name in ((ledger, "LEDGER"), (counts, "COUNTS")):
        r = space.resolve_data(addr)
        assert r.region == "object" and r.symbol_offset == 0, (name, r)
        assert "6ledger" in r.symbol and name in r.symbol, r.symbol


# futex part of a real PMUTEX run (2 workers, 1 s window), as the record keeps it
RAW = from_dict(RawProbe, {
    "futex_probe": {"attached": True, "open_at_stop": 0},
    "futex": [
        {"tgid": 12828, "uaddr": "0x559d45639580", "op": 0, "stack": 1232, "count": 479558,
         "total_ns": 430464655, "max_ns": 12096807},
        # not from the run: the main thread joining the workers, and a heap mutex
        {"tgid": 12828, "uaddr": "0x7f0000001910", "op": 9, "stack": 7, "count": 1,
         "total_ns": 999000000, "max_ns": 999000000},
        {"tgid": 12828, "uaddr": "0x559d46000010", "op": 0, "stack": 1232, "count": 10,
         "total_ns": 2000000, "max_ns": 500000},
    ],
    "user_stacks": {
        "12828:1232": ["__lll_lock_wait+0x2b [libc.so.6]", "thread_main+0xe [lockscope-workload]",
                       "start_thread+0x305 [libc.so.6]"],
        "12828:7": ["__futex_abstimed_wait_common+0xa6 [libc.so.6]", "__pthread_clockjoin_ex+0xbd [libc.so.6]",
                    "ls_worker_threads_main+0x9c [lockscope-workload]", "main+0x3a [lockscope-workload]"],
    },
    "futex_addresses": {
        "12828:0x559d45639580": {"region": "object", "file": "/x/workloads/build/lockscope-workload",
                                 "symbol": "pmutex_global_lock", "symbol_offset": 0, "vaddr": "0x11580"},
        "12828:0x7f0000001910": {"region": "anon"},
        "12828:0x559d46000010": {"region": "heap"},
    },
})


def test_futex_waits_become_named_locks():
    locks = userlocks.name_futexes(RAW, 2, 999_901_139)
    assert [lk.name for lk in locks] == ["pthread_mutex pmutex_global_lock in lockscope-workload",
                                         "pthread_mutex @ thread_main (heap)"]
    top = locks[0]
    assert (top.tier, top.kind, top.component, top.count, top.instances) == \
        ("verified", "pthread_mutex", "user space", 479558, 1)
    assert top.wait_share == pytest.approx(430464655 / (2 * 999_901_139))
    assert top.stacks[0].frames[1] == "thread_main+0xe [lockscope-workload]" and top.modes == {"wait": 430464655}
    assert locks[1].tier == "site"


def test_kind_from_the_c_library_frame():
    assert userlocks.futex_kind(0, ["__lll_lock_wait+0x2b [libc.so.6]"]) == "pthread_mutex"
    assert userlocks.futex_kind(9, ["__futex_abstimed_wait_common+0x1 [libc.so.6]",
                                    "___pthread_cond_wait+0x1 [libc.so.6]", "f+0x1 [a.out]"]) == "pthread_cond"
    assert userlocks.futex_kind(6, []) == "pthread_mutex"          # FUTEX_LOCK_PI
    assert userlocks.futex_kind(0, ["f+0x1 [a.out]"]) == "futex"   # a raw futex of the program


def test_unloaded_probe_is_a_warning():
    assert userlocks.futex_warnings(from_dict(RawProbe, {"futex_probe": {"attached": False, "reason": "no BTF"}})) == \
        ["user-space locks not measured: no BTF"]
    assert userlocks.futex_warnings(RAW) == []


@pytest.mark.e2e
def test_pmutex_names_the_global_mutex(tmp_path, e2e, scratch):
    out = tmp_path / "out"
    rec = json.loads(lockscope("run", "PMUTEX", "--workers", "2", "--duration", "1", "--warmup", "0.5",
                               "--out", str(out), "--scratch", str(scratch), "--json").stdout)
    assert rec["probe"]["attached"] and rec["probe"]["counters"]["futex_waits"] > 0
    lost = {k: v for k, v in rec["probe"]["counters"].items() if k.startswith("lost_") and v}
    assert not lost, lost
    top = rec["locks"][0]
    assert top["name"] == "pthread_mutex pmutex_global_lock in lockscope-workload", \
        [lk["name"] for lk in rec["locks"][:5]]
    assert top["tier"] == "verified" and top["kind"] == "pthread_mutex" and top["instances"] == 1
    # two threads on one mutex: a large part of their time is spent waiting for it
    assert top["wait_share"] > 0.05
    # analysis and report take user-space locks (addresses "pid:0x...") with the kernel's
    a = lockscope("analyze", str(out), "--json")
    assert a.returncode == 0, a.stderr
    exp = json.loads(a.stdout)["experiments"][0]
    # (among the point's waits: on a busy machine "preempted" may outrank it)
    assert top["name"] in [w["name"] for w in exp["points"][0]["waits"][:3]], exp["points"][0]["waits"][:3]
    r = lockscope("report", str(out))
    assert r.returncode == 0, r.stderr
    assert "pmutex_global_lock" in (out / "report" / "PMUTEX-none.html").read_text()


def test_a_user_space_lock_wait_is_not_counted_again_as_off_cpu_futex_time():
    """The threads' sleeps in the futex syscall are the mutex's wait: the
    attribution counts them once, under the lock (recorded PMUTEX run)."""
    from conftest import load
    from lockscope.analyzer import attribution
    rec = load("pmutex/PMUTEX-none-w2")
    lock = rec.locks[0]
    assert lock.component == "user space" and lock.name == "pthread_mutex pmutex_global_lock in lockscope-workload"
    futex_offcpu = sum(o.wait_ns for o in rec.offcpu if o.wait_class == "futex wait")
    assert futex_offcpu >= 0.9 * lock.wait_ns          # the same sleeps, seen by sched_switch
    w = attribution.waits(rec)
    left = w.get("off-CPU: futex wait")
    assert left is None or left.wait_ns == futex_offcpu - lock.wait_ns
    total = sum(x.wait_ns for x in w.values())
    # without the subtraction the mutex's sleeps would be in the total twice
    assert total < sum(lk.wait_ns for lk in rec.locks) + sum(o.wait_ns for o in rec.offcpu) - 0.9 * lock.wait_ns
