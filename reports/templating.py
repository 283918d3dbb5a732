"""The Jinja2 environment of lockscope's pages (templates/): every value
escaped, a missing name an error, and the number filters and tests the
templates use."""
from __future__ import annotations

from dataclasses import dataclass, field

import jinja2

from lockscope.analyzer import cost, results


@dataclass
class StackRow:
    """Stacks of a lock that print the same line (their first two frames
    and syscall), merged: their waits summed, their full stacks listed."""
    summary: str
    wait_ns: int = 0
    count: int = 0
    stacks: list[list[str]] = field(default_factory=list)


def merge_stacks(stacks) -> list[StackRow]:
    rows: dict[str, StackRow] = {}
    for st in stacks:
        line = (" ← ".join(st.frames[:2]) or st.site) + (f" [{st.syscall}]" if st.syscall else "")
        row = rows.setdefault(line, StackRow(line))
        row.wait_ns += st.wait_ns
        row.count += st.count
        if st.frames not in row.stacks:
            row.stacks.append(st.frames)
    return sorted(rows.values(), key=lambda r: -r.wait_ns)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("lockscope.templates", "."),
                             autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = lambda x, d=1: "-" if x is None else f"{x * 100:.{d}f}%"
    env.filters["num"] = lambda x: "-" if x is None else f"{x:,.0f}"
    env.filters["f2"] = lambda x: "-" if x is None else f"{x:.2f}"
    env.filters["ms"] = lambda ns: f"{(ns or 0) / 1e6:,.2f} ms"
    env.filters["us"] = lambda ns: f"{(ns or 0) / 1e3:,.1f} µs"
    env.filters["plural"] = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"
    env.filters["merge_stacks"] = merge_stacks
    env.filters["missing"] = results.missing              # why a part of the analysis is unavailable
    env.filters["own_cost"] = lambda rec: (lambda c: cost.describe(c) if c else None)(cost.own_cost(rec))
    env.tests["unavailable"] = lambda x: isinstance(x, results.Unavailable)
    return env
