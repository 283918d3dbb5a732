"""A child process that talks in JSON lines on stdout and takes commands on
stdin, read with timeouts so that a hung child never hangs lockscope."""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from typing import Callable, Sequence

from lockscope.machine import ownership, watchdog
from lockscope.errors import LockscopeError


# the gate: a shell that waits for one line on fd 3, then execs the command
# in place (same pid), with fd 3 closed; EOF (the parent gave up) exits
_GATE = 'read _ <&3 || exit 127; exec 3<&- "$@"'


def spawn_gated(argv: Sequence[str], before_exec: Callable[[int], None] | None, **popen_kw) -> subprocess.Popen:
    """Start `argv` held just before its exec, call `before_exec(pid)` (e.g. to
    add the pid to the probe's filter), then let it exec. Nothing the command
    does, forks included, escapes the filter."""
    if before_exec is None:
        proc = subprocess.Popen(list(argv), **popen_kw)
        _guard(proc, popen_kw)
        return proc
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", _GATE, "lockscope-gate", *argv],
                                pass_fds=(3,), preexec_fn=(lambda: os.dup2(r, 3)),
                                **popen_kw)
    except BaseException:
        os.close(w)
        raise
    finally:
        os.close(r)
    _guard(proc, popen_kw)
    try:
        before_exec(proc.pid)
        os.write(w, b"go\n")
    except BaseException:
        kill_group(proc)
        raise
    finally:
        os.close(w)
    return proc


def _guard(proc: subprocess.Popen, popen_kw: dict) -> None:
    """A child in a process group of its own dies with lockscope, SIGKILL
    included (lockscope/machine/watchdog.py)."""
    if popen_kw.get("start_new_session"):
        _guarded[proc.pid] = watchdog.guard_group(proc.pid)


_guarded: dict[int, dict | None] = {}     # pid of a group leader -> its ledger item


def _forget_if_gone(proc: subprocess.Popen) -> None:
    """A group with no process left leaves the ledger."""
    item = _guarded.get(proc.pid)
    if item is not None and not ownership.group_members(item["pgid"], item["start"]):
        del _guarded[proc.pid]
        ownership.released(item)


def kill_group(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """SIGTERM the child's process group, SIGKILL after `grace` seconds, reap;
    then SIGKILL what is left of the group it recorded (a server's workers
    outliving their leader)."""
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    _kill_stragglers(proc)
    _forget_if_gone(proc)


def _kill_stragglers(proc: subprocess.Popen) -> None:
    item = _guarded.get(proc.pid)
    if item is None or proc.poll() is None:
        return
    deadline = time.monotonic() + 5.0
    while ownership.group_members(item["pgid"], item["start"]) and time.monotonic() < deadline:
        try:
            os.killpg(item["pgid"], signal.SIGKILL)       # its members started after it: the group is the one made
        except ProcessLookupError:
            return
        time.sleep(0.05)


class JsonLinesProcess:
    """Base of the probe and workload sessions."""

    what = "process"

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._buf = b""
        self._sel: selectors.BaseSelector | None = None
        self._stderr = tempfile.TemporaryFile()

    def _spawn(self, argv: Sequence[str], before_exec: Callable[[int], None] | None = None) -> None:
        self.proc = spawn_gated(argv, before_exec, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=self._stderr, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    def stderr_tail(self, limit: int = 2000) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-limit:].strip()

    def send(self, line: str) -> None:
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise LockscopeError(f"{self.what} exited unexpectedly: {self._exit_reason()}") from None

    def _exit_reason(self) -> str:
        rc = self.proc.poll()
        tail = self.stderr_tail()
        status = f"exit code {rc}" if rc is not None and rc >= 0 else (
            f"killed by signal {-rc}" if rc is not None else "still running")
        return f"{status}" + (f"; it said: {tail}" if tail else "")

    def read_event(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1:]
                if not line.strip():
                    continue
                try:
                    return json.loads(line.decode(errors="replace"))
                except json.JSONDecodeError as e:
                    raise LockscopeError(f"{self.what} wrote a line that is not JSON: {line[:200]!r}") from e
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockscopeError(f"{self.what} did not answer within {timeout:.0f} s")
            if self._sel.select(timeout=min(left, 1.0)):
                chunk = self.proc.stdout.read(1 << 20)
                if chunk:
                    self._buf += chunk
                    continue
                if chunk == b"":
                    self.proc.wait(timeout=5)
                    raise LockscopeError(f"{self.what} exited unexpectedly: {self._exit_reason()}")

    def expect(self, event: str, timeout: float) -> dict:
        """Read events until `event`; an "error" event raises."""
        while True:
            ev = self.read_event(timeout)
            if ev.get("event") == event:
                return ev
            if ev.get("event") == "error":
                self.on_error(ev)
            else:
                self.on_other(ev)

    def on_other(self, ev: dict) -> None:
        """An event `expect` was not waiting for (progress, acknowledgements):
        ignored unless a subclass keeps it."""

    def on_error(self, ev: dict) -> None:
        raise LockscopeError(f"{self.what}: {ev.get('message', ev)}")

    def close(self, quit_line: str | None = None, grace: float = 5.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None and quit_line:
            try:
                self.proc.stdin.write((quit_line + "\n").encode())
                self.proc.stdin.close()
                self.proc.wait(timeout=grace)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        kill_group(self.proc)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except (OSError, BrokenPipeError):
                pass
        if self._sel:
            self._sel.close()
        self._stderr.close()
        self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
