"""Hardware cycle and instruction counters (perf_event_open) for CPI:
whether this machine has them, and why not (CPI is then reported as
unavailable with that reason, never guessed), and `CpiCounters`, which
counts cycles and instructions system-wide on the measured CPUs over the
timed window.

perf_event_open through ctypes rather than `perf stat`: the counters are
enabled and disabled by ioctl at the same moments as the /proc/stat samples
of the window (no subprocess start-up or teardown inside it), and it does not
depend on a linux-perf binary matching the running kernel."""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import struct
from dataclasses import dataclass

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


PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_GROUP = 1 << 3
PERF_IOC_FLAG_GROUP = 1
PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_DISABLE = 0x2401
PERF_EVENT_IOC_RESET = 0x2403
PERF_FLAG_FD_CLOEXEC = 1 << 3


def _open_on_cpu(config: int, cpu: int, type_: int = PERF_TYPE_HARDWARE, leader: int = -1) -> tuple[int, int]:
    """(fd, 0) or (-1, errno): a system-wide counter on `cpu`. Without
    `leader`, a disabled group leader whose read gives every member's value
    with the group's time enabled and running; with it, a member of that
    group, which counts exactly when its leader does (enabled and disabled
    with it, scheduled with it onto the CPU)."""
    nr = _NR_PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        return -1, errno.ENOSYS
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _PerfEventAttr(type=type_, size=ctypes.sizeof(_PerfEventAttr), config=config,
                          read_format=PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED |
                          PERF_FORMAT_TOTAL_TIME_RUNNING,
                          flags=1 if leader < 0 else 0)  # the leader disabled, its member enabled
    fd = libc.syscall(nr, ctypes.byref(attr), -1, cpu, leader, PERF_FLAG_FD_CLOEXEC)
    return (fd, 0) if fd >= 0 else (-1, ctypes.get_errno())


def _why(err: int, what: str) -> str:
    """Why perf_event_open of `what` failed with `err`, in one line."""
    if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        why = "the CPU or hypervisor exposes no hardware performance counters"
    elif err in (errno.EACCES, errno.EPERM):
        why = "not permitted (needs root or a lower kernel.perf_event_paranoid)"
    else:
        why = os.strerror(err)
    return f"perf_event_open({what}) failed: {os.strerror(err)}: {why}"


@functools.lru_cache(maxsize=1)
def availability() -> tuple[bool, str]:
    for config, what in ((PERF_COUNT_HW_CPU_CYCLES, "cycles"), (PERF_COUNT_HW_INSTRUCTIONS, "instructions")):
        fd, err = _open_on_cpu(config, 0)
        if fd < 0:
            return False, _why(err, what)
        os.close(fd)
    return True, "cycles and instructions counters available"


def cpi_status() -> dict:
    """CPI of a run that did not count (a record made without CpiCounters)."""
    ok, why = availability()
    if not ok:
        return {"available": False, "reason": why}
    return {"available": False, "reason": "the counters were not started for this run"}


@dataclass
class Count:
    """One counter's reading: value, and the times it was enabled and running
    (less running than enabled: the kernel multiplexed it)."""
    value: int
    enabled_ns: int
    running_ns: int

    @property
    def scaled(self) -> float | None:
        if self.running_ns <= 0:
            return None
        return self.value * (self.enabled_ns / self.running_ns)


def cpi_from_counts(per_cpu: dict[int, tuple[Count, Count]]) -> dict:
    """The record's `cpi` from (cycles, instructions) per CPU: cycles over
    instructions summed over the CPUs, each scaled for multiplexing."""
    rows, cyc, ins = [], 0.0, 0.0
    multiplexed = False
    for cpu in sorted(per_cpu):
        c, i = per_cpu[cpu]
        sc, si = c.scaled, i.scaled
        if sc is None or si is None:
            return {"available": False, "reason": f"the counters of CPU {cpu} never ran in the window "
                                                  "(taken by other perf users)"}
        multiplexed |= c.running_ns < c.enabled_ns or i.running_ns < i.enabled_ns
        rows.append({"cpu": cpu, "cycles": round(sc), "instructions": round(si),
                     "cpi": sc / si if si > 0 else None})
        cyc += sc
        ins += si
    if not rows:
        return {"available": False, "reason": "no CPU was measured"}
    if ins <= 0:
        return {"available": False, "reason": "no instructions were counted in the window"}
    return {"available": True, "value": cyc / ins, "cycles": round(cyc), "instructions": round(ins),
            "cpus": [r["cpu"] for r in rows], "per_cpu": rows, "multiplexed": multiplexed,
            "scope": "system-wide on the measured CPUs, over the timed window"}


def _read_group(leader: int) -> tuple[Count, Count]:
    """The two members' counts of a group, with the group's times
    (PERF_FORMAT_GROUP: nr, time enabled, time running, then each value)."""
    nr, enabled, running, first, second = struct.unpack("5Q", os.read(leader, 40))
    assert nr == 2, nr
    return Count(first, enabled, running), Count(second, enabled, running)


class CpiCounters:
    """Cycles and instructions on `cpus`, every task (system-wide), between
    start() and stop(). Where the machine has no counters, result() is the
    reason; nothing raises. The two counters of a CPU are one perf group:
    started, stopped and multiplexed together, so their ratio is over the same
    instants (two separate counters, enabled one ioctl after the other, were
    apart by up to 4% of a 0.1-s window on this VM)."""

    # (perf type, config, name) of the two counters: CPI = first / second
    EVENTS = ((PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "cycles"),
              (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "instructions"))

    def __init__(self, cpus: list[int]):
        self.cpus = sorted(set(cpus))
        self.fds: dict[int, tuple[int, int]] = {}
        self.reason: str | None = None
        self.counts: dict[int, tuple[Count, Count]] | None = None

    def __enter__(self) -> "CpiCounters":
        if not self.cpus:
            self.reason = "no CPUs to measure"
            return self
        for cpu in self.cpus:
            fds: list[int] = []
            for type_, config, what in self.EVENTS:
                fd, err = _open_on_cpu(config, cpu, type_, fds[0] if fds else -1)
                if fd < 0:
                    for f in fds:
                        os.close(f)
                    self.close()
                    self.reason = _why(err, what)
                    return self
                fds.append(fd)
            self.fds[cpu] = (fds[0], fds[1])
        return self

    def _ioctl_leaders(self, req: int, arg: int = 0) -> None:
        import fcntl
        for leader, _ in self.fds.values():
            fcntl.ioctl(leader, req, arg)

    def start(self) -> None:
        if self.fds:
            self._ioctl_leaders(PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP)
            self._ioctl_leaders(PERF_EVENT_IOC_ENABLE)

    def stop(self) -> None:
        if not self.fds:
            return
        self._ioctl_leaders(PERF_EVENT_IOC_DISABLE)
        self.counts = {cpu: _read_group(leader) for cpu, (leader, _) in self.fds.items()}

    def result(self) -> dict:
        if self.reason:
            return {"available": False, "reason": self.reason}
        if self.counts is None:
            return {"available": False, "reason": "the counters were not read (the window did not finish)"}
        return cpi_from_counts(self.counts)

    def close(self) -> None:
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)
        self.fds = {}

    def __exit__(self, *exc) -> None:
        self.close()
