"""The call paths of a JVM's lock waits as Java frames (usdt_stacks, walked
by probes/jvmframes.bpf.h from ObjectMonitor::EnterI or Unsafe_Park as HotSpot's
frame::sender does, with the layout read from the JVM's own VMStructs by
probes/jvmmon.c: through the interpreter and the JVM's C++ code by frame
pointer, through compiled code by each nmethod's frame size, its CodeBlob
found in the code heap's segment map; no JVM flag needed). A frame that
is a method's, interpreted or compiled, is its Method *, named in the probe
(jvm_methods: class and method); another return address into the code
cache is named by the JVM's perf map where the user had it write one
(/tmp/perf-PID.map: `jcmd PID Compiler.perfmap`, or
-XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit); the JVM's own C++
frames by its ELF symbols. The frames before the first Java one (the JVM's
monitor code, its runtime stubs) are not the program's and are dropped, as
are those past the last one that could be named."""
from __future__ import annotations

import bisect
import functools
import os
import re
from typing import Optional

from .addrspace import AddressSpace, parse_maps
from .userlocks import demangle_stacks
from lockscope.model.jsondata import from_list, parse_addr
from lockscope.model.loaderrows import JvmMethodRow, JvmStackRow
from lockscope.proberows import constant

METHOD_FRAME = constant("JVM_METHOD_FRAME")
PERF_MAP = "/tmp/perf-{pid}.map"
# a perf map's Java method: "void java.util.Hashtable.put(java.lang.Object, ...)"
# (JDK 17) or "java.util.Hashtable::put" (older agents); its stubs have no "("
_PERF_METHOD = re.compile(r"^(?:\S+ )?([\w$.<>/]+?)(?:::([\w$<>]+))?\(")
_HIDDEN = re.compile(r"[+/]0x[0-9a-f]+")     # a hidden class's address: Lambda+0x00007f.., Lambda/0x8000..
# the parts of the JDK a lock wait passes through on its way to the program
LOCK_INTERNALS = ("java.util.concurrent.locks.", "jdk.internal.misc.Unsafe.", "sun.misc.Unsafe.")


def method_name(cls: str, name: str) -> str:
    """'java.util.Hashtable.put' from the internal class name and the method's
    (a hidden class's address suffix dropped: Parking$$Lambda$1+0x00007f...)."""
    return f"{_HIDDEN.sub('', cls).replace('/', '.')}.{name}"


def perf_method(symbol: str) -> Optional[str]:
    """The Java method of a perf map's symbol ('JdkLocks.lambda$main$0'), or
    None for the JVM's stubs ('Interpreter', '_complete_monitor_locking_Java')."""
    m = _PERF_METHOD.match(symbol)
    if not m:
        return None
    return method_name(m.group(1), m.group(2)) if m.group(2) else _HIDDEN.sub("", m.group(1)).replace("/", ".")


class PerfMap:
    """A JIT's perf map: 'START SIZE symbol' lines, hex, by address."""

    def __init__(self, rows: list[tuple[int, int, str]]):
        rows.sort()
        self.rows = rows
        self._starts = [r[0] for r in rows]

    def symbol(self, addr: int) -> Optional[str]:
        """The symbol whose code holds `addr` (a return address: its call)."""
        i = bisect.bisect_right(self._starts, addr - 1) - 1
        if i >= 0 and self.rows[i][0] <= addr - 1 < self.rows[i][0] + self.rows[i][1]:
            return self.rows[i][2]
        return None


def parse_perf_map(text: str) -> PerfMap:
    rows = []
    for line in text.splitlines():
        parts = line.split(" ", 2)
        try:
            rows.append((int(parts[0], 16), int(parts[1], 16), parts[2].strip()))
        except (ValueError, IndexError):
            continue
    return PerfMap(rows)


@functools.lru_cache(maxsize=64)
def _perf_map_file(path: str, mtime_ns: int) -> PerfMap:
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_perf_map(f.read())


def perf_map(pid: int) -> Optional[PerfMap]:
    """Process pid's perf map, None where it wrote none."""
    path = PERF_MAP.format(pid=pid)
    try:
        return _perf_map_file(path, os.stat(path).st_mtime_ns)
    except OSError:
        return None


def _is_java(frame: str) -> bool:
    return not frame.startswith("[") and " [" not in frame


def java_frames(pcs: list[int], methods: dict[int, str], space: Optional[AddressSpace],
                pmap: Optional[PerfMap]) -> list[str]:
    """The frames of one call path, innermost first: Java methods by name,
    the JVM's own functions as 'func [libjvm.so]'-style symbols, an
    code the JIT made, unnamed, as '[JVM code cache]'; from the first Java
    frame out (all of them where there is none), to the last one named."""
    frames = []
    for pc in pcs:
        if pc & METHOD_FRAME:
            frames.append(methods.get(pc & ~METHOD_FRAME, "[interpreted Java method]"))
            continue
        sym = pmap.symbol(pc) if pmap else None
        if sym is not None:
            frames.append(perf_method(sym) or f"[{sym}]")
        elif space is not None and space.code_location(pc) is not None:
            frames.append(space.symbolize(pc))
        else:
            m = space.mapping(pc)[0] if space is not None else None
            frames.append("[JVM code cache]" if m is not None and not m.path else "[unknown]")
    first = next((i for i, f in enumerate(frames) if _is_java(f)), None)
    if first is None:
        return []            # the walk ended in the JVM (compiled code without frame pointers)
    frames = frames[first:]
    while frames and frames[-1] in ("[unknown]", "[JVM code cache]"):
        frames.pop()
    return frames


def site(frames: list[str]) -> str:
    """The program's method a wait was in: the first Java frame outside the
    JDK's lock code (ReentrantLock.lock -> AbstractQueuedSynchronizer ->
    LockSupport.park -> Unsafe.park are the way there), else the first."""
    java = [f for f in frames if _is_java(f)]
    return next((f for f in java if not f.startswith(LOCK_INTERNALS)), java[0] if java else
                (frames[0] if frames else ""))


def resolve_stacks(data: dict) -> dict[int, list[str]]:
    """The probe's usdt_stacks as frames, by their id (UsdtRow.stack)."""
    methods: dict[int, dict[int, str]] = {}
    for m in from_list(JvmMethodRow, data.get("jvm_methods") or []):
        methods.setdefault(m.tgid, {})[m.method] = method_name(m.cls, m.name)
    spaces: dict[int, Optional[AddressSpace]] = {}
    out: dict[int, list[str]] = {}
    for st in from_list(JvmStackRow, data.get("usdt_stacks") or []):
        if st.tgid not in spaces:
            rows = (data.get("user_maps") or {}).get(str(st.tgid))
            spaces[st.tgid] = AddressSpace(parse_maps(rows)) if rows else None
        out[st.id] = java_frames([parse_addr(p) for p in st.pcs], methods.get(st.tgid, {}), spaces[st.tgid],
                                 perf_map(st.tgid))
    demangle_stacks(out)
    return out
