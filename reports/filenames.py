"""File names made from names people gave: a workload (a catalog name, or a
command's --name), a file system. One slug function, with the rule of the
files it names, so that the names of existing reports and exports stay:

- PAGE (report pages, flame graphs): also takes "." and "_" off both ends,
  so that no page is a hidden file;
- EXPORT (exported figures): cut at 60 characters.

Both keep letters, digits, ".", "_" and "-" and write every other run of
characters as one "_"; the catalog's workload and file system names pass
through both unchanged."""
from __future__ import annotations

import re
from dataclasses import dataclass

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class SlugRule:
    strip: str = ""                 # characters taken off both ends
    max_len: int | None = None      # longer names are cut


PAGE = SlugRule(strip="._")
EXPORT = SlugRule(max_len=60)


def slug(text: str, rule: SlugRule = PAGE) -> str:
    return _UNSAFE.sub("_", text).strip(rule.strip)[:rule.max_len] or "x"


def experiment(workload: str, fs: str, rule: SlugRule = PAGE) -> str:
    """The base name of an experiment's files: <workload>-<fs>."""
    return f"{slug(workload, rule)}-{slug(fs, rule)}"
