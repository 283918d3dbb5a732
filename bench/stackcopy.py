#!/usr/bin/env python3
"""User stack copies of a live process's blocked threads, read from /proc,
and unwound with lockscope's CFI unwinder (analyzer/user/unwind.py).

An independent source of the data the futex probe copies at a futex sleep,
without BPF: for a thread blocked in a system call, /proc/PID/task/TID/syscall
gives the syscall number, its arguments, the user sp and pc; /proc/PID/mem
the stack bytes from sp (root, or a ptrace-capable parent). bp is not given
there: it is 0 (unknown; libc's CFA rules are rsp based), or with
`--registers` read by stopping the thread a moment with ptrace.

    python3 bench/stackcopy.py PID [--bytes 2048] [--registers] [--json]

prints each blocked thread's unwound, symbolized stack and the time taken
(loading the files' CFI and symbols once, then per stack); `--json` writes
the copies as the probe's `user_stack_copies` entries plus the maps instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lockscope.analyzer.user import userlocks  # noqa: E402
from lockscope.analyzer.user import unwind

NR_FUTEX = 202             # x86-64
FUTEX_CMD_MASK = 0x7F
STACK_BYTES = 2048         # as the probe copies


PTRACE_GETREGS, PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 12, 17, 0x4206, 0x4207
WALL = 0x40000000          # __WALL: wait for any thread
# struct user_regs_struct (x86-64), 27 registers
_REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
         "fs_base gs_base ds es fs gs").split()


def read_registers(tid: int) -> dict[str, int] | None:
    """All user registers of a thread (x86-64), by stopping it for a moment
    with ptrace (PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_GETREGS, detach): the
    only way to its rbp, which /proc does not show. A thread interrupted in a
    futex wait goes back to it (the kernel restarts the call; the C
    library's waits also loop on wake-ups). None if it cannot be traced."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        return None
    try:
        if libc.ptrace(PTRACE_INTERRUPT, tid, None, None) != 0:
            return None
        os.waitpid(tid, WALL)
        regs = (ctypes.c_ulonglong * len(_REGS))()
        if libc.ptrace(PTRACE_GETREGS, tid, None, ctypes.byref(regs)) != 0:
            return None
        return dict(zip(_REGS, regs))
    finally:
        libc.ptrace(PTRACE_DETACH, tid, None, None)


def frame_pointer_stack(pid: int, ip: int, bp: int, max_frames: int = 64) -> list[int]:
    """The user stack a frame-pointer walk gives (bpf_get_stackid with
    BPF_F_USER_STACK, perf's user callchain): ip, then the return address
    above each saved rbp, following the chain while it can be read."""
    frames = [ip]
    try:
        with open(f"/proc/{pid}/mem", "rb") as f:
            while bp and len(frames) < max_frames:
                f.seek(bp)
                data = f.read(16)
                if len(data) < 16:
                    break
                bp, ra = int.from_bytes(data[:8], "little"), int.from_bytes(data[8:], "little")
                if not ra:
                    break
                frames.append(ra)
    except (OSError, ValueError, OverflowError):
        pass
    return frames


def read_stack(pid: int, sp: int, size: int = STACK_BYTES) -> bytes | None:
    """`size` bytes of a process's memory from sp, or, as the probe does when
    the stack mapping ends sooner (the main thread of a program started with
    a small environment), 512; None if neither can be read."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        return None
    try:
        for n in (size, 512):
            try:
                data = os.pread(fd, n, sp)
            except (OSError, OverflowError):
                continue
            if len(data) == n:
                return data
        return None
    finally:
        os.close(fd)


def read_task(pid: int, tid: int, size: int = STACK_BYTES, registers: bool = False) -> dict | None:
    """The copy of one thread blocked in a system call, in the probe's
    `user_stack_copies` form (uaddr and op from a futex call's arguments,
    else 0; stack -1: no frame-pointer stack) plus "syscall"; None if the
    thread runs, has exited or its stack cannot be read. bp is 0 (unknown)
    unless `registers`: then it is read with ptrace (read_registers)."""
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
    except OSError:
        return None
    if len(fields) < 3 or fields[0] in ("running", "-1"):
        return None
    nr, sp, pc = int(fields[0]), int(fields[-2], 16), int(fields[-1], 16)
    args = [int(a, 16) for a in fields[1:-2]]
    data = read_stack(pid, sp, size)
    if data is None:
        return None
    bp = 0
    if registers:
        regs = read_registers(tid)
        if regs is None or (regs["rip"], regs["rsp"]) != (pc, sp):
            return None
        bp = regs["rbp"]
    futex = nr == NR_FUTEX and len(args) >= 2
    return {"tgid": pid, "tid": tid, "uaddr": f"0x{args[0] if futex else 0:x}",
            "op": args[1] & FUTEX_CMD_MASK if futex else 0, "stack": -1, "ip": f"0x{pc:x}", "sp": f"0x{sp:x}",
            "bp": f"0x{bp:x}", "bytes": data.hex(), "syscall": nr}


def read_process(pid: int, size: int = STACK_BYTES, registers: bool = False) -> dict:
    """{"maps": /proc/PID/maps lines, "copies": [read_task of every blocked thread]}."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    copies = [c for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
              if (c := read_task(pid, tid, size, registers)) is not None]
    return {"maps": maps, "copies": copies}


def unwind_copy(space: userlocks.AddressSpace, copy: dict) -> unwind.Unwound:
    """A copy of read_task unwound (CFI only: /proc has no frame-pointer stack)."""
    return unwind.cfi_frames(space, int(copy["ip"], 16), int(copy["sp"], 16), int(copy["bp"], 16),
                             bytes.fromhex(copy["bytes"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("--bytes", type=int, default=STACK_BYTES, help="stack bytes copied from sp (default 2048)")
    ap.add_argument("--registers", action="store_true",
                    help="read rbp too, stopping each thread a moment with ptrace")
    ap.add_argument("--json", action="store_true", help="write the copies and maps as JSON")
    args = ap.parse_args(argv)
    proc = read_process(args.pid, args.bytes, args.registers)
    if args.json:
        json.dump(proc, sys.stdout, indent=1)
        print()
        return 0
    space = userlocks.AddressSpace(userlocks.parse_maps(proc["maps"]))
    t0 = time.perf_counter()
    for c in proc["copies"]:
        # the first unwind of each file loads its CFI and symbols
        unwind_copy(space, c)
        [space.symbolize(a) for a in unwind_copy(space, c).frames]
    t1 = time.perf_counter()
    for c in proc["copies"]:
        u = unwind_copy(space, c)
        print(f"tid {c['tid']} syscall {c['syscall']}: {len(u.frames)} frames, stop: {u.stop}")
        for a in u.frames:
            print(f"    {space.symbolize(a)}")
    t2 = time.perf_counter()
    for c in proc["copies"]:
        unwind_copy(space, c)
    t3 = time.perf_counter()
    n = len(proc["copies"]) or 1
    print(f"{len(proc['copies'])} blocked threads; loading CFI and symbols {1e3 * (t1 - t0):.0f} ms, "
          f"then {1e3 * (t3 - t2) / n:.2f} ms per stack unwound", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
