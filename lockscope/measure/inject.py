"""lockscope-inject (probes/inject.c), driven from Python: busy waits added
inside one lock's critical sections, or just outside them, in the tracked
processes; and the counts of what was added. The BPF programs belong to the
child process: when it exits, killed or not, nothing stays injected.

    with InjectSession() as inj:
        inj.track(pid); inj.kernel_lock(0xffff888102bbc044)
        inj.delay(inside_ns=2000); time.sleep(1); inj.counts()
"""
from __future__ import annotations

from dataclasses import dataclass

from lockscope import paths
from lockscope.errors import EnvironmentProblem, LockscopeError
from lockscope.measure.jsonlines import JsonLinesProcess

# the loader's caps (probes/inject.c)
MAX_KERNEL_NS = 100_000
MAX_USER_NS = 1_000_000


@dataclass
class Counts:
    t_ns: int
    inside: int
    inside_ns: int
    outside: int
    outside_ns: int

    def __sub__(self, other: "Counts") -> "Counts":
        return Counts(*(a - b for a, b in zip(vars(self).values(), vars(other).values())))


class InjectSession(JsonLinesProcess):
    what = "lockscope-inject"

    def __enter__(self) -> "InjectSession":
        self._spawn([str(paths.inject_binary())])
        try:
            self.expect("ready", timeout=60)
        except BaseException:
            self.close()
            raise
        return self

    def on_error(self, ev: dict) -> None:
        if ev.get("stage") in ("load", "attach"):
            tail = self.stderr_tail(600)
            raise EnvironmentProblem(ev.get("message", "loading the injection programs failed")
                                     + (f" (libbpf: {tail.splitlines()[-1]})" if tail else ""),
                                     "run as root on a kernel with BTF and the lock tracepoints "
                                     "(lockscope doctor says which is missing)")
        raise LockscopeError(f"lockscope-inject: {ev.get('message', ev)}")

    def _command(self, line: str) -> None:
        self.send(line)
        self.expect("ok", timeout=10)

    def track(self, tgid: int) -> None:
        self._command(f"track {tgid}")

    def kernel_lock(self, addr: int, every_mmap_lock: bool = False) -> None:
        """Waits at its contended acquisitions; every_mmap_lock: an mm's
        mmap_lock, at every acquisition (its own tracepoints)."""
        self._command(f"lock {addr:x}" + (" mmap" if every_mmap_lock else ""))

    def file_lock(self, inode: int) -> None:
        """The locks of the file whose inode is at `inode`: waits after every
        acquisition, and for the control after every release."""
        self._command(f"lock {inode:x} file")

    def tick_lock(self, addr: int, rwsem: bool, hz: int) -> None:
        """The one kernel mutex or rwsem delayed at timer ticks, hz per CPU,
        while its owner runs (the control while a tracked task runs
        without it)."""
        self._command(f"tick {addr:x} {'rwsem' if rwsem else 'mutex'} {hz}")

    def user_lock(self, path: str, acquire_off: int, release_off: int, tgid: int, addr: int,
                  go: bool = False) -> None:
        if any(c.isspace() for c in path):
            raise LockscopeError(f"cannot probe a binary whose path has white space: {path!r}")
        self._command(f"ulock {path} {acquire_off:x} {release_off:x} {tgid} {addr:x} {int(go)}")

    def contended_user_lock(self, path: str, acquire_off: int, wake_off: int, tgid: int, addr: int) -> None:
        """A user lock reached by its contended paths only: the inside wait
        on return from its contended acquire, the outside one on return
        from its wake-up of a waiter."""
        if any(c.isspace() for c in path):
            raise LockscopeError(f"cannot probe a binary whose path has white space: {path!r}")
        self._command(f"ulock_contended {path} {acquire_off:x} {wake_off:x} {tgid} {addr:x}")

    def delay(self, inside_ns: int = 0, outside_ns: int = 0) -> None:
        self._command(f"delay inside {int(inside_ns)}")
        self._command(f"delay outside {int(outside_ns)}")

    def counts(self) -> Counts:
        self.send("read")
        ev = self.expect("counts", timeout=10)
        return Counts(ev["t_ns"], ev["inside"], ev["inside_ns"], ev["outside"], ev["outside_ns"])

    def close(self, quit_line: str | None = "quit", grace: float = 5.0) -> None:
        super().close(quit_line, grace)
