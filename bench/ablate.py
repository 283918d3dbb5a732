#!/usr/bin/env python3
"""A build of this tree's lockscope-probe in which chosen BPF programs return
at once: what is left of the cost is their tracepoint's dispatch. Compared
side by side with this tree's probe (bench/overhead.py --compare-probe), it
says what those programs' work costs the workload, where bench/probe_cost.py
says what they cost in CPU time.

    python3 bench/ablate.py lksc_switch,lksc_tasks_waking   # prints the binary
    python3 bench/ablate.py --hot        # every per-event program (waits, switches, wake-ups, samples)
    sudo python3 bench/overhead.py --workloads PMUTEX --compare-probe "$(python3 bench/ablate.py --hot)"

The build goes to a directory under /tmp named by the programs (made again
each time); the tree itself is not touched. Not a test.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOT = ["lksc_cont_begin", "lksc_cont_end", "lksc_switch", "lksc_tasks_waking", "lksc_cpu_sample"]


def ablate(source: str, name: str) -> str:
    """source with program `name` returning at once, behind a test the compiler
    cannot fold (`if (ctx)` would let it take ctx as NULL below, which the
    verifier refuses)"""
    m = re.search(r"^int (?:BPF_PROG\(" + name + r"\b[^)]*\)|" + name + r"\([^)]*\))\n\{\n", source, re.M)
    if not m:
        return source
    return source[:m.end()] + "\tif (bpf_get_smp_processor_id() < 0x7fffffff)\n\t\treturn 0;     /* bench/ablate.py */\n" + source[m.end():]


def build(names: list[str]) -> Path:
    out = Path("/tmp") / ("lockscope-ablate-" + "-".join(sorted(n.removeprefix("lksc_") for n in names)))
    shutil.rmtree(out, ignore_errors=True)
    for part in ("probes", "analyzer"):
        shutil.copytree(REPO / part, out / part, ignore=shutil.ignore_patterns("build", "__pycache__"))
    vmlinux = REPO / "probes" / "build" / "vmlinux.h"
    if vmlinux.exists():                       # saves a BTF dump
        (out / "probes" / "build").mkdir()
        shutil.copy(vmlinux, out / "probes" / "build" / "vmlinux.h")
    missing = set(names)
    for src in (out / "probes").glob("*.bpf.c"):
        text = src.read_text()
        for n in names:
            new = ablate(text, n)
            if new != text:
                missing.discard(n)
                text = new
        src.write_text(text)
    if missing:
        raise SystemExit(f"ablate.py: no BPF program named {', '.join(sorted(missing))} in probes/*.bpf.c")
    subprocess.run(["make", "-C", str(out / "probes"), "-s"], check=True, stdout=sys.stderr)
    return out / "probes" / "build" / "lockscope-probe"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="?", default="", help="comma-separated BPF program names")
    ap.add_argument("--hot", action="store_true", help="every per-event program: " + ", ".join(HOT))
    a = ap.parse_args()
    names = HOT if a.hot else [n for n in a.programs.split(",") if n]
    if not names:
        ap.error("name the programs, or --hot")
    print(build(names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
