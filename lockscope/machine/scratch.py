"""Fresh file systems for each measured point, under lockscope's own scratch
directory: tmpfs directly, disk file systems on a loop device over an image
file kept in RAM (a tmpfs of its own, like FxMark's ramdisk but sized to
need), or on a block device the user names and confirms (`--device`).
Each point gets a new image, a fresh mkfs, a noatime mount and dropped caches.
Everything created is released in reverse order on every exit path;
`doctor` finds what a killed run left behind.

Image size (`image_size_bytes`): 16 GiB or 40% of RAM, whichever is smaller,
never below 1 GiB (xfs needs 300 MiB, btrfs about 120 MiB, f2fs about 40 MiB).
The image is a sparse file on tmpfs, so only what the file system writes uses
RAM; the size only caps it. ext4 gets one inode per 2 KiB (4.7 M at 9 GiB), so
MWUL/MWUM can pre-create about two million files per worker on two workers;
xfs and btrfs allocate inodes dynamically; an empty file costs btrfs about
0.7 KiB of (duplicated) metadata, i.e. 4 M files in under 3 GiB.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from lockscope.machine import ownership, watchdog
from lockscope.machine.mounts import (detach_loop, drop_caches, is_mounted, loop_devices,  # noqa: F401
                                      mount_options_of, mounts, mounts_by_dev, umount)
from lockscope.errors import EnvironmentProblem, LockscopeError, UsageError

DEFAULT_SCRATCH = Path(os.environ.get("LOCKSCOPE_SCRATCH", "/tmp/lockscope"))
MOUNT_SOURCE = "lockscope"          # the source name of every tmpfs we mount
IMAGE_NAME = "fs.img"


@dataclass(frozen=True)
class FsSetup:
    name: str
    description: str
    fstype: str                       # kernel file system type
    mkfs: tuple[str, ...] = ()        # mkfs command (device appended); empty: no device.
                                      # "{inodes}" becomes the inode count for the image size
    mount_options: str = "noatime"
    journal: str = ""                 # journal mode, for the record

    @property
    def needs_device(self) -> bool:
        return bool(self.mkfs)

    def mkfs_command(self, size_bytes: int) -> list[str]:
        return [a.replace("{inodes}", str(max(65536, size_bytes // BYTES_PER_INODE))) for a in self.mkfs]


BYTES_PER_INODE = 2048                # ext4: one inode per 2 KiB of image
# ext4: enough inodes for create-heavy workloads; inode tables and journal
# initialised lazily (the image is a fresh sparse file, so they read as
# zeros) and no background init thread; no discard of the fresh image
_EXT4 = ("mkfs.ext4", "-q", "-F", "-N", "{inodes}", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard")

FS_SETUPS: dict[str, FsSetup] = {s.name: s for s in [
    FsSetup("tmpfs", "tmpfs in RAM, mounted noatime", "tmpfs", journal="none (in memory)"),
    FsSetup("ext4", "ext4 (ordered journaling) on a loop device over a RAM-backed image, noatime",
            "ext4", _EXT4, "noatime,noinit_itable", journal="ordered (jbd2, data=ordered)"),
    FsSetup("ext4-nojournal", "ext4 without a journal (mkfs -O ^has_journal) on a RAM-backed loop image, noatime",
            "ext4", _EXT4[:3] + ("-O", "^has_journal") + _EXT4[3:], "noatime,noinit_itable",
            journal="none (^has_journal)"),
    FsSetup("xfs", "xfs (default mkfs: internal log) on a RAM-backed loop image, noatime",
            "xfs", ("mkfs.xfs", "-q", "-f", "-K"), "noatime",
            journal="metadata log (internal, delayed logging)"),
    FsSetup("btrfs", "btrfs (default mkfs: DUP metadata) on a RAM-backed loop image, noatime",
            "btrfs", ("mkfs.btrfs", "-q", "-f", "-K"), "noatime",
            journal="none: copy-on-write, log tree for fsync"),
    FsSetup("f2fs", "f2fs (default mkfs) on a RAM-backed loop image, noatime",
            "f2fs", ("mkfs.f2fs", "-q", "-f"), "noatime",
            journal="none: log-structured, checkpoints and roll-forward for fsync"),
]}

GIB = 1 << 30
MAX_IMAGE = 16 * GIB
MIN_IMAGE = 1 * GIB


def image_size_bytes() -> int:
    """Size of the RAM-backed image: 40% of RAM up to 16 GiB, at least 1 GiB,
    in whole GiB (see the module docstring)."""
    total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    size = min(MAX_IMAGE, int(total * 0.4)) if total else 8 * GIB
    return max(MIN_IMAGE, size // GIB * GIB)

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
    mkfs: list[str] = field(default_factory=list)   # the mkfs command run (device last)
    image_size: int | None = None      # bytes of the RAM-backed image
    user_device: bool = False          # a block device the user gave (--device)
    mkfs_s: float = 0.0                # seconds to make the image/device ready and format it
    mount_s: float = 0.0               # seconds to mount and drop caches
    kernel_options: str = ""           # the mount options as the kernel reports them

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
            "mkfs": self.mkfs,
            "mkfs_options": self.mkfs[1:-1],
            "image_size_bytes": self.image_size,
            "user_device": self.user_device,
            "journal": self.setup.journal,
            "kernel_mount_options": self.kernel_options,
            "mkfs_s": round(self.mkfs_s, 4),
            "mount_s": round(self.mount_s, 4),
        }


def _proc_filesystems() -> set[str]:
    try:
        return {line.split()[-1] for line in Path("/proc/filesystems").read_text().splitlines() if line.split()}
    except OSError:
        return set()


def kernel_support(fstype: str, load: bool = True) -> tuple[bool, str]:
    """Whether the running kernel has `fstype`: in /proc/filesystems, or after
    loading its module (`modprobe -q`, as root; `load=False` only looks)."""
    if fstype in _proc_filesystems():
        return True, "in /proc/filesystems"
    modprobe = shutil.which("modprobe") or next(
        (p for p in ("/usr/sbin/modprobe", "/sbin/modprobe") if os.access(p, os.X_OK)), None)
    if not modprobe:
        how = "modprobe is not installed (apt-get install kmod)"
    elif not load or os.geteuid() != 0:
        how = "its module was not loaded (needs root)" if load else "its module was not tried"
    else:
        p = subprocess.run([modprobe, "-q", fstype], capture_output=True, text=True)
        if fstype in _proc_filesystems():
            return True, "module loaded (modprobe)"
        how = f"`modprobe {fstype}` failed" + (f": {p.stderr.strip()}" if p.stderr.strip() else
                                              f" (exit {p.returncode}: no such module)")
    return False, f"the kernel has no {fstype}: not in /proc/filesystems, and {how}"


def find_tool(tool: str) -> str | None:
    """The path of an mkfs tool, also in the sbin directories a non-root PATH lacks."""
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


def tool_support(name: str) -> tuple[bool, str]:
    """Whether the tools setup `name` needs are installed."""
    setup = FS_SETUPS[name]
    if not setup.needs_device:
        return True, "no tool needed"
    tool = setup.mkfs[0]
    path = find_tool(tool)
    if not path:
        return False, f"{tool} is not installed (apt-get install {_PACKAGES.get(tool, tool)})"
    if not find_tool("losetup"):
        return False, "losetup is not installed (apt-get install mount)"
    if not Path("/dev/loop-control").exists():
        return False, "no loop device support (/dev/loop-control missing; modprobe loop)"
    return True, path


def availability(name: str) -> tuple[bool, str]:
    """Whether setup `name` can be created here, and why not."""
    setup = FS_SETUPS.get(name)
    if setup is None:
        return False, f"unknown file-system setup '{name}'"
    ok, why = kernel_support(setup.fstype)
    if not ok:
        return False, why
    ok, why = tool_support(name)
    if not ok:
        return False, why
    return True, "available"


_PACKAGES = {"mkfs.ext4": "e2fsprogs", "mkfs.xfs": "xfsprogs", "mkfs.btrfs": "btrfs-progs",
             "mkfs.f2fs": "f2fs-tools"}


def check_setup(name: str) -> FsSetup:
    if name not in FS_SETUPS:
        raise UsageError(f"unknown file system '{name}'",
                         f"choose from: {', '.join(FS_SETUPS)} (see `lockscope list`)")
    ok, why = availability(name)
    if not ok:
        raise EnvironmentProblem(f"file system '{name}' is not available here: {why}",
                                 "see `lockscope doctor`, or choose another --fs (see `lockscope list`)")
    return FS_SETUPS[name]


def _run(cmd: list[str], what: str) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise LockscopeError(f"{what} failed: {' '.join(cmd)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout.strip()


def unmount(path: Path, warnings: list[str] | None = None) -> None:
    """Unmount, retrying while the last users exit; lazily as a last resort
    (with a warning) so that a stuck process never leaves the mount behind."""
    how = umount(str(path))
    if how != "unmounted" and warnings is not None:
        warnings.append(f"{path} was busy; {how or 'it could not be unmounted'}")


# file systems that hold no files of their own (a scratch root there is a mistake)
VIRTUAL_FS = {"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "bpf", "devpts",
              "pstore", "configfs", "fusectl", "mqueue", "efivarfs", "binfmt_misc", "autofs", "devtmpfs",
              "hugetlbfs", "nsfs", "rpc_pipefs", "selinuxfs"}
OWNED_MARK = ".lockscope-owned"     # in a folder lockscope made for its file systems
OWN_SUBFOLDER = "lockscope"


def _fs_type_of(path: Path) -> str:
    """The file-system type of the mount that holds `path` (which exists)."""
    real, best, fstype = str(path.resolve()), -1, ""
    for _, target, kind in mounts():
        if (real == target or real.startswith(target.rstrip("/") + "/")) and len(target) > best:
            best, fstype = len(target), kind
    return fstype


def check_root(root: Path) -> None:
    """--scratch: a directory (or a path that can become one) on a file system
    that holds files and can be written; else a one-line usage error."""
    root = Path(root)
    there = root
    while not there.exists():
        there = there.parent
    fstype = _fs_type_of(there)
    if fstype in VIRTUAL_FS:
        raise UsageError(f"--scratch {root}: {there} is on {fstype}, a virtual file system that holds no files",
                         f"choose a directory on a real file system (default {DEFAULT_SCRATCH})")
    if not there.is_dir():
        raise UsageError(f"--scratch {root}: {there} is not a directory", "choose a directory")
    if not os.access(there, os.W_OK | os.X_OK) or os.statvfs(there).f_flag & os.ST_RDONLY:
        raise UsageError(f"--scratch {root}: {there} is not writable" +
                         (" (read-only file system)" if os.statvfs(there).f_flag & os.ST_RDONLY else ""),
                         "choose a writable directory, or run as root")


_told: set[Path] = set()


def _mark(folder: Path) -> None:
    (folder / OWNED_MARK).write_text("lockscope makes its file systems here; it removes only what it made.\n")


def workdir(root: Path) -> Path:
    """The folder lockscope makes its point directories in: `root` itself if
    lockscope made it (it is missing, empty, or carries OWNED_MARK); inside a
    root that holds anything else, a subfolder of its own (said once), so
    that nothing of the user's is ever among what it makes and removes."""
    root = Path(root)
    check_root(root)
    root.mkdir(parents=True, exist_ok=True)
    if (root / OWNED_MARK).exists():
        return root
    if not any(root.iterdir()):
        _mark(root)
        return root
    for n in itertools.count(1):
        sub = root / (OWN_SUBFOLDER if n == 1 else f"{OWN_SUBFOLDER}-{n}")
        try:
            sub.mkdir()
            _mark(sub)
        except FileExistsError:
            if not (sub / OWNED_MARK).exists():
                continue                # the user's: never ours to use
        if root not in _told:
            _told.add(root)
            print(f"lockscope: {root} holds files lockscope did not make: it works in {sub} "
                  "and touches nothing else there", file=sys.stderr)
        return sub
    raise AssertionError("unreachable")


def _own_dir(stack: contextlib.ExitStack, path: Path, exclusive: bool = True) -> Path:
    """mkdir `path`, record it, and rmdir it (only if empty) on the way out."""
    path.mkdir(exist_ok=not exclusive)
    item = ownership.made("dir", path=str(path))
    stack.callback(_remove_own_dir, path, item)
    return path


def _remove_own_dir(path: Path, item: dict) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)
    ownership.released(item)


def _point_dir(stack: contextlib.ExitStack, folder: Path, name: str) -> Path:
    """A new directory of this point, never one that already exists."""
    while True:
        try:
            return _own_dir(stack, folder / f"{name}-{os.getpid()}-{next(_counter)}")
        except FileExistsError:
            continue


def _mount(stack: contextlib.ExitStack, fs: MountedFs, args: list[str], source: str, fstype: str,
           target: Path, what: str) -> None:
    item = ownership.made("mount", path=str(target.resolve()), source=source, fstype=fstype)  # before: no window
    stack.callback(ownership.released, item)
    _run(["mount", *args, source, str(target)], what)
    stack.callback(unmount, target, fs.warnings)


def _attach_loop(stack: contextlib.ExitStack, image: Path) -> str:
    item = ownership.made("loop", backing=str(image.resolve()))    # before: no window; by its image
    stack.callback(ownership.released, item)
    device = _run(["losetup", "--find", "--show", str(image)], "attaching a loop device")
    stack.callback(detach_loop, device)
    return device


@contextlib.contextmanager
def mounted(name: str, scratch_root: Path = DEFAULT_SCRATCH, image_size_gib: int | None = None,
            device: str | None = None, image_size: int | None = None) -> Iterator[MountedFs]:
    """Create, format and mount a fresh `name` file system (on a new
    RAM-backed loop image, or on `device`, which the caller has checked with
    lockscope.machine.device.check_device); release it all on exit, however the block
    is left. Everything made is recorded first (lockscope/machine/ownership.py)."""
    setup = check_setup(name)
    if device and not setup.needs_device:
        raise UsageError(f"--device: {name} needs no block device", "drop --device, or choose a disk file system")
    folder = workdir(Path(scratch_root))
    with contextlib.ExitStack() as stack:
        watchdog.guard()                     # released even if lockscope is killed
        point = _point_dir(stack, folder, name)
        mnt = _own_dir(stack, point / "mnt")
        fs = MountedFs(setup=setup, mountpoint=mnt, point_dir=point)
        t0 = time.monotonic()
        if not setup.needs_device:
            _mount(stack, fs, ["-t", "tmpfs", "-o", f"{setup.mount_options},mode=0755"], MOUNT_SOURCE, "tmpfs",
                   mnt, "mounting tmpfs")
            t1 = t0
        else:
            if device:
                fs.device, fs.user_device = device, True
                size = _block_size(device)
            else:
                size = fs.image_size = image_size or (image_size_gib * GIB if image_size_gib else image_size_bytes())
                ram = _own_dir(stack, point / "ram")
                _mount(stack, fs, ["-t", "tmpfs", "-o", f"size={size + GIB},mode=0700"], MOUNT_SOURCE, "tmpfs",
                       ram, "mounting the RAM disk for the image")
                fs.image = ram / IMAGE_NAME
                with open(fs.image, "wb") as f:
                    f.truncate(size)
                fs.device = _attach_loop(stack, fs.image)
            fs.mkfs = setup.mkfs_command(size) + [fs.device]
            _run([find_tool(fs.mkfs[0]) or fs.mkfs[0]] + fs.mkfs[1:], f"formatting {setup.fstype}")
            t1 = time.monotonic()
            _mount(stack, fs, ["-t", setup.fstype, "-o", setup.mount_options], fs.device, setup.fstype,
                   mnt, f"mounting {setup.fstype}")
        st = os.stat(mnt)
        major, minor = os.major(st.st_dev), os.minor(st.st_dev)
        fs.dev = f"{major}:{minor}"
        fs.kernel_dev = (major << 20) | minor
        fs.kernel_options = mount_options_of(mnt)
        drop_caches(mnt)
        fs.mkfs_s, fs.mount_s = t1 - t0, time.monotonic() - t1
        yield fs


def _block_size(device: str) -> int:
    with open(device, "rb") as f:
        return f.seek(0, os.SEEK_END)
