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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from lockscope import watchdog
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


def _syncfs(path: Path) -> None:
    import ctypes
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


def mount_options_of(path: Path) -> str:
    """The options the kernel reports for the mount at `path` ('' if none)."""
    target = str(Path(path).resolve())
    found = ""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1].encode().decode("unicode_escape") == target:
            found = parts[3]           # the last one is the one on top
    return found


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
def mounted(name: str, scratch_root: Path = DEFAULT_SCRATCH, image_size_gib: int | None = None,
            device: str | None = None, image_size: int | None = None) -> Iterator[MountedFs]:
    """Create, format and mount a fresh `name` file system (on a new
    RAM-backed loop image, or on `device`, which the caller has checked with
    lockscope.device.check_device); release it all on exit, however the block
    is left."""
    setup = check_setup(name)
    if device and not setup.needs_device:
        raise UsageError(f"--device: {name} needs no block device", "drop --device, or choose a disk file system")
    scratch_root = Path(scratch_root)
    with contextlib.ExitStack() as stack:
        scratch_root.mkdir(parents=True, exist_ok=True)
        watchdog.guard_scratch(scratch_root)     # released even if lockscope is killed
        point = scratch_root / f"{name}-{os.getpid()}-{next(_counter)}"
        point.mkdir()
        stack.callback(shutil.rmtree, point, ignore_errors=True)
        mnt = point / "mnt"
        mnt.mkdir()
        fs = MountedFs(setup=setup, mountpoint=mnt, point_dir=point)
        t0 = time.monotonic()
        if not setup.needs_device:
            _run(["mount", "-t", "tmpfs", "-o", f"{setup.mount_options},mode=0755",
                  MOUNT_SOURCE, str(mnt)], "mounting tmpfs")
            stack.callback(unmount, mnt, fs.warnings)
            t1 = t0
        else:
            if device:
                fs.device, fs.user_device = device, True
                size = _block_size(device)
            else:
                size = fs.image_size = image_size or (image_size_gib * GIB if image_size_gib else image_size_bytes())
                ram = point / "ram"
                ram.mkdir()
                _run(["mount", "-t", "tmpfs", "-o", f"size={size + GIB},mode=0700",
                      MOUNT_SOURCE, str(ram)], "mounting the RAM disk for the image")
                stack.callback(unmount, ram, fs.warnings)
                fs.image = ram / IMAGE_NAME
                with open(fs.image, "wb") as f:
                    f.truncate(size)
                fs.device = _run(["losetup", "--find", "--show", str(fs.image)], "attaching a loop device")
                stack.callback(_detach_loop, fs.device)
            fs.mkfs = setup.mkfs_command(size) + [fs.device]
            _run([find_tool(fs.mkfs[0]) or fs.mkfs[0]] + fs.mkfs[1:], f"formatting {setup.fstype}")
            t1 = time.monotonic()
            _run(["mount", "-t", setup.fstype, "-o", setup.mount_options, fs.device, str(mnt)],
                 f"mounting {setup.fstype}")
            stack.callback(unmount, mnt, fs.warnings)
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
