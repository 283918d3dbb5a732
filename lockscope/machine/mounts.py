"""The kernel's tables of mounts and loop devices, read from /proc and /sys,
and releasing what is in them (umount, losetup -d); writing back and
dropping the caches of a file system. Used by scratch.py (making a point's
file systems) and ownership.py (reclaiming a dead run's)."""
from __future__ import annotations

import ctypes
import os
import subprocess
import time
from pathlib import Path

from lockscope.errors import EnvironmentProblem


def mounts() -> list[tuple[str, str, str]]:
    """(source, mountpoint, fstype) of every mount, octal escapes decoded."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            dec = [p.encode().decode("unicode_escape") for p in parts[:3]]
            out.append((dec[0], dec[1], dec[2]))
    return out


def top_mount(path: str) -> tuple[str, str] | None:
    """(source, fstype) of the mount on top at `path`, or None."""
    found = None
    for source, target, fstype in mounts():
        if target == path:
            found = (source, fstype)
    return found


def loops_backed_by(image: str) -> list[str]:
    """The loop devices attached to the file `image` now."""
    return [dev for dev, backing in loop_devices() if backing.removesuffix(" (deleted)") == image]


def is_mounted(path: Path) -> bool:
    target = str(Path(path).resolve())
    return any(m[1] == target for m in mounts())


def mounts_by_dev() -> dict[int, str]:
    """The kernel's sb->s_dev of each mounted file system -> its mount point."""
    table: dict[int, str] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split()
        major, minor = (int(x) for x in parts[2].split(":"))
        table.setdefault((major << 20) | minor, parts[4].encode().decode("unicode_escape"))
    return table


def mount_options_of(path: Path) -> str:
    """The options the kernel reports for the mount at `path` ('' if none)."""
    target = str(Path(path).resolve())
    found = ""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1].encode().decode("unicode_escape") == target:
            found = parts[3]           # the last one is the one on top
    return found


def loop_devices() -> list[tuple[str, str]]:
    """(device, backing file) of every attached loop device."""
    out = []
    for d in sorted(Path("/sys/block").glob("loop*")):
        try:
            out.append((f"/dev/{d.name}", (d / "loop" / "backing_file").read_text().strip()))
        except OSError:
            continue                  # not attached (or detached while read)
    return out


def umount(path: str) -> str:
    """Unmount, retrying while the last users exit; lazily as a last resort,
    so that a stuck process never leaves the mount behind. Returns
    "unmounted", "unmounted lazily", or "" (it stayed mounted)."""
    for attempt in range(10):
        if subprocess.run(["umount", path], capture_output=True).returncode == 0 or not os.path.ismount(path):
            return "unmounted"
        time.sleep(0.05 * (attempt + 1))
    ok = subprocess.run(["umount", "-l", path], capture_output=True).returncode == 0
    return "unmounted lazily" if ok else ""


def detach_loop(device: str) -> bool:
    for attempt in range(10):
        if subprocess.run(["losetup", "-d", device], capture_output=True).returncode == 0:
            return True
        time.sleep(0.1 * (attempt + 1))
    return False


def _syncfs(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def drop_caches(path: Path | None = None) -> None:
    """Write back and drop the page, dentry and inode caches. With `path`,
    only that file system (and its block device) is written back first, so
    a point never waits for the writeback of other file systems on the
    machine; the clean caches are dropped everywhere."""
    if path is not None:
        _syncfs(path)
    else:
        os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as e:
        raise EnvironmentProblem(f"cannot drop caches: {e}", "run as root") from e
