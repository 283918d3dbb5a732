"""A server an application workload's command is a client of ([app.server]
in apps.toml, e.g. PostgreSQL for pgbench), started fresh for each point on
its file system and stopped after it.

The server runs as its unprivileged user (the file system's mountpoint is
given to that user), in a process group of its own that the watchdog kills
if lockscope dies (jsonlines.spawn_gated with start_new_session). On every
other exit path (the point's end, an error, Ctrl-C or SIGTERM unwinding the
point) the stop command runs, and the group is killed if the server has not
exited STOP_GRACE_S later. Only this server is touched: nothing else of its
kind on the machine."""
from __future__ import annotations

import os
import pwd
import shlex
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from lockscope.errors import EnvironmentProblem, LockscopeError
from lockscope.measure.apps import fill_text
from lockscope.measure.jsonlines import kill_group, spawn_gated

READY_TIMEOUT_S = 60.0
INIT_TIMEOUT_S = 300.0
STOP_GRACE_S = 30.0


def free_port() -> int:
    """A TCP port no one listens on now (the server's socket name, and its
    port should it listen on TCP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fill(argv: list[str], values: dict[str, str]) -> list[str]:
    return [fill_text(a, values) for a in argv]


class ServerSession:
    """Context manager: init, start, wait until ready; stop on the way out."""

    def __init__(self, spec: dict, directory: Path, progress: Callable[[str], None]):
        self.spec = spec
        self.directory = directory
        self.progress = progress
        self.port = free_port()
        self.values = {"dir": str(directory), "port": str(self.port)}
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()
        try:
            pw = pwd.getpwnam(spec["user"])
        except KeyError:
            raise EnvironmentProblem(f"the server's user {spec['user']!r} does not exist",
                                     "install the server's Debian package, which creates it") from None
        self.uid, self.gid = pw.pw_uid, pw.pw_gid

    def _as_user(self) -> dict:
        return dict(user=self.uid, group=self.gid, extra_groups=[], env={**os.environ, "HOME": "/", "LC_ALL": "C"},
                    cwd=str(self.directory))

    def _run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                                  **self._as_user())
        except OSError as e:
            raise LockscopeError(f"cannot run {argv[0]}: {e.strerror}", exit_code=2) from e

    def log_tail(self, limit: int = 800) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit:].strip()

    def _unreachable(self) -> Path | None:
        """The first directory above the file system the server's user may
        not pass through (it would not find its own files)."""
        for d in reversed(self.directory.parents):
            st = d.stat()
            bit = 0o100 if st.st_uid == self.uid else 0o010 if st.st_gid == self.gid else 0o001
            if not st.st_mode & bit:
                return d
        return None

    def __enter__(self) -> "ServerSession":
        blocked = self._unreachable()
        if blocked:
            raise EnvironmentProblem(f"the server runs as {self.spec['user']}, who may not enter {blocked} "
                                     f"(mode {blocked.stat().st_mode & 0o777:o}) above its file system "
                                     f"{self.directory}",
                                     f"give --scratch a directory {self.spec['user']} can reach, e.g. "
                                     "--scratch /tmp/lockscope-scratch")
        os.chown(self.directory, self.uid, self.gid)       # the scratch file system is the server's
        for path, text in self.spec.get("write") or ():
            path = Path(fill_text(path, self.values))
            self.progress(f"server configuration: {path}")
            path.write_text(fill_text(text, self.values))     # root's, 0644: a server checks its config is not
            path.chmod(0o644)                                  # writable by its own user (Exim does)
        for argv in self.spec["init"]:
            argv = _fill(argv, self.values)
            self.progress(f"server init, not measured: {shlex.join(argv)}")
            try:
                p = self._run(argv, INIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise LockscopeError(f"{shlex.join(argv)} did not end within {INIT_TIMEOUT_S:g} s") from None
            if p.returncode != 0:
                err = (p.stderr or p.stdout).decode(errors="replace").strip()[-800:]
                raise LockscopeError(f"{shlex.join(argv)} exited with code {p.returncode}" + (f": {err}" if err else ""))
        argv = _fill(self.spec["start"], self.values)
        self.progress(f"starting the server as {self.spec['user']}: {shlex.join(argv)}")
        try:
            self.proc = spawn_gated(argv, None, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                    start_new_session=True, **self._as_user())
        except OSError as e:
            raise LockscopeError(f"cannot run {argv[0]}: {e.strerror}", exit_code=2) from e
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_ready(self) -> None:
        argv = _fill(self.spec["ready"], self.values)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise LockscopeError(f"the server exited with code {self.proc.returncode} before it was ready: "
                                     f"{self.log_tail()}")
            try:
                if self._run(argv, 10).returncode == 0:
                    return
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                raise LockscopeError(f"the server was not ready ({shlex.join(argv)}) within {READY_TIMEOUT_S:g} s: "
                                     f"{self.log_tail()}")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        """The stop command, then the process group if it is still there."""
        if self.proc is None:
            return
        if self.proc.poll() is None and self.spec.get("stop"):
            argv = _fill(self.spec["stop"], self.values)
            self.progress(f"stopping the server: {shlex.join(argv)}")
            try:
                self._run(argv, STOP_GRACE_S)
                self.proc.wait(timeout=STOP_GRACE_S)
            except (subprocess.TimeoutExpired, LockscopeError):
                pass
        kill_group(self.proc, grace=STOP_GRACE_S if not self.spec.get("stop") else 2.0)
        self.proc = None
        self._log.close()

    def __exit__(self, *exc) -> None:
        self.close()
