"""Shared helpers: the recorded run records, the lockscope command, and the
gate for end-to-end tests (root, BTF and loadable probes, or a skip saying
exactly what is missing)."""
from __future__ import annotations

import ast

import functools
import os
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(REPO))

from lockscope.model import record  # noqa: E402


def load(name: str) -> record.RunRecord:
    """A recorded real run: 'mwrm_mmap_tmpfs/MWRM-tmpfs-w2'."""
    sweep, point = name.split("/")
    return record.load(DATA / sweep / "runs" / f"{point}.json")


def setup_keyword(name: str):
    """The literal value of one keyword of setup.py's setup() call."""
    for node in ast.walk(ast.parse((REPO / "setup.py").read_text())):
        if isinstance(node, ast.keyword) and node.arg == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py has no {name}")


def installed_layout(dest: Path) -> Path:
    """The package as pip installs it, made of links into the tree:
    dest/lockscope/ holds lockscope/'s entries and analyzer/, reports/,
    templates/ as subpackages. For a process that cannot read root's
    site-packages (where the editable install's finder lives)."""
    pkg = dest / "lockscope"
    pkg.mkdir(parents=True)
    for entry in (REPO / "lockscope").iterdir():
        (pkg / entry.name).symlink_to(entry)
    for package, folder in setup_keyword("package_dir").items():
        if package.count(".") == 1:
            (pkg / package.split(".")[1]).symlink_to(REPO / folder)
    return dest


def lockscope(*args: str, timeout: float = 300, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """Run `python -m lockscope ARGS` from this source tree."""
    return subprocess.run([sys.executable, "-m", "lockscope", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, **kw)


@functools.lru_cache(maxsize=1)
def e2e_missing() -> str | None:
    """Why end-to-end tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "end-to-end tests need root (they load BPF programs and mount file systems)"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "end-to-end tests need kernel BTF: /sys/kernel/btf/vmlinux is missing"
    from lockscope import paths
    from lockscope.errors import LockscopeError
    try:
        paths.probe_binary()
        paths.workload_binary()
    except LockscopeError as e:
        return f"end-to-end tests need the C parts built: {e.message} (run `make build`)"
    from lockscope.measure.probe import ProbeSession
    try:
        with ProbeSession():
            pass
    except LockscopeError as e:
        return f"end-to-end tests need loadable BPF probes: {e}"
    return None


@pytest.fixture(scope="session")
def e2e():
    """Skips where end-to-end tests cannot run. Session-scoped, so that a
    module's shared measurement (a module-scoped fixture) can ask for it:
    every test whose fixtures include it is marked e2e."""
    why = e2e_missing()
    if why:
        pytest.skip(why)


def pytest_collection_modifyitems(items):
    """A test that asks for the e2e fixture is end-to-end whether or not it
    carries the mark: `-m "not e2e"` leaves it out too."""
    for item in items:
        if "e2e" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def scratch(tmp_path):
    """A private scratch root; asserts that nothing is left mounted under it."""
    root = tmp_path / "scratch"
    yield root
    left = left_under(root)
    assert not left["mounts"] and not left["loop_devices"], f"left behind: {left}"


@pytest.fixture
def server_scratch():
    """A private scratch root an unprivileged server's user (postgres,
    Debian-exim) can reach (pytest's tmp_path is root's, mode 700); asserts
    that nothing is left mounted under it."""
    root = Path(tempfile.mkdtemp(prefix="lksc-server-test-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    left = left_under(root)
    shutil.rmtree(root, ignore_errors=True)
    assert not left["mounts"] and not left["loop_devices"], f"left behind: {left}"


def servers_under(root: Path) -> list[str]:
    """Live processes whose command line names `root` (a server lockscope
    started there; the machine's own PostgreSQL or Exim is not counted)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(root) in args and state != "Z":
            out.append(f"{d.name}: {args}")
    return out


def left_under(root) -> dict[str, list[str]]:
    """What is mounted or attached under `root` now (whoever made it); a
    dead lockscope's recorded leftovers are reclaimed first."""
    from lockscope.machine import ownership, scratch as sc
    ownership.reclaim()
    r = str(Path(root).resolve())
    return {"mounts": [m[1] for m in sc.mounts() if m[1].startswith(r + "/")],
            "loop_devices": [d for d, backing in sc.loop_devices() if backing.startswith(r + "/")]}


def bpftool_progs() -> list[str]:
    import json
    if not shutil.which("bpftool"):
        return []
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
    return [p.get("name", "") for p in json.loads(out or "[]")]


def held_prog_ids() -> set[int]:
    """Ids of the BPF programs some live process holds an fd of (a program
    fd or a link fd: fdinfo says `prog_id`)."""
    ids: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fdinfo")
        except OSError:
            continue
        for fd in fds:
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    ids.update(int(line.split()[1]) for line in f if line.startswith("prog_id:"))
            except (OSError, ValueError, IndexError):
                continue
    return ids


def leaked_progs(prefix: str) -> list[str]:
    """Programs named `prefix`* that no live process holds: left attached
    by a link nobody closes (another lockscope running now holds its own)."""
    import json
    if not shutil.which("bpftool"):
        return []
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
    progs = [(p["id"], p.get("name", "")) for p in json.loads(out or "[]") if p.get("name", "").startswith(prefix)]
    if not progs:
        return []
    held = held_prog_ids()
    return [f"{name} (id {pid})" for pid, name in progs if pid not in held]


def our_processes() -> list[tuple[str, str]]:
    """(pid, comm) of every live lockscope-probe, lockscope-inject and lockscope-workload
    process (a zombie is dead, waiting to be reaped)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                comm = (d / "comm").read_text().strip()
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if comm in ("lockscope-probe", "lockscope-workl", "lockscope-injec") and state != "Z":
                out.append((d.name, comm))
    return out


def kill_with_watchdog(proc: subprocess.Popen) -> None:
    """SIGKILL a lockscope and its watchdog at once (a session killed whole,
    as a container stop does): no cleanup runs at all."""
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "cmdline").read_bytes().split(b"\0")[1:4] == \
                    [b"-m", b"lockscope.machine.watchdog", str(proc.pid).encode()]:
                os.kill(int(d.name), 9)
        except (OSError, IndexError):
            pass
    proc.kill()
    proc.wait(timeout=10)


def run_program(name: str, tmp_path: Path, *args: str, workers: str = "2") -> record.RunRecord:
    """`lockscope run --workers W --duration 2 -- PROGRAM {n} ARGS` of a C
    program of tests/programs that prints "ops/s: X", built here; its
    record (end-to-end tests: skipped where they cannot run)."""
    why = e2e_missing()
    if why:
        pytest.skip(why)
    exe = build_c(REPO / "tests" / "programs" / f"{name}.c", tmp_path / name, ("-O2",))
    out = tmp_path / "out"
    p = lockscope("run", "--workers", workers, "--duration", "2", "--throughput-regex", r"ops/s: ([0-9.]+)",
                  "--out", str(out), "--", str(exe), "{n}", *args)
    assert p.returncode == 0, p.stderr
    [f] = (out / "runs").glob("*.json")
    return record.load(f)


@functools.lru_cache(maxsize=1)
def go_cache() -> Path:
    """One Go build cache for the test session (removed at its end): the
    first build compiles Go's standard library (7.6 s on 2 CPUs), later ones
    reuse it (0.3 s); the user's own cache is left alone."""
    import atexit
    d = Path(tempfile.mkdtemp(prefix="lockscope-test-gocache-"))
    atexit.register(shutil.rmtree, d, True)
    return d


def go_env() -> dict[str, str]:
    """The environment of the tests' `go build` and `go tool pprof`: GOPATH
    mode (the programs are single files) and the session's cache."""
    return {**os.environ, "GOCACHE": str(go_cache()), "GOFLAGS": "", "GO111MODULE": "off"}


def build_c(source: Path, exe: Path, flags: tuple[str, ...] = ("-O2", "-pthread"), cwd: Path | None = None,
            libs: tuple[str, ...] = ()) -> Path:
    """A C test program compiled with gcc (or cc) into `exe` (linked with
    `libs`, e.g. "-lsqlite3"), or the test skipped saying that no compiler
    is there."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip(f"a C compiler (gcc) is needed to build {source}")
    subprocess.run([cc, *flags, "-o", str(exe), str(source), *libs], check=True, cwd=cwd)
    return Path(cwd) / exe if cwd else exe
