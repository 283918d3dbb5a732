"""Checks of the command line's values: each parses or checks one option and
raises a UsageError (bad input, exit 2) or an EnvironmentProblem (this
machine lacks something, exit 3) with its one-line message and fix."""
from __future__ import annotations

import os
import re
import shutil
import struct
import sys
from pathlib import Path

from lockscope.machine import device, scratch
from lockscope.model.record import NO_FS
from lockscope.errors import EnvironmentProblem, UsageError

MAX_WORKERS_PER_CPU = 64


def ncpus() -> int:
    """The CPUs lockscope may use (its affinity), the default worker count."""
    return len(os.sched_getaffinity(0))


def parse_workers(text: str) -> list[int]:
    """'2' | '1,2,4' | '1-4' -> sorted distinct worker counts."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
    except ValueError:
        raise UsageError(f"--workers {text!r}: expected a count, a list (1,2,4) or a range (1-4)") from None
    return sorted(out)


def check_workers(counts: list[int], force: bool, infos: list[dict] | None = None) -> None:
    """Worker counts: at most MAX_WORKERS_PER_CPU per CPU unless --force, except for workloads
    whose tasks mostly sleep (catalog many_tasks, e.g. syncs), which may use
    up to their max_workers; no workload goes beyond its max_workers."""
    limit = MAX_WORKERS_PER_CPU * ncpus()
    infos = infos or []
    for n in counts:
        check_worker_count(n)
        if n > limit and not force and not (infos and all(info.get("many_tasks") for info in infos)):
            raise UsageError(
                f"--workers {n} is more than {MAX_WORKERS_PER_CPU} per CPU (this machine lets lockscope use "
                f"{ncpus()}): at that level a run measures the scheduler, not the workload",
                "use fewer workers, or pass --force to run it anyway")
        for info in infos:
            if info.get("max_workers") and n > info["max_workers"]:
                raise UsageError(f"--workers {n}: workload {info['name']} runs at most {info['max_workers']} workers")


def parse_params(items: list[str] | None) -> dict[str, str]:
    """--param KEY=VALUE (repeatable) -> {KEY: VALUE}."""
    out = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--param {item!r}: expected KEY=VALUE, e.g. --param files=128")
        out[key.strip()] = value.strip()
    return out


def check_worker_count(n: int | None) -> None:
    """One worker count (None: not given)."""
    if n is not None and n < 1:
        raise UsageError(f"--workers {n}: needs at least 1 worker")


def check_live_interval(interval: float) -> None:
    """top's --interval: each interval is named while the next one runs."""
    if interval < 0.2:
        raise UsageError(f"--interval {interval:g}: must be 0.2 seconds or more")


def check_batch(batch: int | None) -> None:
    if batch is not None and batch < 1:
        raise UsageError(f"--batch {batch}: must be 1 or more")


def parse_delays(text: str | None, cap_us: float) -> list[int] | None:
    """confirm's --delays: microseconds, comma-separated -> nanoseconds."""
    if text is None:
        return None
    try:
        us = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--delays {text}: give microseconds separated by commas, e.g. 0.5,1,2") from None
    if not us or any(not 0 < u <= cap_us for u in us):
        raise UsageError(f"--delays {text}: each must be above 0 and at most {cap_us:g} us "
                         "(the cap of a wait inside a kernel lock)")
    return sorted({round(u * 1000) for u in us})


def check_phases(phase: float, rounds: int, discover: float) -> None:
    """confirm's --phase, --rounds and --discover."""
    if phase < 0.5:
        raise UsageError(f"--phase {phase:g}: must be 0.5 seconds or more (the workload reports every 0.1 s)")
    if rounds < 1:
        raise UsageError(f"--rounds {rounds}: must be 1 or more")
    if discover < 0.5:
        raise UsageError(f"--discover {discover:g}: must be 0.5 seconds or more")


MAX_REPEATS = 50


def check_repeats(k: int) -> int:
    """sweep's --repeat."""
    if not 1 <= k <= MAX_REPEATS:
        raise UsageError(f"--repeat {k}: must be 1 to {MAX_REPEATS}",
                         "3 or 5 give an interval at each point; 1 runs each point once")
    return k


def check_interval(interval: float) -> None:
    if interval < 0:
        raise UsageError(f"--interval {interval:g}: must be 0 (off) or more seconds")


def check_max_overhead(pct: float | None) -> float | None:
    """--max-overhead: a budget in percent of the machine's CPUs, or 0 for none."""
    if pct is None:
        return None
    if not 0 <= pct < 100:
        raise UsageError(f"--max-overhead {pct:g}: must be a percentage of the CPUs, at least 0 and below 100",
                         "e.g. --max-overhead 3 (0: no budget)")
    return pct or None


def check_sample_hz(hz: int) -> None:
    if not 0 <= hz <= 10000:
        raise UsageError(f"--sample-hz {hz}: must be between 0 and 10000")


def check_duration(duration: float | None, warmup: float, required: bool = True) -> None:
    if duration is None:
        if required:
            raise UsageError("--duration is required")
        return
    if not duration > 0:
        raise UsageError(f"--duration {duration:g}: must be more than 0 seconds")
    if warmup < 0:
        raise UsageError(f"--warmup {warmup:g}: must be 0 or more seconds")


def parse_cpus(text: str | None) -> list[int] | None:
    """--cpus 0,1 -> [0, 1], CPUs this process may run on; None without it."""
    if text is None:
        return None
    try:
        cpus = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"--cpus {text!r}: expected a list of CPU numbers such as 0,1") from None
    allowed = os.sched_getaffinity(0)
    bad = [c for c in cpus if c not in allowed]
    if not cpus or bad:
        raise UsageError(f"--cpus {text!r}: CPUs {bad or cpus} are not available here "
                         f"(allowed: {','.join(map(str, sorted(allowed)))})")
    return cpus


def check_command_given(command: list[str] | None, verb: str) -> None:
    """A `--` must be followed by the command to profile."""
    if command is not None and not command:
        raise UsageError("nothing after --", f"give the command to profile: lockscope {verb} ... -- CMD ARGS")


def check_command(command: list[str]) -> None:
    """The program after -- exists and is executable."""
    exe = command[0]
    found = shutil.which(exe) if "/" not in exe else (exe if os.access(exe, os.X_OK) and
                                                     not os.path.isdir(exe) else None)
    if not found:
        raise UsageError(f"command not found or not executable: {exe}",
                         "give the program's path, or a program on PATH, after --")


def check_regex(option: str, regex: str | None) -> None:
    """A --throughput-regex, --ops-regex or --rate-regex compiles and has a
    group for its number (checked before anything runs)."""
    if regex is None:
        return
    try:
        groups = re.compile(regex).groups
    except re.error as e:
        raise UsageError(f"{option} {regex!r}: not a regular expression ({e})",
                         "quote it for the shell, and escape ( ) [ ] . * + ? with a backslash where they are literal "
                         r"text, e.g. 'ops/s: ([0-9.]+)'") from None
    if groups < 1:
        raise UsageError(f"{option} {regex!r}: has no group for the number",
                         r"put the number in parentheses, e.g. 'ops/s: ([0-9.]+)'")


def command_name(name: str | None, command: list[str]) -> str:
    """The name of a profiled command in the results: --name or its program,
    reduced to letters, digits and ._- (at most 40)."""
    name = name or Path(command[0]).name
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:40] or "command"


def available_fs(fss: list[str]) -> tuple[list[str], dict[str, str]]:
    """The sweep's setups that exist here, and those skipped with the reason
    (an unknown name is bad input; a known one missing here is skipped)."""
    keep, skipped = [], {}
    for fs in fss:
        if fs == NO_FS:
            keep.append(fs)
            continue
        if fs not in scratch.FS_SETUPS:
            scratch.check_setup(fs)       # raises the usage error
        ok, why = scratch.availability(fs)
        if ok:
            keep.append(fs)
        else:
            skipped[fs] = why
            print(f"lockscope: warning: skipping file system '{fs}': {why}", file=sys.stderr)
    if not keep:
        raise EnvironmentProblem(f"none of the file systems asked for is available here "
                                 f"({'; '.join(f'{k}: {v}' for k, v in skipped.items())})",
                                 "run `lockscope doctor`, or choose others (see `lockscope list`)")
    return keep, skipped


def check_device(path: str | None, confirm: str | None, fss: list[str]) -> str | None:
    """--device, checked (refusals are usage errors), for disk setups only."""
    blockdev = device.check_device(path, confirm)
    if blockdev:
        bad = [f for f in fss if f not in scratch.FS_SETUPS or not scratch.FS_SETUPS[f].needs_device]
        if bad:
            raise UsageError(f"--device is for disk file systems; {', '.join(bad)} "
                             f"{'uses' if len(bad) == 1 else 'use'} none",
                             "choose --fs among " + ", ".join(n for n, s in scratch.FS_SETUPS.items()
                                                                if s.needs_device))
    return blockdev


def check_vmlinux(path: Path | None) -> Path | None:
    """--vmlinux: a readable System.map or vmlinux with data symbols."""
    if path is None:
        return None
    from lockscope.analyzer.kernel import kimage
    try:
        kimage.load_symbols(path)
    except OSError as e:
        raise UsageError(f"--vmlinux {path}: {e.strerror or e}", "give the System.map or vmlinux of this kernel")
    except (ValueError, IndexError, struct.error) as e:
        raise UsageError(f"--vmlinux {e}" if str(e).startswith(str(path)) else f"--vmlinux {path}: {e}",
                         "give the System.map or vmlinux of this kernel")
    return Path(path).resolve()


def require_run_environment(probe: bool) -> None:
    """Root, and with the probes everything they need (BTF, BPF, the binary)."""
    if probe:
        from lockscope.measure.probe import preflight
        preflight()
    elif os.geteuid() != 0:
        raise EnvironmentProblem("lockscope needs root to mount its scratch file systems",
                                 "run it with sudo (or as root)")


# file systems that hold no files of their own: a results directory there
# fails at the first write (or writes into the kernel's interfaces)
VIRTUAL_FS = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
              "bpf", "configfs", "pstore", "efivarfs", "fusectl", "mqueue", "hugetlbfs", "binfmt_misc",
              "autofs", "nsfs", "rpc_pipefs", "selinuxfs"}


def _mount_of(path: Path) -> tuple[str, str, set[str]]:
    """(mount point, file-system type, mount options) of an existing path:
    the longest mount point of /proc/self/mountinfo that holds it."""
    best = ("/", "", set())
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return best
    real = os.path.realpath(path)
    for line in lines:
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) < 6 or not r:
            continue
        mnt = f[4].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
            best = (mnt, r[0], set(f[5].split(",")))
    return best


def check_writable_dir(path: Path, option: str = "--out") -> None:
    """A directory lockscope will write results into (it may not exist yet):
    not on a virtual file system, not a file, and writable where it is or
    where it would be created. Refusals are usage errors naming the path;
    nothing is created."""
    path = Path(path)
    fix = f"give {option} a writable directory on a real file system"
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if os.path.lexists(probe) and not probe.is_dir():
        raise UsageError(f"{option} {path}: {probe} is {'a broken link' if not probe.exists() else 'not a directory'}",
                         fix)
    mnt, fstype, opts = _mount_of(probe)
    if fstype in VIRTUAL_FS:
        raise UsageError(f"{option} {path}: {mnt} is a virtual file system ({fstype}) that cannot hold results", fix)
    if not os.access(probe, os.W_OK | os.X_OK):
        why = (f"{mnt} is mounted read-only" if "ro" in opts or _read_only(probe)
               else f"{probe} is not writable by this user")
        raise UsageError(f"{option} {path}: {why}", fix)


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_writable_file(path: Path, option: str) -> None:
    """A file lockscope will write (e.g. compare --html): its directory is checked."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory", f"give {option} a file name")
    check_writable_dir(path.parent, option)
