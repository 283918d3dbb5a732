#!/usr/bin/env python3
"""What unwinding user stacks with the ELF CFI costs when a record is written.

Runs `lockscope run ARGS` in this process and times the futex part of
writing its record (`userlocks.resolve`: symbolizing the user stacks,
resolving the futex addresses) on the probe's real data event:

- from cold caches (ELF symbols and CFI read again), with frame pointers
  only (the data event without its stack copies: `user_stack_copies`, or
  the older probe's `user_stack_words`) and unwound as lockscope does it
  (analyzer/user/unwind.py; more frames, so more files' symbols read);
- the unwinding alone (reading the files' CFI index, decoding the FDEs
  met, walking), with the symbols cached: from a cold CFI cache, then warm.

    python3 bench/unwind_cost.py --workers 2 --duration 3 --name account \\
        --out /tmp/out -- ./account {n} 1000000000

prints the times, the number of aggregates, stacks and copies, and writes
them as JSON to --json FILE if given (before the run's arguments).

Until the probe copies 2 KiB stacks (`user_stack_copies`), the same data
can be had without BPF: copies of a command's threads asleep in futex
waits read from /proc (bench/stackcopy.py) for SECONDS, optionally repeated
to N aggregates:

    python3 bench/unwind_cost.py --proc 3 --scale 2000 -- db_bench \
        --benchmarks=fillrandom --num=100000000 --threads=2 --db=/tmp/db
"""
from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lockscope import cli  # noqa: E402
from lockscope.analyzer.user import userlocks  # noqa: E402
from lockscope.analyzer.user import unwind

COPY_KEYS = ("user_stack_copies", "user_stack_words")


def _resolve_cold(data: dict) -> tuple[float, dict]:
    userlocks.elf_symbols.cache_clear()
    unwind.cfi_table.cache_clear()
    t0 = time.perf_counter()
    out = userlocks.resolve(copy.deepcopy(data))
    return time.perf_counter() - t0, out


def measure(data: dict) -> dict:
    """The futex part of a data event resolved from cold caches without and
    with unwinding (more frames: more files' symbols read), then the
    unwinding alone: with every mapped file's symbols cached, from a cold
    and from a warm CFI cache."""
    t_fp, _ = _resolve_cold({k: v for k, v in data.items() if k not in COPY_KEYS})
    t_unwound, out = _resolve_cold(data)
    for path in _files(data):
        userlocks.elf_symbols(path)
    unwind.cfi_table.cache_clear()
    spent = [0.0, 0]
    real = unwind.unwind

    def timed(*args, **kw):
        t = time.perf_counter()
        try:
            return real(*args, **kw)
        finally:
            spent[0] += time.perf_counter() - t
            spent[1] += 1

    unwind.unwind = timed
    try:
        userlocks.resolve(copy.deepcopy(data))
        cold, spent[:] = spent[0], [0.0, 0]
        userlocks.resolve(copy.deepcopy(data))
        warm, n = spent
    finally:
        unwind.unwind = real
    copies = data.get("user_stack_copies") or []
    return {
        "aggregates": len(data.get("futex", [])),
        "fp_stacks": len(data.get("user_stacks", {})),
        "copies": len(copies),
        "copy_bytes": sum(len(c.get("bytes", "")) // 2 for c in copies),
        "stack_words": len(data.get("user_stack_words", {})),
        "stacks_unwound": n,
        "record_stacks": len(out.get("user_stacks", {})),
        "resolve_fp_only_s": round(t_fp, 3),
        "resolve_unwound_s": round(t_unwound, 3),
        "unwinding_s": round(cold, 4),
        "unwinding_cfi_cached_s": round(warm, 4),
        "cfi_files": _cfi_files(data),
    }


def _cfi_files(data: dict) -> dict[str, str]:
    """The files whose CFI the unwinding read (cached now): FDEs, decoded."""
    out = {}
    for path in sorted(_files(data)):
        before = unwind.cfi_table.cache_info().hits
        t = unwind.cfi_table(path)
        if t is not None and unwind.cfi_table.cache_info().hits > before:
            out[path] = f"{len(t.starts)} FDEs, {len(t._rows)} decoded"
    return out


def _files(data: dict) -> set[str]:
    return {m.path for rows in data.get("user_maps", {}).values() for m in userlocks.parse_maps(rows)
            if "x" in m.perms and m.path.startswith("/")}


def proc_data_event(command: list[str], seconds: float, every: float = 0.05) -> dict:
    """A futex data event of the probe's newer form, without BPF: `command`
    run for `seconds`, its threads asleep in futex waits copied from /proc
    every `every` s (bench/stackcopy.py: registers sp and ip, 2 KiB of
    stack; bp unknown), one aggregate per (thread, futex, op, ip), each with
    its first copy; frame-pointer stacks of the ip alone (what the walk
    gives in glibc's waits)."""
    import subprocess
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import stackcopy
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    copies: dict[tuple, dict] = {}
    maps: list[str] = []
    try:
        time.sleep(min(0.5, seconds / 4))
        end = time.monotonic() + seconds
        while time.monotonic() < end and proc.poll() is None:
            got = stackcopy.read_process(proc.pid)
            maps = got["maps"] or maps
            for c in got["copies"]:
                if c["syscall"] == stackcopy.NR_FUTEX:
                    copies.setdefault((c["tid"], c["uaddr"], c["op"], c["ip"]), c)
            time.sleep(every)
    finally:
        proc.terminate()
        proc.wait()
    ips = sorted({k[3] for k in copies})
    futex, rows = [], []
    for (tid, uaddr, op, ip), c in copies.items():
        sid = ips.index(ip)
        futex.append({"tgid": proc.pid, "tid": tid, "uaddr": uaddr, "op": op, "stack": sid,
                      "count": 1, "total_ns": 1000, "max_ns": 1000})
        rows.append({**{k: v for k, v in c.items() if k != "syscall"}, "stack": sid})
    return {"futex_probe": {"attached": True}, "futex": futex, "user_stacks": {str(i): [ip] for i, ip in enumerate(ips)},
            "user_stack_copies": rows, "user_maps": {str(proc.pid): maps}}


def scaled(data: dict, n: int) -> dict:
    """The data event with its aggregates and copies repeated, under other
    thread ids, to `n` aggregates (the record keeps at most 2000)."""
    out = copy.deepcopy(data)
    futex, rows = data["futex"], data["user_stack_copies"]
    out["futex"], out["user_stack_copies"] = [], []
    for i in range(n):
        f, r = dict(futex[i % len(futex)]), dict(rows[i % len(rows)])
        f["tid"] = r["tid"] = 1_000_000 + i
        out["futex"].append(f)
        out["user_stack_copies"].append(r)
    return out


def main(argv: list[str]) -> int:
    out_json = None
    if argv[:1] == ["--json"]:
        out_json, argv = argv[1], argv[2:]
    if argv[:1] == ["--proc"]:
        # --proc SECONDS [--scale N] -- COMMAND...: copies from /proc, no BPF
        seconds, argv = float(argv[1]), argv[2:]
        n = None
        if argv[:1] == ["--scale"]:
            n, argv = int(argv[1]), argv[2:]
        data = proc_data_event(argv[1:] if argv[:1] == ["--"] else argv, seconds)
        results = [measure(data)] + ([measure(scaled(data, n))] if n else [])
        for r in results:
            print(json.dumps(r, indent=1), file=sys.stderr)
        if out_json:
            Path(out_json).write_text(json.dumps(results, indent=1) + "\n")
        return 0
    seen: list[dict] = []
    resolve = userlocks.resolve

    def timed(data: dict):
        if data.get("futex") is not None:
            seen.append(copy.deepcopy(data))
        t0 = time.perf_counter()
        got = resolve(data)
        seen and seen[-1].setdefault("_record_s", time.perf_counter() - t0)
        return got

    userlocks.resolve = timed
    rc = cli.main(["run", *argv])
    userlocks.resolve = resolve
    results = []
    for data in seen:
        r = {"in_run_s": round(data.pop("_record_s", 0), 3), **measure(data)}
        results.append(r)
        print(json.dumps(r, indent=1), file=sys.stderr)
    if out_json:
        Path(out_json).write_text(json.dumps(results, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
