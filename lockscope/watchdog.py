"""What lockscope starts dies with it, even when lockscope itself is killed
with SIGKILL (a dead terminal, a CI runner's timeout), which no handler sees.

A small process of its own session, `python3 -m lockscope.watchdog PID`,
is started with the first child. lockscope tells it, on a pipe, every
process group it starts (the probe loader, the workload driver, a profiled
command and what it forks) and every scratch root it mounts under. When
the pipe ends without the word `exit` (lockscope died: the kernel closed its
end), the watchdog kills those process groups and releases the mounts, loop
devices and directories of lockscope processes that are dead
(scratch.clean_leftovers). On a normal exit, Ctrl-C or SIGTERM lockscope
has released everything itself and says `exit`. BPF programs need no help:
their links die with the probe loader's file descriptors.

A group is killed only if its processes started after lockscope registered
it (a pid reused by an unrelated process is left alone)."""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_proc: subprocess.Popen | None = None


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: start time in clock ticks since boot."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def _tell(line: str) -> None:
    global _proc
    try:
        if _proc is None:
            _proc = subprocess.Popen([sys.executable, "-m", "lockscope.watchdog", str(os.getpid())],
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


def guard_group(pgid: int) -> None:
    """Kill process group `pgid` if lockscope dies."""
    start = _start_time(pgid)
    if start is not None:
        _tell(f"group {pgid} {start}")


def guard_scratch(root: Path) -> None:
    """Release lockscope's leftovers under `root` if lockscope dies."""
    _tell(f"scratch {Path(root).resolve()}")


def _members(pgid: int, since: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        fields = _stat(d.name) if d.name.isdigit() else None
        if fields and fields[0] != "Z" and int(fields[2]) == pgid and int(fields[19]) >= since:   # zombies are dead
            out.append(int(d.name))
    return out


def _reap(groups: dict[int, int], roots: list[str]) -> None:
    for _ in range(20):
        alive = {g: _members(g, since) for g, since in groups.items()}
        if not any(alive.values()):
            break
        for pids in alive.values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.05)
    if roots:
        from lockscope import scratch
        for root in roots:
            try:
                scratch.clean_leftovers(Path(root))
            except Exception:      # a watchdog must not stop half-way
                pass


def main() -> int:
    groups: dict[int, int] = {}
    roots: list[str] = []
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is lockscope's to handle
    for raw in sys.stdin.buffer:
        words = raw.decode(errors="replace").split()
        if words == ["exit"]:
            return 0
        if len(words) == 3 and words[0] == "group":
            groups[int(words[1])] = int(words[2])
        elif len(words) == 2 and words[0] == "scratch" and words[1] not in roots:
            roots.append(words[1])
    _reap(groups, roots)            # the pipe ended without "exit": lockscope died
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
