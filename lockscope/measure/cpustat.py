"""CPU time breakdown of chosen CPUs over a window, from per-CPU /proc/stat
lines (not the aggregate line: unused CPUs would dilute it)."""
from __future__ import annotations

from pathlib import Path

from lockscope.model.record import CpuBreakdown

# /proc/stat per-CPU columns: user nice system idle iowait irq softirq steal guest guest_nice
# (guest time is already included in user)


def sample(path: Path = Path("/proc/stat")) -> dict[int, list[int]]:
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            parts = line.split()
            out[int(parts[0][3:])] = [int(x) for x in parts[1:9]]
    return out


def breakdown(before: dict[int, list[int]], after: dict[int, list[int]],
              cpus: list[int] | None = None) -> CpuBreakdown:
    cpus = sorted(cpus if cpus else after.keys())
    tot = [0] * 8
    for c in cpus:
        if c in before and c in after:
            for i in range(8):
                tot[i] += after[c][i] - before[c][i]
    user, nice, system, idle, iowait, irq, softirq, steal = tot
    whole = sum(tot)
    if whole <= 0:
        return CpuBreakdown(cpus=cpus)
    return CpuBreakdown(
        user=(user + nice) / whole, sys=system / whole, idle=idle / whole,
        iowait=iowait / whole, irq=(irq + softirq) / whole, steal=steal / whole, cpus=cpus)
