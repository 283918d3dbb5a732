"""Writes probes/build/proberows.h from lockscope/proberows.toml (run by the
Makefile): the probe's structs and the loader's emit macro of each JSON row,
after checking each row against the dataclass of lockscope/model/probedata.py
that reads it (a mismatch is an error: the build stops).

usage: python3 gen_proberows.py [TABLE] > proberows.h
"""
from __future__ import annotations

import sys

from gensource import tree_module


def main(argv: list[str]) -> int:
    mod = tree_module("lockscope/proberows.py")
    f = mod.load(argv[1]) if len(argv) > 1 else mod.load()
    from lockscope.model import probedata      # the tree's, on the path proberows.py put first
    bad = mod.check(f, probedata)
    if bad:
        sys.stderr.write("".join(f"gen_proberows.py: {b}\n" for b in bad))
        return 1
    sys.stdout.write(mod.c_header(f))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
