"""What lockscope starts dies with it, even when lockscope itself is killed
with SIGKILL (a dead terminal, a CI runner's timeout), which no handler sees.

A small process of its own session, `python3 -m lockscope.machine.watchdog PID`,
is started with the first child or file system. lockscope tells it, on a
pipe, every process group it starts (the probe loader, the workload driver,
a profiled command and what it forks). When the pipe ends without the word
`exit` (lockscope died: the kernel closed its end), the watchdog kills those
process groups and releases what the dead lockscope recorded making in its
ledger (lockscope/machine/ownership.py: its mounts, loop devices, directories),
nothing else. On a normal exit, Ctrl-C or SIGTERM lockscope has released
everything itself and says `exit`. BPF programs need no help: their links
die with the probe loader's file descriptors.

A group is killed only if its processes started after lockscope registered
it and its leader, if alive, is the one registered (a pid reused by an
unrelated process is left alone)."""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys

from lockscope.machine import ownership

_proc: subprocess.Popen | None = None


def _tell(line: str) -> None:
    global _proc
    try:
        if _proc is None:
            _proc = subprocess.Popen([sys.executable, "-m", "lockscope.machine.watchdog", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True, close_fds=True)
            atexit.register(_release)
        _proc.stdin.write((line + "\n").encode())
        _proc.stdin.flush()
    except (OSError, ValueError):
        pass                      # without a watchdog lockscope still cleans up on every other exit


def _release() -> None:
    """lockscope exits on its own: it has released what it started."""
    if _proc is not None and _proc.poll() is None:
        try:
            _proc.stdin.write(b"exit\n")
            _proc.stdin.close()
        except (OSError, ValueError):
            pass


def guard() -> None:
    """Start the watchdog (once): if lockscope dies, what it recorded making
    is released."""
    _tell("hello")


def guard_group(pgid: int) -> dict | None:
    """Kill process group `pgid` if lockscope dies; it is recorded in the
    ledger too (for doctor, and for a reclaim if the watchdog dies as well).
    Returns the ledger's item."""
    start = ownership.start_time(pgid)
    if start is None:
        return None
    item = ownership.made("group", pgid=pgid, start=start)
    _tell(f"group {pgid} {start}")
    return item


def _reap(groups: dict[int, int], owner: ownership.Owner | None) -> None:
    for pgid, since in groups.items():
        ownership.kill_group(pgid, since)
    if owner is not None:
        try:
            ownership.reclaim(owner, settle=1.0)
        except Exception:      # a watchdog must not stop half-way
            pass


def main() -> int:
    owner = ownership.Owner.of(int(sys.argv[1]))     # lockscope, alive as it starts us
    groups: dict[int, int] = {}
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is lockscope's to handle
    for raw in sys.stdin.buffer:
        words = raw.decode(errors="replace").split()
        if words == ["exit"]:
            return 0
        if len(words) == 3 and words[0] == "group":
            groups[int(words[1])] = int(words[2])
    _reap(groups, owner)            # the pipe ended without "exit": lockscope died
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
