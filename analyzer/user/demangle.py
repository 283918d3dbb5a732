"""C++ and Rust symbol names as people read them.

`_ZN7rocksdb14ThreadPoolImpl4Impl8BGThreadEm` becomes
`rocksdb::ThreadPoolImpl::Impl::BGThread(unsigned long)`. The demangler is
GNU binutils' `c++filt` (Debian package binutils), which reads the C++
Itanium ABI and both Rust manglings (legacy `_ZN...17h<hash>E` and v0
`_R...`); all names of a run go to one `c++filt` process. Two things people
do not read are dropped afterwards, as rustc-demangle's short form does: the
`::h<16 hex digits>` hash of a Rust legacy name and the `[<hex>]` crate
disambiguators of a v0 name. Without `c++filt` names stay as they are and
`unavailable()` says why."""
from __future__ import annotations

import functools
import re
import shutil
import subprocess
from typing import Iterable

CXXFILT = "c++filt"
_MANGLED = re.compile(r"^_{1,2}[ZR]")
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_CRATE_DISAMBIGUATOR = re.compile(r"\[[0-9a-f]{1,16}\]")


def is_mangled(name: str) -> bool:
    return bool(_MANGLED.match(name))


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why names cannot be demangled here, or None."""
    if shutil.which(CXXFILT) is None:
        return f"{CXXFILT} not found (Debian package binutils): C++ and Rust names are shown mangled"
    return None


def _tidy(name: str) -> str:
    return _CRATE_DISAMBIGUATOR.sub("", _RUST_HASH.sub("", name))


def demangle_all(names: Iterable[str]) -> dict[str, str]:
    """Mangled name -> readable name, for every mangled name given (one
    c++filt run); a name c++filt does not change maps to itself."""
    todo = sorted({n for n in names if is_mangled(n) and "\n" not in n})
    if not todo or unavailable():
        return {n: n for n in todo}
    try:
        out = subprocess.run([CXXFILT], input="\n".join(todo) + "\n", capture_output=True, text=True,
                             timeout=60, check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in todo}
    if len(out) != len(todo):
        return {n: n for n in todo}
    return {n: (_tidy(d) if d != n else n) for n, d in zip(todo, out)}


def demangle(name: str) -> str:
    """One name (a c++filt run of its own: for many, use demangle_all)."""
    return demangle_all([name]).get(name, name)
