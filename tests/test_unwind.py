"""User stacks unwound with the ELF call-frame information (analyzer/user/unwind.py).

The data is real without BPF: tests/programs/blocked.c, built here without
frame pointers, has one thread asleep in pthread_cond_wait, one in
pthread_mutex_lock (__lll_lock_wait), one in pthread_rwlock_wrlock and main
in pthread_join; the copy of each thread's registers and top 2 KiB of stack
is read from /proc (bench/stackcopy.py), as the futex probe copies it at the
sleep, and unwound through Debian's libc (no frame pointers) to the
program's own functions. One such copy is recorded in
tests/data/unwind/blocked.json, unwound when the running libc is the one it
was recorded with (`python3 tests/test_unwind.py --record` records it again).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DATA, REPO, build_c
from lockscope.analyzer.user import addrspace, unwind, userlocks
from lockscope.model.jsondata import from_dict, to_dict
from lockscope.model.probedata import RawProbe

sys.path.insert(0, str(REPO / "bench"))
import stackcopy  # noqa: E402

SOURCE = REPO / "tests" / "programs" / "blocked.c"
RECORDED = DATA / "unwind" / "blocked.json"
CFLAGS = ["-O2", "-fomit-frame-pointer", "-pthread"]
NAMES = ("cond", "mutex", "rwlock", "join")

# what each thread's unwound stack holds, innermost first: glibc's names (the
# symbols of libc6-dbg: the public name, or its internal ___/__ aliases)
EXPECTED = {
    "cond": [r"_*pthread_cond_wait", "wait_on_cond", "cond_thread", "start_thread"],
    "mutex": ["__lll_lock_wait", r"_*pthread_mutex_lock", "lock_mutex", "mutex_thread", "start_thread"],
    "rwlock": [r"_*pthread_rwlock_wrlock", "lock_rwlock", "rwlock_thread", "start_thread"],
    "join": [r"_*pthread_(clock)?join(_ex)?", "join_holder", "main"],
}
KINDS = {"cond": "pthread_cond", "mutex": "pthread_mutex", "rwlock": "pthread_rwlock", "join": "pthread_join"}


def _functions(space: userlocks.AddressSpace, frames: list[int]) -> list[str]:
    return [userlocks.frame_function(space.symbolize(a)) for a in frames]


def _in_order(functions: list[str], expected: list[str]) -> bool:
    """Each expected function (a regex) appears, in this order."""
    i = 0
    for fn in functions:
        if i < len(expected) and re.fullmatch(expected[i], fn):
            i += 1
    return i == len(expected)


def build(directory: Path, cflags: list[str] = CFLAGS) -> Path:
    """blocked.c built in `directory` (same compiler, same build id)."""
    shutil.copy(SOURCE, directory / "blocked.c")
    build_c(Path("blocked.c"), Path("blocked"), tuple(cflags), cwd=directory)   # relative: the same build id
    return directory / "blocked"


def start(binary: Path) -> tuple[subprocess.Popen, dict[str, int]]:
    """Run it (a small environment) until its four waiters sleep in futex
    waits: (process, tid by waiter)."""
    proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            # room above main's stack for a whole 2 KiB copy (an empty
                            # environment can leave less, then the copy is 512 bytes)
                            env={"PAD": "x" * 4096})
    tids: dict[str, int] = {}
    while len(tids) < len(NAMES):
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"blocked exited early ({proc.wait()})")
        name, tid = line.split()
        tids[name] = int(tid)
    deadline = time.monotonic() + 10
    for tid in tids.values():
        while (c := stackcopy.read_task(proc.pid, tid)) is None or c["syscall"] != stackcopy.NR_FUTEX:
            if time.monotonic() > deadline:
                raise RuntimeError(f"thread {tid} of blocked never slept in a futex wait")
            time.sleep(0.01)
    return proc, tids


def stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0


def build_id(path: str) -> str | None:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return addrspace.elf_build_id(ELFFile(f))


def _running(tmp_path_factory, cflags: list[str], registers: bool):
    """blocked.c built with `cflags`, running: (maps lines, copy by waiter,
    address space, pid, frame-pointer stack by waiter when `registers`)."""
    if os.geteuid() != 0:
        pytest.skip("reading another process's stack through /proc/PID/mem needs root here")
    proc, tids = start(build(tmp_path_factory.mktemp("unwind"), cflags))
    try:
        copies = {n: stackcopy.read_task(proc.pid, tid, registers=registers) for n, tid in tids.items()}
        assert None not in copies.values(), copies
        maps = Path(f"/proc/{proc.pid}/maps").read_text().splitlines()
        space = userlocks.AddressSpace(userlocks.parse_maps(maps))
        fp = {n: stackcopy.frame_pointer_stack(proc.pid, int(c["ip"], 16), int(c["bp"], 16))
              for n, c in copies.items()}
        yield maps, copies, space, proc.pid, fp
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def blocked(tmp_path_factory):
    """Built as Debian builds its libraries: no frame pointers; bp not read."""
    yield from _running(tmp_path_factory, CFLAGS, registers=False)


@pytest.fixture(scope="module")
def blocked_fp(tmp_path_factory):
    """Built with frame pointers, as lockscope's workload driver: bp read
    with ptrace, and the frame-pointer walk the probe also takes."""
    yield from _running(tmp_path_factory, ["-O2", "-fno-omit-frame-pointer", "-pthread"], registers=True)


@pytest.mark.parametrize("name", NAMES)
def test_stack_copy_unwinds_through_libc_to_the_program(blocked, name):
    _, copies, space, _, _ = blocked
    u = stackcopy.unwind_copy(space, copies[name])
    functions = _functions(space, u.frames)
    assert _in_order(functions, EXPECTED[name]), functions
    # all the way to the thread's first frame, within the 2 KiB copy
    assert u.outermost, (u.stop, functions)
    assert functions[-1] in ("clone3", "_start"), functions
    # named as the analyzer names it: the wait's kind from the C library frame
    assert userlocks.futex_kind(copies[name]["op"], [space.symbolize(a) for a in u.frames]) == KINDS[name]


def test_the_copy_must_hold_the_return_addresses(blocked):
    """The walk stops where the copy ends (it never reads past it)."""
    _, copies, space, _, _ = blocked
    c = copies["cond"]
    full = stackcopy.unwind_copy(space, c)
    cut = unwind.cfi_frames(space, int(c["ip"], 16), int(c["sp"], 16), 0, bytes.fromhex(c["bytes"])[:64])
    assert cut.frames == full.frames[:len(cut.frames)] and len(cut.frames) < len(full.frames)
    assert cut.stop == "return address beyond the stack copy" and not cut.outermost


def test_frame_pointer_code_needs_bp_and_unwinds_with_it(blocked_fp):
    """Functions with a frame pointer have rbp-based CFA rules: the walk
    through libc (which leaves rbp alone on the mutex path) needs the
    thread's bp to get past lock_mutex."""
    _, copies, space, _, _ = blocked_fp
    for n in NAMES:
        u = stackcopy.unwind_copy(space, copies[n])
        assert u.outermost and _in_order(_functions(space, u.frames), EXPECTED[n]), (u.stop, n)
    c = copies["mutex"]
    no_bp = unwind.cfi_frames(space, int(c["ip"], 16), int(c["sp"], 16), 0, bytes.fromhex(c["bytes"]))
    assert no_bp.stop.startswith("CFA based on unknown register 6"), no_bp.stop
    assert _functions(space, no_bp.frames)[-1] == "lock_mutex"


def test_frame_pointer_stack_carries_on_past_a_short_copy(blocked_fp):
    """The probe's frame-pointer walk skips the libc frames (and, where libc
    uses rbp as a general register, is the ip alone); spliced after a copy
    too short for the whole stack, it gives the frames beyond the copy."""
    _, copies, space, _, fp = blocked_fp
    assert [len(fp[n]) for n in ("cond", "rwlock", "join")] == [1, 1, 1]       # rbp: not a frame chain
    assert "lock_mutex" not in _functions(space, fp["mutex"])                  # skipped
    assert "mutex_thread" in _functions(space, fp["mutex"])
    c = copies["mutex"]
    ip, sp, bp, data = int(c["ip"], 16), int(c["sp"], 16), int(c["bp"], 16), bytes.fromhex(c["bytes"])
    full = unwind.cfi_frames(space, ip, sp, bp, data)
    short = unwind.cfi_frames(space, ip, sp, bp, data[:48])
    assert not short.outermost and "start_thread" not in _functions(space, short.frames)
    spliced = unwind.unwind(space, ip, sp, bp, data[:48], fp["mutex"])
    assert spliced == full.frames[:len(spliced)] and "start_thread" in _functions(space, spliced)
    assert len(spliced) > len(short.frames)


def _data_event(pid: int, maps: list[str], copies: dict[str, dict]) -> dict:
    """A futex data event as the loader writes it (probe contract), from the
    /proc copies: one walked wait per waiter, with its copy under its own
    number (`sample`), and the cond waiter's walked again (the same stack:
    one aggregate in the record); frame-pointer stacks as a walk through
    libc gives them (the ip, then nothing: libc keeps no frame pointers, and
    this program neither); one more aggregate walked without a copy."""
    futex, user_stacks, rows = [], {}, []
    for i, n in enumerate(NAMES):
        c = copies[n]
        for sample in (i + 1, 100 + i) if n == "cond" else (i + 1,):
            futex.append({"tgid": pid, "tid": c["tid"], "uaddr": c["uaddr"], "op": c["op"], "stack": i,
                          "sample": sample, "count": 1, "total_ns": 1_000_000 * (10 - i),
                          "max_ns": 1_000_000 * (10 - i)})
            rows.append({**{k: v for k, v in c.items() if k != "syscall"}, "stack": i, "sample": sample})
        user_stacks[str(i)] = [c["ip"]]
    futex.append({"tgid": pid, "tid": copies["mutex"]["tid"], "uaddr": copies["mutex"]["uaddr"], "op": 0,
                  "stack": 9, "count": 1, "total_ns": 1000, "max_ns": 1000})
    user_stacks["9"] = [copies["mutex"]["ip"]]
    return {"futex_probe": {"attached": True, "open_at_stop": 4}, "futex": futex, "user_stacks": user_stacks,
            "user_stack_copies": rows, "user_maps": {str(pid): maps}}


def test_resolve_stores_unwound_stacks_and_names_the_locks(blocked):
    maps, copies, _, pid, _ = blocked
    out = userlocks.resolve(_data_event(pid, maps, copies))
    waits = {e.tid: e for e in out["futex"] if e.stack >= 0}
    keys = {n: waits[copies[n]["tid"]].user_stack for n in NAMES}
    assert sorted(keys.values()) == [f"{pid}:cfi{i}" for i in range(4)]
    for n in NAMES:
        assert _in_order([userlocks.frame_function(f) for f in out["user_stacks"][keys[n]]], EXPECTED[n])
    # the cond waiter's two walked waits: one aggregate
    assert waits[copies["cond"]["tid"]].count == 2
    # the walked wait without a copy: its frame-pointer stack may stand for many call paths in
    # code without frame pointers: counted as not walked (spread over the walked ones)
    no_copy = next(e for e in out["futex"] if e.stack < 0)
    assert no_copy.user_stack is None and f"{pid}:9" not in out["user_stacks"]
    # the record's raw form, written and read back, names the program's
    # static locks (pthread_join is not a lock)
    raw = RawProbe(**out)
    raw = from_dict(RawProbe, json.loads(json.dumps(to_dict(raw))))
    assert raw.user_frames(raw.futex[0]) == out["user_stacks"][keys["cond"]]
    locks = userlocks.name_futexes(raw, 4, 1_000_000_000)
    assert sorted(re.sub(r"\+0x[0-9a-f]+", "", lk.name) for lk in locks) == \
        ["pthread_cond cond in blocked", "pthread_mutex mu in blocked", "pthread_rwlock rw in blocked"]
    assert all(lk.tier == "verified" for lk in locks)


def test_older_probe_256_bytes_by_stack_are_unwound_too(blocked):
    """The probe before the 2 KiB copies kept the top 256 bytes of the stack
    by stack id (`user_stack_words`), without sp: unwound all the same."""
    maps, copies, _, pid, _ = blocked
    c = copies["cond"]
    data = bytes.fromhex(c["bytes"])[:256]
    words = [f"0x{int.from_bytes(data[i:i + 8], 'little'):x}" for i in range(0, 256, 8)]
    out = userlocks.resolve({
        "futex_probe": {"attached": True}, "user_maps": {str(pid): maps}, "user_stacks": {"5": [c["ip"]]},
        "user_stack_words": {"5": words},
        "futex": [{"tgid": pid, "uaddr": c["uaddr"], "op": c["op"], "stack": 5, "count": 1, "total_ns": 1,
                   "max_ns": 1}]})
    frames = out["user_stacks"][f"{pid}:5"]
    assert out["futex"][0].user_stack is None
    assert _in_order([userlocks.frame_function(f) for f in frames], EXPECTED["cond"][:2]), frames
    assert userlocks.futex_kind(c["op"], frames) == "pthread_cond"


# ---- the recorded copy ----------------------------------------------------------

def _recorded() -> dict:
    rec = json.loads(RECORDED.read_text())
    libc = rec["libc"]
    have = build_id(libc["path"]) if os.path.exists(libc["path"]) else None
    if have != libc["build_id"]:
        pytest.skip(f"recorded with libc build id {libc['build_id']} ({libc['version']}); "
                    f"{libc['path']} here has {have}")
    return rec


def test_recorded_copy_unwinds_with_the_same_libc(tmp_path):
    """The copies of tests/data/unwind/blocked.json, unwound as recorded. With
    the program built here identical (same build id) every frame is checked;
    otherwise through libc up to the program's first return address."""
    rec = _recorded()
    binary = None
    if shutil.which("gcc") or shutil.which("cc"):
        built = build(tmp_path)
        if build_id(str(built)) == rec["program"]["build_id"]:
            binary = str(built)
    maps = [row.replace(rec["program"]["path"], binary) if binary else row for row in rec["maps"]]
    space = userlocks.AddressSpace(userlocks.parse_maps(maps))
    for n in NAMES:
        c = rec["copies"][n]
        u = stackcopy.unwind_copy(space, c)
        got = [f"0x{a:x}" for a in u.frames]
        assert got == (rec["unwound"][n] if binary else rec["unwound"][n][:len(got)]), n
        functions = _functions(space, u.frames)
        if binary:
            assert u.outermost and _in_order(functions, EXPECTED[n]), functions
        else:
            # the program's file is not here: the walk ends at its first frame
            assert _in_order(functions, EXPECTED[n][:1]) and functions[-1].startswith("[blocked+0x"), functions
            assert "not in an executable file mapping" in u.stop


# ---- splicing with the frame-pointer stack ---------------------------------------

def test_splice_continues_with_the_frame_pointer_stack_once_they_meet():
    # CFI: ip, libc caller, program frame A, B (copy ended); frame pointers
    # skipped the libc caller and go on past the copy: B, C, D
    assert unwind.splice([1, 2, 3, 4], [1, 3, 4, 5, 6]) == [1, 2, 3, 4, 5, 6]
    # the CFI frames continue from the first frame-pointer frame they reach
    assert unwind.splice([1, 2, 4, 7], [1, 4, 5]) == [1, 2, 4, 5]
    # the ip itself is not a meeting point
    assert unwind.splice([1, 2], [1, 9]) == [1, 2, 9]


def test_splice_without_meeting_appends_what_is_missing_unless_outermost():
    assert unwind.splice([1, 2, 3], [1, 8, 9]) == [1, 2, 3, 8, 9]
    assert unwind.splice([1, 2, 3], [1, 8, 9], outermost=True) == [1, 2, 3]
    assert unwind.splice([1], [1, 8, 9]) == [1, 8, 9]          # no CFI: the frame-pointer stack
    assert unwind.splice([1, 2], []) == [1, 2]


def record() -> None:
    """Record tests/data/unwind/blocked.json from a fresh run of blocked.c."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="lockscope-unwind-") as d:
        binary = build(Path(d))
        proc, tids = start(binary)
        try:
            copies = {n: stackcopy.read_task(proc.pid, tid) for n, tid in tids.items()}
            maps = Path(f"/proc/{proc.pid}/maps").read_text().splitlines()
        finally:
            stop(proc)
        space = userlocks.AddressSpace(userlocks.parse_maps(maps))
        libc = next(m.path for m in space.maps if os.path.basename(m.path).startswith("libc.so"))
        version = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        cc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        rec = {
            "about": "tests/programs/blocked.c's four waiters: registers and top 2 KiB of stack read from /proc "
                     "(bench/stackcopy.py), and the frames they unwound to; "
                     "python3 tests/test_unwind.py --record",
            "libc": {"path": libc, "build_id": build_id(libc), "version": version},
            "program": {"path": str(binary), "build_id": build_id(str(binary)),
                        "compiler": cc, "command": " ".join(["gcc", *CFLAGS, "-o", "blocked", "blocked.c"])},
            "maps": maps,
            "copies": copies,
            "unwound": {n: [f"0x{a:x}" for a in stackcopy.unwind_copy(space, c).frames] for n, c in copies.items()},
            "functions": {n: _functions(space, stackcopy.unwind_copy(space, c).frames) for n, c in copies.items()},
        }
    RECORDED.parent.mkdir(parents=True, exist_ok=True)
    RECORDED.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {RECORDED}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python3 tests/test_unwind.py --record")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    record()
