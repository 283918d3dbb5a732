#!/usr/bin/env python3
"""User stack copies of a live process's blocked threads, read from /proc,
and unwound with lockscope's CFI unwinder (analyzer/unwind.py).

An independent source of the data the futex probe copies at a futex sleep,
without BPF: for a thread blocked in a system call, /proc/PID/task/TID/syscall
gives the syscall number, its arguments, the user sp and pc; /proc/PID/mem
the stack bytes from sp (root, or a ptrace-capable parent). bp is not given
there: it is 0 (unknown), and libc's CFA rules are rsp based.

    python3 bench/stackcopy.py PID [--bytes 2048] [--json]

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

from lockscope.analyzer import unwind, userlocks  # noqa: E402

NR_FUTEX = 202             # x86-64
FUTEX_CMD_MASK = 0x7F
STACK_BYTES = 2048         # as the probe copies


def read_task(pid: int, tid: int, size: int = STACK_BYTES) -> dict | None:
    """The copy of one thread blocked in a system call, in the probe's
    `user_stack_copies` form (uaddr and op from a futex call's arguments,
    else 0; stack -1: no frame-pointer stack) plus "syscall"; None if the
    thread runs, has exited or its stack cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
    except OSError:
        return None
    if len(fields) < 3 or fields[0] in ("running", "-1"):
        return None
    nr, sp, pc = int(fields[0]), int(fields[-2], 16), int(fields[-1], 16)
    args = [int(a, 16) for a in fields[1:-2]]
    try:
        with open(f"/proc/{pid}/mem", "rb") as f:
            f.seek(sp)
            data = f.read(size)
    except (OSError, ValueError):
        return None
    futex = nr == NR_FUTEX and len(args) >= 2
    return {"tgid": pid, "tid": tid, "uaddr": f"0x{args[0] if futex else 0:x}",
            "op": args[1] & FUTEX_CMD_MASK if futex else 0, "stack": -1, "ip": f"0x{pc:x}", "sp": f"0x{sp:x}",
            "bp": "0x0", "bytes": data.hex(), "syscall": nr}


def read_process(pid: int, size: int = STACK_BYTES) -> dict:
    """{"maps": /proc/PID/maps lines, "copies": [read_task of every blocked thread]}."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    copies = [c for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
              if (c := read_task(pid, tid, size)) is not None]
    return {"maps": maps, "copies": copies}


def unwind_copy(space: userlocks.AddressSpace, copy: dict) -> unwind.Unwound:
    """A copy of read_task unwound (CFI only: /proc has no frame-pointer stack)."""
    return unwind.cfi_frames(space, int(copy["ip"], 16), int(copy["sp"], 16), int(copy["bp"], 16),
                             bytes.fromhex(copy["bytes"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("--bytes", type=int, default=STACK_BYTES, help="stack bytes copied from sp (default 2048)")
    ap.add_argument("--json", action="store_true", help="write the copies and maps as JSON")
    args = ap.parse_args(argv)
    proc = read_process(args.pid, args.bytes)
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
