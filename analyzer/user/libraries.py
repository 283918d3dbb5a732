"""Which frames of a user stack are a library's (the C library, libstdc++,
Rust's std, parking_lot, a Go runtime) and which are the program's own: the
table is data (libraries.toml). A user-space lock is named by the program's
own frames; the library frames on top of its stack give its kind."""
from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from lockscope import tables

TABLE_FILE = Path(__file__).with_name("libraries.toml")


@dataclass(frozen=True)
class Library:
    name: str
    files: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()


def _regex(patterns: list[str]) -> re.Pattern | None:
    return re.compile("|".join(fnmatch.translate(p) for p in patterns)) if patterns else None


class Libraries:
    def __init__(self, path: Path = TABLE_FILE):
        self.libraries: list[Library] = tables.load(path, Library, "library")
        self._files = _regex([p for lib in self.libraries for p in lib.files])
        self._functions = _regex([p for lib in self.libraries for p in lib.functions])

    def is_library(self, file: str, function: str) -> bool:
        """Whether a frame (its file's base name, its demangled function)
        is a library's."""
        return bool((file and self._files and self._files.match(file)) or
                    (function and self._functions and self._functions.match(function)))

    def library_of(self, file: str, function: str) -> str | None:
        for lib in self.libraries:
            if any(fnmatch.fnmatchcase(file, p) for p in lib.files) or \
                    any(fnmatch.fnmatchcase(function, p) for p in lib.functions):
                return lib.name
        return None


@functools.lru_cache(maxsize=1)
def default() -> Libraries:
    return Libraries()
