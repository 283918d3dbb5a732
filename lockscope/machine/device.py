"""`--device PATH`: a real block device instead of a RAM-backed loop image.

The device is formatted at every point, so it is refused unless the user
repeats its path in `--yes-format-device PATH`, and refused in any case when
it is not a block device, or when it or one of its partitions is mounted,
used as swap, or held by another device (LVM, RAID, dm-crypt).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from lockscope.errors import UsageError


def _sysfs_dir(rdev: int) -> Path:
    return Path(f"/sys/dev/block/{os.major(rdev)}:{os.minor(rdev)}").resolve()


def _family(rdev: int) -> set[int]:
    """The device and its partitions (or, for a partition, itself only)."""
    devs = {rdev}
    base = _sysfs_dir(rdev)
    for part in base.glob("*/partition"):
        try:
            major, minor = (int(x) for x in (part.parent / "dev").read_text().split(":"))
            devs.add(os.makedev(major, minor))
        except (OSError, ValueError):
            pass
    return devs


def _users(devs: set[int]) -> list[str]:
    """What uses any of `devs`: mounts, swap, holders."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split()
        # the source after " - fstype source"; also the st_dev of the mount
        sep = parts.index("-")
        source = parts[sep + 2].encode().decode("unicode_escape")
        major, minor = (int(x) for x in parts[2].split(":"))
        hit = os.makedev(major, minor) in devs
        if not hit and source.startswith("/"):
            try:
                st = os.stat(source)
                hit = stat.S_ISBLK(st.st_mode) and st.st_rdev in devs
            except OSError:
                pass
        if hit:
            out.append(f"mounted at {parts[4].encode().decode('unicode_escape')}")
    try:
        for line in Path("/proc/swaps").read_text().splitlines()[1:]:
            name = line.split()[0]
            try:
                st = os.stat(name)
                if stat.S_ISBLK(st.st_mode) and st.st_rdev in devs:
                    out.append(f"used as swap ({name})")
            except OSError:
                pass
    except OSError:
        pass
    for d in devs:
        holders = _sysfs_dir(d) / "holders"
        if holders.is_dir():
            out += [f"held by {h.name}" for h in holders.iterdir()]
    return out


def check_device(path: str | None, confirm: str | None) -> str | None:
    """The device to format, after every refusal; None without --device."""
    if path is None:
        if confirm is not None:
            raise UsageError("--yes-format-device without --device", "give the device with --device PATH too")
        return None
    if confirm is None:
        raise UsageError(f"--device {path}: the device is formatted (all its data is lost) at every point, "
                         "so lockscope needs your confirmation",
                         f"add --yes-format-device {path} if that is what you want")
    try:
        st = os.stat(path)
    except OSError as e:
        raise UsageError(f"--device {path}: {e.strerror}") from None
    if not stat.S_ISBLK(st.st_mode):
        raise UsageError(f"--device {path} is not a block device", "name a disk or partition such as /dev/nvme0n1p3")
    try:
        same = stat.S_ISBLK(os.stat(confirm).st_mode) and os.stat(confirm).st_rdev == st.st_rdev
    except OSError:
        same = False
    if not same or os.path.realpath(confirm) != os.path.realpath(path):
        raise UsageError(f"--yes-format-device {confirm} does not repeat --device {path}",
                         "repeat exactly the device path to confirm formatting it")
    users = _users(_family(st.st_rdev))
    if users:
        raise UsageError(f"--device {path} is in use: {'; '.join(sorted(set(users)))}",
                         "unmount it (and its partitions), or choose an unused device")
    return os.path.realpath(path)
