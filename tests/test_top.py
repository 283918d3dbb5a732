"""`lockscope top` on a program lockscope did not start
(tests/programs/hotmutex.c, threads contending on the global pthread mutex
`hot_lock`): --batch prints the intervals with the mutex named by symbol at
the top; the interactive screen, in a pseudo-terminal, shows it too and
quits on q, SIGTERM and SIGHUP with the terminal restored; it ends by itself
when the target exits; the target keeps running, unsignalled, and none of
the probe's BPF programs, maps or links is left loaded."""
from __future__ import annotations

import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import termios
import time

import pytest

from conftest import REPO
from test_attach import Target, _fdinfo_ids, _loaded_ids, _probe_child, hotmutex  # noqa: F401 (a fixture)

HOT = "pthread_mutex hot_lock"


@pytest.fixture
def need_bpftool(e2e):
    if not shutil.which("bpftool"):
        pytest.skip("bpftool is needed to see which BPF programs, maps and links are loaded")


@pytest.fixture
def target(hotmutex, tmp_path):  # noqa: F811
    t = Target(hotmutex, tmp_path / "target.log")
    yield t
    t.end()


def _probe_ids(pid: int, deadline_s: float = 60) -> dict[str, set[int]]:
    """The BPF objects the probe under `lockscope top` (pid) holds, once loaded."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        probe = _probe_child(pid)
        if probe:
            try:
                ids = _fdinfo_ids(probe)
            except OSError:
                ids = {}
            if ids.get("prog") and ids.get("link"):
                return ids
        time.sleep(0.2)
    raise AssertionError("no lockscope-probe with BPF programs under lockscope top")


def _assert_detached(ids: dict[str, set[int]]) -> None:
    deadline = time.monotonic() + 5
    while True:
        loaded = _loaded_ids()
        left = {k: v & loaded[k] for k, v in ids.items() if v & loaded[k]}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"left loaded after lockscope top: {left}"


def _top_waits(block: str) -> list[str]:
    """The rows of one interval's "top waits" table."""
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("top waits")) + 2
    return [line for line in lines[start:] if line.strip()]


def test_batch_names_the_mutex_and_leaves_nothing(need_bpftool, target):
    proc = subprocess.Popen([sys.executable, "-m", "lockscope", "top", "--pid", str(target.pid), "--batch", "3"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ids = _probe_ids(proc.pid)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    blocks = [b for b in out.split("lockscope top - ") if b.strip()]
    assert len(blocks) == 3, out
    for b in blocks:
        assert f"pid {target.pid} (hotmutex)" in b
        assert "throughput: unknown" in b
        assert "hotmutex*" in b, b          # the role, counted as the work, with its CPU split
    heaviest = [_top_waits(b)[0] for b in blocks]
    assert sum(HOT in row and "verified" in row for row in heaviest) >= 2, out
    share = float(heaviest[-1].split()[0].rstrip("%"))
    assert share > 1.0 or HOT not in heaviest[-1], heaviest
    assert "ended (done)" in err
    assert _probe_child(proc.pid) is None
    _assert_detached(ids)
    target.assert_undisturbed()


def test_batch_ends_when_the_target_exits(e2e, hotmutex, tmp_path):  # noqa: F811
    t = Target(hotmutex, tmp_path / "target.log")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lockscope", "top", "--pid", str(t.pid), "--batch", "100"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _probe_ids(proc.pid)
        time.sleep(2.5)
        t.end()
        out, err = proc.communicate(timeout=60)
    finally:
        t.end()
    assert proc.returncode == 0, err
    assert "ended (targets exited)" in err
    assert HOT in out


class PtyTop:
    """`lockscope top` in a pseudo-terminal of 40 x 160, as over ssh or in tmux."""

    def __init__(self, *args: str):
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(REPO)
            env = {**os.environ, "TERM": "xterm-256color", "LINES": "40", "COLUMNS": "160"}
            os.execvpe(sys.executable, [sys.executable, "-m", "lockscope", "top", *args], env)
        self.pid, self.fd = pid, fd
        self.screen = b""
        import fcntl
        import struct
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))

    def read_until(self, text: bytes, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.screen:
                return True
            r, _, _ = select.select([self.fd], [], [], 0.2)
            if r:
                try:
                    self.screen += os.read(self.fd, 65536)
                except OSError:
                    return text in self.screen
        return text in self.screen

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.fd], [], [], 0.2)
            if r:
                try:
                    self.screen += os.read(self.fd, 65536)
                except OSError:
                    pass
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        raise AssertionError("lockscope top did not exit: " + self.screen[-2000:].decode(errors="replace"))

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _restored(screen: bytes) -> bool:
    """curses left the alternate screen (rmcup) and showed the cursor again."""
    return b"\x1b[?1049l" in screen and b"\x1b[?25h" in screen


def test_screen_in_a_pty_shows_the_mutex_sorts_freezes_and_quits_on_q(need_bpftool, target):
    t = PtyTop("--pid", str(target.pid))
    try:
        ids = _probe_ids(t.pid)
        assert t.read_until(HOT.encode(), 60), t.screen[-3000:]
        assert b"sort: share" in t.screen and b"space freeze" in t.screen
        os.write(t.fd, b"w")
        assert t.read_until(b"sort: waits/s", 10)
        os.write(t.fd, b" ")
        assert t.read_until(b"FROZEN", 10)
        os.write(t.fd, b"q")
        rc = t.wait()
    finally:
        t.close()
    assert rc == 0, t.screen[-2000:]
    assert _restored(t.screen)
    assert b"ended (q)" in t.screen
    _assert_detached(ids)
    target.assert_undisturbed()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_screen_ends_cleanly_on_signals(need_bpftool, target, sig):
    t = PtyTop("--pid", str(target.pid))
    try:
        ids = _probe_ids(t.pid)
        assert t.read_until(HOT.encode(), 60), t.screen[-3000:]
        if sig == signal.SIGINT:
            os.write(t.fd, b"\x03")        # Ctrl-C typed at the terminal
        else:
            os.kill(t.pid, sig)
        rc = t.wait()
    finally:
        t.close()
    assert rc == (0 if sig == signal.SIGINT else 130), t.screen[-2000:]
    if sig != signal.SIGHUP:
        assert _restored(t.screen)
    _assert_detached(ids)
    target.assert_undisturbed()


def test_without_a_terminal_it_asks_for_batch(target):
    from conftest import lockscope
    r = lockscope("top", "--pid", str(target.pid), stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "--batch N" in r.stderr, r.stderr


def test_bad_input():
    from conftest import lockscope
    r = lockscope("top", "--pid", "999999999", "--batch", "1")
    assert r.returncode == 2 and "no such process" in r.stderr
    r = lockscope("top", "--pid", "1", "--batch", "0")
    assert r.returncode == 2 and "--batch 0" in r.stderr
