"""The probe session: runs lockscope-probe (libbpf loader of the contention,
off-CPU and object-iterator programs) and drives it over its JSON-lines
protocol. The programs detach when the loader exits, whatever the cause."""
from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

from lockscope import paths
from lockscope.measure import targets
from lockscope.analyzer.user import usdt
from lockscope.errors import EnvironmentProblem, LockscopeError
from lockscope.measure.jsonlines import JsonLinesProcess

BTF = Path("/sys/kernel/btf/vmlinux")
# on-CPU samples per second per CPU: they measure rwsem spinning, which no
# tracepoint sees, and make the CPU flame graph. Each costs an interrupt, the
# probe's only measurable cost on a hand-off workload (bench/README.md, "The
# default sample rate"): PMUTEX on 2 vCPUs kept 0.93-0.95 of its throughput at
# 49 Hz (bcc profile's default), 0.96-0.97 at 19 Hz, 0.99-1.01 with none; the
# diagnoses of the ground-truth workloads were the same at 19 and 49 Hz.
DEFAULT_SAMPLE_HZ = 19
# `attach`'s cost budget (--max-overhead), in percent of the machine's CPUs: an operator attaching
# to a live server expects a profiler to take little of it (issue 43); `run` and `sweep` measure
# at full precision unless given one
DEFAULT_ATTACH_BUDGET = 3.0


def preflight() -> None:
    """What the probes need, checked before anything is created."""
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "lockscope needs root: it loads BPF programs and mounts file systems",
            "run it with sudo (or as root)")
    if not BTF.exists():
        raise EnvironmentProblem(
            f"{BTF} is missing: this kernel has no BTF type information, which the CO-RE probes need",
            "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y")


def _fix_for(ev: dict) -> str | None:
    err = ev.get("errno")
    stage = ev.get("stage")
    if stage == "preflight":
        return "use a kernel with the lock:contention_begin/end tracepoints (Linux 5.19+)"
    if err in (errno.EPERM, errno.EACCES):
        return ("run as root; if you are root, check kernel.unprivileged_bpf_disabled, lockdown "
                "(/sys/kernel/security/lockdown) and seccomp/container limits")
    if err == errno.ENOENT:
        return "the kernel lacks a tracepoint or BTF type the probes attach to; run `lockscope doctor`"
    return "run `lockscope doctor` for what this kernel supports"


class ProbeSession(JsonLinesProcess):
    what = "lockscope-probe"

    def __init__(self, system_wide: bool = False, interval_ms: int = 1000, sample_hz: int = DEFAULT_SAMPLE_HZ,
                 futex: bool = True, series_ms: int | None = None, timed_rate: int | None = None,
                 max_overhead: float | None = None):
        super().__init__()
        # the cost budget in percent of the machine's CPUs (None: none): the loader sheds sampling
        # rates to keep it (probes/budget.c)
        self.max_overhead = max_overhead
        # spin and mutex waits timed per second per CPU before the rest are
        # sampled (None: the loader's default; 0: every wait timed)
        self.timed_rate = timed_rate
        self.series_ms = series_ms    # the time view's snapshot period (None: the loader's default, 0: none)
        self.system_wide = system_wide
        self.futex = futex            # also trace futex waits (user-space locks)
        self.interval_ms = interval_ms
        self.sample_hz = sample_hz
        self.ready: dict = {}
        self._cpu0 = 0                         # this process's CPU time at the window's start (its cost)
        self.tracked: set[int] = set()         # tgids handed to track()
        self.usdt_paths: set[str] = set()      # binaries whose USDT lock probes are attached (or failed)
        self.usdt_errors: list[str] = []

    def __enter__(self) -> "ProbeSession":
        self.begin()
        return self.wait_ready()

    def begin(self) -> None:
        """Start loading the probes (a third of a second here, most of it
        the kernel's verifier); wait_ready() waits for them. What a caller does between
        the two overlaps the load (confirm starts its workload)."""
        argv = [str(paths.probe_binary()), "--interval-ms", str(self.interval_ms),
                "--sample-hz", str(self.sample_hz)]
        if self.system_wide:
            argv.append("--system-wide")
        if self.futex:
            argv.append("--futex")
        if self.series_ms is not None:
            argv += ["--series-ms", str(self.series_ms)]
        if self.timed_rate is not None:
            argv += ["--timed-rate", str(self.timed_rate)]
        if self.max_overhead:
            argv += ["--max-overhead", f"{self.max_overhead:g}"]
        self._spawn(argv)

    def wait_ready(self) -> "ProbeSession":
        try:
            self.ready = self.expect("ready", timeout=60)
        except BaseException:
            self.close()
            raise
        return self

    def on_error(self, ev: dict) -> None:
        if ev.get("stage") in ("load", "preflight", "init"):
            tail = self.stderr_tail(600)
            msg = ev.get("message", "loading the probes failed")
            if tail:
                msg += f" (libbpf: {tail.splitlines()[-1]})"
            raise EnvironmentProblem(msg, _fix_for(ev))
        raise LockscopeError(f"lockscope-probe: {ev.get('message', ev)}")

    def track(self, pid: int) -> None:
        self.send(f"track {pid}")
        self.expect("tracked", timeout=10)
        self.tracked.add(pid)
        self.attach_usdt(pid)

    def attach_usdt(self, pid: int) -> None:
        """Attach the USDT lock probes the table (analyzer/user/usdt.toml) lists
        for the executable of `pid` and the libraries it maps (a JVM's
        libjvm.so), once per binary, for every process
        running it (usdt.bpf.c counts only tracked ones). A probe that does
        not attach is kept as a note (usdt_errors), not an error."""
        exe = usdt.executable(pid)
        for path in ([exe] if exe else []) + usdt.mapped_code(pid):
            if path not in self.usdt_paths and "\n" not in path:
                self.usdt_paths.add(path)
                self._attach_usdt_to(path)

    def _attach_usdt_to(self, exe: str) -> None:
        for spec in usdt.default().probes_for(exe):
            for i, suffix in enumerate(spec.name_suffixes):   # the names that are its waits, first
                self._usdt_command(f"usdt suffix {spec.entry} {i} {suffix}", "usdt_suffix")
            for what, name, cookie in spec.attachments:
                self._usdt_command(f"usdt {what} {cookie} {spec.probe_provider} {name} {exe}", "usdt_attached")

    def _usdt_command(self, line: str, done: str) -> None:
        self.send(line)
        while True:
            ev = self.read_event(30)
            if ev.get("event") == done:
                break
            if ev.get("event") == "error" and ev.get("stage") == "usdt":
                self.usdt_errors.append(ev.get("message", "usdt probe not attached"))
                break
            if ev.get("event") == "error":
                self.on_error(ev)

    def rescan_usdt(self) -> None:
        """The tracked processes and their descendants, again: a tracked
        command that exec'd a program with USDT probes since it was tracked
        (`run -- CMD` starting a server); system-wide, every process."""
        if self.system_wide:     # every process counts: every executable running now
            seen = {int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()}
        else:
            seen = targets.descendants(set(self.tracked))
        for pid in seen:
            self.attach_usdt(pid)

    def untrack(self, pid: int) -> None:
        """Stop counting a process (its children stay tracked): the driver
        sleeps through the window while its workers run."""
        self.send(f"untrack {pid}")
        self.expect("untracked", timeout=10)

    def watch(self, path: str) -> bool:
        """Hold a path so its locks can be named; a path that vanished is not
        an error (returns False)."""
        if "\n" in path:
            return False
        self.send(f"watch {path}")
        while True:
            ev = self.read_event(10)
            if ev.get("event") == "watched":
                return True
            if ev.get("event") == "error" and ev.get("stage") == "watch":
                return False
            if ev.get("event") == "error":
                self.on_error(ev)

    def start(self) -> dict:
        self.rescan_usdt()
        self.send("start")
        started = self.expect("started", timeout=30)
        self._cpu0 = time.process_time_ns()
        return started

    def stop(self) -> dict:
        cpu = time.process_time_ns() - self._cpu0 if self._cpu0 else 0
        self.send("stop")
        data = self.expect("data", timeout=120)
        full_names(data.get("tasks") or [])
        if isinstance(data.get("cost"), dict):
            data["cost"]["lockscope_cpu_ns"] = cpu
        return data

    def reset(self) -> None:
        """Forget the tracked processes and the watched paths (which hold
        their file system mounted): the loaded probe is ready for the next
        measurement of a sweep, without the third of a second that
        loading it again takes (the kernel's verifier, mostly)."""
        self.send("reset")
        self.expect("reset", timeout=30)
        self.tracked.clear()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self, quit_line: str | None = "quit", grace: float = 5.0) -> None:
        super().close(quit_line, grace)

    def __exit__(self, *exc) -> None:
        self.close()


class LoadedProbes:
    """Probe sessions kept loaded across the points of a sweep, one per
    (system_wide, sample_hz, max_overhead): each point gets a session and, on its way out
    (before its file system is unmounted), the session forgets the point's
    processes and paths (ProbeSession.reset). A session that died or could
    not be reset is closed and the next point loads a new one. Each
    window's aggregates start empty (the probe's `start` clears them)."""

    def __init__(self) -> None:
        self._sessions: dict[tuple, ProbeSession] = {}

    def use(self, stack: contextlib.ExitStack, system_wide: bool, sample_hz: int,
            max_overhead: float | None = None) -> ProbeSession:
        key = (system_wide, sample_hz, max_overhead)
        s = self._sessions.pop(key, None)
        if s is not None and not s.alive():
            s.close()
            s = None
        if s is None:
            s = ProbeSession(system_wide, sample_hz=sample_hz, max_overhead=max_overhead).__enter__()
        stack.callback(self._release, key, s)
        return s

    def _release(self, key: tuple, s: ProbeSession) -> None:
        try:
            s.reset()
        except LockscopeError:
            s.close()
            return
        self._sessions[key] = s

    def close(self) -> None:
        while self._sessions:
            self._sessions.popitem()[1].close()

    def __enter__(self) -> "LoadedProbes":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def session(stack: contextlib.ExitStack, loaded: LoadedProbes | None, system_wide: bool,
            sample_hz: int, max_overhead: float | None = None) -> ProbeSession:
    """A probe session for one point: from `loaded` (a sweep's), else its own,
    closed with `stack`."""
    if loaded is not None:
        return loaded.use(stack, system_wide, sample_hz, max_overhead)
    return stack.enter_context(ProbeSession(system_wide, sample_hz=sample_hz, max_overhead=max_overhead))


COMM_LEN = 15                   # the kernel keeps a task's name in 16 bytes, NUL included


def full_names(tasks: list[dict]) -> None:
    """Task names the kernel cut to 15 bytes (`lockscope-workl`) made whole
    from the program's file (/proc/TGID/exe: `lockscope-workload`) while
    the processes still run, where the file's name starts with the cut name."""
    exe: dict[int, str] = {}
    for t in tasks:
        tgid, process = t.get("tgid"), t.get("process") or ""
        if len(process) != COMM_LEN or not tgid:
            continue
        if tgid not in exe:
            try:
                exe[tgid] = os.path.basename(os.readlink(f"/proc/{tgid}/exe")).removesuffix(" (deleted)")
            except OSError:
                exe[tgid] = ""
        name = exe[tgid]
        if len(name) > COMM_LEN and name.startswith(process):
            if t.get("comm") == process:
                t["comm"] = name
            t["process"] = name
