"""Whether this machine has hardware cycle/instruction counters
(perf_event_open), and why not: CPI is reported as unavailable with that
reason, never guessed."""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform

_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "riscv64": 241, "ppc64le": 319, "s390x": 331}
PERF_TYPE_HARDWARE = 0
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1


class _PerfEventAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
                ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64),
                ("branch_sample_type", ctypes.c_uint64), ("sample_regs_user", ctypes.c_uint64),
                ("sample_stack_user", ctypes.c_uint32), ("clockid", ctypes.c_int32),
                ("sample_regs_intr", ctypes.c_uint64), ("aux_watermark", ctypes.c_uint32),
                ("sample_max_stack", ctypes.c_uint16), ("reserved", ctypes.c_uint16)]


def _open_counter(config: int) -> tuple[int, int]:
    """(fd, 0) or (-1, errno) for a system-wide counter on CPU 0."""
    nr = _NR_PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        return -1, errno.ENOSYS
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _PerfEventAttr(type=PERF_TYPE_HARDWARE, size=ctypes.sizeof(_PerfEventAttr), config=config,
                          flags=1)  # disabled
    fd = libc.syscall(nr, ctypes.byref(attr), -1, 0, -1, 0)
    return (fd, 0) if fd >= 0 else (-1, ctypes.get_errno())


@functools.lru_cache(maxsize=1)
def availability() -> tuple[bool, str]:
    for config, what in ((PERF_COUNT_HW_CPU_CYCLES, "cycles"), (PERF_COUNT_HW_INSTRUCTIONS, "instructions")):
        fd, err = _open_counter(config)
        if fd < 0:
            if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
                why = "the CPU or hypervisor exposes no hardware performance counters"
            elif err in (errno.EACCES, errno.EPERM):
                why = "not permitted (needs root or a lower kernel.perf_event_paranoid)"
            else:
                why = os.strerror(err)
            return False, f"perf_event_open({what}) failed: {os.strerror(err)}: {why}"
        os.close(fd)
    return True, "cycles and instructions counters available"


def cpi_status() -> dict:
    ok, why = availability()
    if not ok:
        return {"available": False, "reason": why}
    return {"available": False,
            "reason": "hardware counters exist here, but this lockscope version does not measure CPI yet"}
