"""The Jinja2 environment of lockscope's pages (templates/): every value
escaped, a missing name an error, and the number filters and tests the
templates use."""
from __future__ import annotations

import jinja2

from ..analyzer import results


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
    env.filters["missing"] = results.missing              # why a part of the analysis is unavailable
    env.tests["unavailable"] = lambda x: isinstance(x, results.Unavailable)
    return env
