"""A command's standard output through a pseudo-terminal, as a terminal
would show it: the C library (and most runtimes) buffer a pipe's output in
blocks but a terminal's by line, so a program that prints progress with
printf is read while it runs, and a program stopped at the window's end has
not kept its last lines in a buffer it never flushed. Nothing in the
program changes; its standard error stays a file.

The terminal is raw (no "\\n" to "\\r\\n", no echo); a thread copies what
the command writes to a callback until every writer has closed it (the
master then reads EIO: Linux's end of file for a pseudo-terminal)."""
from __future__ import annotations

import os
import pty
import threading
import tty
from typing import Callable

CHUNK = 65536
JOIN_S = 2.0          # after the command ended: what is left in the terminal's buffer is read by then


class PtyOutput:
    def __init__(self, sink: Callable[[bytes], None], on_end: Callable[[], None] | None = None):
        self.master, self.slave = pty.openpty()
        tty.setraw(self.slave)
        self._sink = sink
        self._on_end = on_end
        self._thread: threading.Thread | None = None

    def started(self) -> None:
        """The command has the terminal as its standard output: the parent's
        copy of it is closed and the reading starts."""
        os.close(self.slave)
        self.slave = -1
        self._thread = threading.Thread(target=self._copy, daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, CHUNK)
            except OSError:          # EIO: no writer left
                break
            if not chunk:
                break
            self._sink(chunk)
        if self._on_end:
            self._on_end()

    def close(self, wait: float = JOIN_S) -> None:
        """Read until the writers are gone (at most `wait` seconds more: a
        daemon the command left behind may keep the terminal open), then
        release it."""
        if self.slave >= 0:
            os.close(self.slave)
            self.slave = -1
        if self._thread is not None:
            self._thread.join(wait)
        if self.master >= 0 and (self._thread is None or not self._thread.is_alive()):
            os.close(self.master)
            self.master = -1
        # else the reader still holds the master: it is closed with the process


def lines(sink: Callable[[str], None]) -> Callable[[bytes], None]:
    """A PtyOutput sink that hands `sink` each complete line, decoded
    (the last one when the output ends without a newline is kept back)."""
    buf = bytearray()

    def feed(chunk: bytes) -> None:
        buf.extend(chunk)
        while True:
            i = buf.find(b"\n")
            if i < 0:
                return
            line = bytes(buf[:i + 1])
            del buf[:i + 1]
            sink(line.decode(errors="replace"))
    return feed
