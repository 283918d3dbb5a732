"""Kernel stack symbolization from /proc/kallsyms (text symbols of the kernel,
its modules and JIT-ed BPF programs)."""
from __future__ import annotations

import bisect
from pathlib import Path

from lockscope.errors import EnvironmentProblem
from lockscope.model.jsondata import parse_addr

# an address further than this past the nearest symbol is not inside it
_MAX_SYMBOL_SIZE = 1 << 20


def rows(path: Path | str = "/proc/kallsyms") -> list[list[str]]:
    """The lines of kallsyms, split: [address, type, name(, [module])]. The
    kernel writes the 100,000-odd lines anew at each read: a caller that
    needs the text symbols (Symbolizer), the image's markers and its
    variables (kimage) reads them once and hands the rows to each."""
    with open(path) as f:
        return split(f.read())


def split(text: str) -> list[list[str]]:
    """kallsyms' text as rows (rows() reads it; a caller that keeps the text
    to compare splits it here)."""
    return [line.split() for line in text.splitlines()]


class Symbolizer:
    def __init__(self, path: Path | str = "/proc/kallsyms", lines: list[list[str]] | None = None):
        entries = []
        for parts in rows(path) if lines is None else lines:
            if len(parts) < 3 or parts[1] not in "tTwW":
                continue
            entries.append((int(parts[0], 16), parts[2]))
        if not entries or all(a == 0 for a, _ in entries[:100]):
            raise EnvironmentProblem(
                f"{path} shows no addresses, so kernel stacks cannot be symbolized",
                "run as root, or set kernel.kptr_restrict=0")
        entries.sort()
        self._addrs = [a for a, _ in entries]
        self._names = [n for _, n in entries]
        self._cache: dict[int, str] = {}

    def with_extra(self, lines: list[list[str]]) -> "Symbolizer":
        """A copy that also knows these text symbols (the BPF programs'
        lines, which come and go as programs load)."""
        out = Symbolizer.__new__(Symbolizer)
        out._addrs, out._names, out._cache = list(self._addrs), list(self._names), {}
        for parts in lines:
            if len(parts) >= 3 and parts[1] in "tTwW":
                a = int(parts[0], 16)
                i = bisect.bisect_right(out._addrs, a)
                out._addrs.insert(i, a)
                out._names.insert(i, parts[2])
        return out

    def symbolize(self, addr: int) -> str:
        hit = self._cache.get(addr)
        if hit is None:
            i = bisect.bisect_right(self._addrs, addr) - 1
            if i < 0 or addr - self._addrs[i] > _MAX_SYMBOL_SIZE:
                hit = "[unknown]"
            else:
                hit = f"{self._names[i]}+0x{addr - self._addrs[i]:x}"
            self._cache[addr] = hit
        return hit

    def stack(self, addrs: list[str | int]) -> list[str]:
        return [self.symbolize(parse_addr(a)) for a in addrs]
