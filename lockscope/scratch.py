"""Fresh file systems for each measured point, under lockscope's own scratch
directory: tmpfs directly, disk file systems on a loop device over an image
file kept in RAM (a tmpfs of its own, like FxMark's ramdisk but sized to
need). Everything created is released in reverse order on every exit path;
`doctor` finds what a killed run left behind.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from lockscope.errors import EnvironmentProblem, LockscopeError, UsageError

DEFAULT_SCRATCH = Path(os.environ.get("LOCKSCOPE_SCRATCH", "/tmp/lockscope"))
MOUNT_SOURCE = "lockscope"          # the source name of every tmpfs we mount
IMAGE_NAME = "fs.img"


@dataclass(frozen=True)
class FsSetup:
    name: str
    description: str
    fstype: str                       # kernel file system type
    mkfs: tuple[str, ...] = ()        # mkfs command (device appended); empty: no device
    mount_options: str = "noatime"

    @property
    def needs_device(self) -> bool:
        return bool(self.mkfs)


FS_SETUPS: dict[str, FsSetup] = {s.name: s for s in [
    FsSetup("tmpfs", "tmpfs in RAM, mounted noatime", "tmpfs"),
    # ext4 with its default ordered journaling; enough inodes for create-heavy
    # workloads; inode tables and journal initialised lazily (the image is a
    # fresh sparse file, so they read as zeros) and no background init thread
    FsSetup("ext4", "ext4 (ordered journaling) on a loop device over a RAM-backed image, noatime",
            "ext4",
            ("mkfs.ext4", "-q", "-F", "-N", "4000000",
             "-E", "lazy_itable_init=1,lazy_journal_init=1"),
            "noatime,noinit_itable"),
]}

_counter = itertools.count()


@dataclass
class MountedFs:
    setup: FsSetup
    mountpoint: Path
    point_dir: Path
    device: str | None = None
    image: Path | None = None
    dev: str = ""                      # major:minor of the mounted file system
    kernel_dev: int = 0                # the same as the kernel's sb->s_dev
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        return {
            "setup": self.setup.name,
            "fstype": self.setup.fstype,
            "description": self.setup.description,
            "mountpoint": str(self.mountpoint),
            "mount_options": self.setup.mount_options,
            "device": self.device,
            "image": str(self.image) if self.image else None,
            "dev": self.dev,
            "kernel_dev": self.kernel_dev,
        }


def _kernel_fs_known(fstype: str) -> bool:
    try:
        if any(line.split()[-1] == fstype for line in Path("/proc/filesystems").read_text().splitlines()):
            return True
    except OSError:
        return False
    # not loaded yet: a module the kernel can load on mount
    moddir = Path("/lib/modules") / os.uname().release / "kernel" / "fs" / fstype
    return moddir.is_dir()


def availability(name: str) -> tuple[bool, str]:
    """Whether setup `name` can be created here, and why not."""
    setup = FS_SETUPS.get(name)
    if setup is None:
        return False, f"unknown file-system setup '{name}'"
    if not _kernel_fs_known(setup.fstype):
        return False, f"the kernel has no {setup.fstype} support (not in /proc/filesystems, no module)"
    if setup.needs_device:
        tool = setup.mkfs[0]
        if not shutil.which(tool):
            return False, f"{tool} is not installed (apt-get install {_PACKAGES.get(tool, tool)})"
        if not shutil.which("losetup"):
            return False, "losetup is not installed (apt-get install mount)"
        if not Path("/dev/loop-control").exists():
            return False, "no loop device support (/dev/loop-control missing; modprobe loop)"
    return True, "available"


_PACKAGES = {"mkfs.ext4": "e2fsprogs", "mkfs.xfs": "xfsprogs", "mkfs.btrfs": "btrfs-progs"}


def check_setup(name: str) -> FsSetup:
    if name not in FS_SETUPS:
        raise UsageError(f"unknown file system '{name}'",
                         f"choose from: {', '.join(FS_SETUPS)} (see `lockscope list`)")
    ok, why = availability(name)
    if not ok:
        raise EnvironmentProblem(f"file system '{name}' is not available here: {why}")
    return FS_SETUPS[name]


def _run(cmd: list[str], what: str) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise LockscopeError(f"{what} failed: {' '.join(cmd)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout.strip()


def drop_caches() -> None:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as e:
        raise EnvironmentProblem(f"cannot drop caches: {e}", "run as root") from e


def unmount(path: Path, warnings: list[str] | None = None) -> None:
    """Unmount, retrying while the last users exit; lazily as a last resort
    (with a warning) so that a stuck process never leaves the mount behind."""
    for attempt in range(10):
        p = subprocess.run(["umount", str(path)], capture_output=True, text=True)
        if p.returncode == 0 or not is_mounted(path):
            return
        time.sleep(0.05 * (attempt + 1))
    subprocess.run(["umount", "-l", str(path)], capture_output=True)
    if warnings is not None:
        warnings.append(f"{path} was busy; unmounted lazily")


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


def mounts() -> list[tuple[str, str, str]]:
    """(source, mountpoint, fstype) of every mount, octal escapes decoded."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            dec = [p.encode().decode("unicode_escape") for p in parts[:3]]
            out.append((dec[0], dec[1], dec[2]))
    return out


@contextlib.contextmanager
def mounted(name: str, scratch_root: Path = DEFAULT_SCRATCH,
            image_size_gib: int = 8) -> Iterator[MountedFs]:
    """Create, format and mount a fresh `name` file system; release it all
    on exit, however the block is left."""
    setup = check_setup(name)
    scratch_root = Path(scratch_root)
    with contextlib.ExitStack() as stack:
        scratch_root.mkdir(parents=True, exist_ok=True)
        point = scratch_root / f"{name}-{os.getpid()}-{next(_counter)}"
        point.mkdir()
        stack.callback(shutil.rmtree, point, ignore_errors=True)
        mnt = point / "mnt"
        mnt.mkdir()
        fs = MountedFs(setup=setup, mountpoint=mnt, point_dir=point)
        if not setup.needs_device:
            _run(["mount", "-t", "tmpfs", "-o", f"{setup.mount_options},mode=0755",
                  MOUNT_SOURCE, str(mnt)], "mounting tmpfs")
            stack.callback(unmount, mnt, fs.warnings)
        else:
            ram = point / "ram"
            ram.mkdir()
            _run(["mount", "-t", "tmpfs", "-o", f"size={image_size_gib + 1}g,mode=0700",
                  MOUNT_SOURCE, str(ram)], "mounting the RAM disk for the image")
            stack.callback(unmount, ram, fs.warnings)
            fs.image = ram / IMAGE_NAME
            with open(fs.image, "wb") as f:
                f.truncate(image_size_gib << 30)
            fs.device = _run(["losetup", "--find", "--show", str(fs.image)], "attaching a loop device")
            stack.callback(_detach_loop, fs.device)
            _run(list(setup.mkfs) + [fs.device], f"formatting {setup.fstype}")
            _run(["mount", "-t", setup.fstype, "-o", setup.mount_options, fs.device, str(mnt)],
                 f"mounting {setup.fstype}")
            stack.callback(unmount, mnt, fs.warnings)
        st = os.stat(mnt)
        major, minor = os.major(st.st_dev), os.minor(st.st_dev)
        fs.dev = f"{major}:{minor}"
        fs.kernel_dev = (major << 20) | minor
        drop_caches()
        yield fs


def _detach_loop(device: str) -> None:
    for attempt in range(10):
        if subprocess.run(["losetup", "-d", device], capture_output=True).returncode == 0:
            return
        time.sleep(0.1 * (attempt + 1))


def loop_devices() -> list[tuple[str, str]]:
    """(device, backing file) of every attached loop device."""
    out = []
    for d in sorted(Path("/sys/block").glob("loop*")):
        backing = d / "loop" / "backing_file"
        if backing.exists():
            out.append((f"/dev/{d.name}", backing.read_text().strip()))
    return out


def _owner_alive(point: str) -> bool:
    """Point directories are named <setup>-<pid>-<n>: is that lockscope alive?"""
    try:
        pid = int(point.rsplit("-", 2)[1])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (IndexError, ValueError, OSError):
        return False
    return b"lockscope" in cmdline and pid != os.getpid()


def _stale(path: str, root: str) -> bool:
    """Under the scratch root, and not in use by a running lockscope."""
    if not path.startswith(root + "/"):
        return False
    return not _owner_alive(path[len(root) + 1:].split("/", 1)[0])


def leftovers(scratch_root: Path = DEFAULT_SCRATCH) -> dict[str, list[str]]:
    """Mounts, loop devices and directories a killed lockscope left behind
    (those of a lockscope still running are not leftovers)."""
    root = str(Path(scratch_root).resolve())
    left_mounts = [m[1] for m in mounts() if _stale(m[1], root)]
    left_loops = [f"{dev} ({backing})" for dev, backing in loop_devices() if _stale(backing, root)]
    left_dirs = [str(p) for p in sorted(Path(root).glob("*")) if _stale(str(p), root)] \
        if Path(root).is_dir() else []
    return {"mounts": left_mounts, "loop_devices": left_loops, "directories": left_dirs}


def clean_leftovers(scratch_root: Path = DEFAULT_SCRATCH) -> list[str]:
    """Release what `leftovers` finds; returns what was done."""
    done = []
    root = str(Path(scratch_root).resolve())

    def ours() -> list[str]:
        return [m[1] for m in mounts() if _stale(m[1], root)]

    # the file systems first, then the loop devices under them, then the RAM
    # disks that hold their images
    for m in sorted(ours(), key=lambda m: (not m.endswith("/mnt"), -len(m))):
        if m.endswith("/mnt"):
            unmount(Path(m))
            done.append(f"unmounted {m}")
    for dev, backing in loop_devices():
        if _stale(backing, root):
            _detach_loop(dev)
            done.append(f"detached {dev}")
    for m in sorted(ours(), key=len, reverse=True):
        unmount(Path(m))
        done.append(f"unmounted {m}")
    if Path(root).is_dir():
        for p in Path(root).iterdir():
            if _stale(str(p), root) and not any(mp[1].startswith(str(p) + "/") for mp in mounts()):
                shutil.rmtree(p, ignore_errors=True)
                done.append(f"removed {p}")
    return done
