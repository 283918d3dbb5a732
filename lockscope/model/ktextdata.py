"""Kernel text around the waits on static kernel locks, as kept in a run
record (`probe.raw.kernel_image.text_calls`; probes/ktext.c reads it): each
direct call just before a return address of such a wait's stack, with the
bytes before the return address and the called function's first bytes.
analyzer/kernel/ktext.py finds there the address a wrapper like
`rtnl_lock` loads for its lock. Documented in README.md, "Run record"."""
from __future__ import annotations

from dataclasses import dataclass, field

from lockscope.model.jsondata import HEX


@dataclass
class TextCall:
    ret: int = field(metadata=HEX)   # the return address in the caller
    caller: str = ""                 # it symbolized, as in RawProbe.stacks ("dev_ioctl+0x1a2")
    target: int = field(default=0, metadata=HEX)   # the function called (0: not a direct call)
    function: str = ""               # its name (kallsyms)
    caller_bytes: str = ""           # hex: the bytes before `ret` (the call is the last 5)
    target_bytes: str = ""           # hex: the first bytes of `target`
