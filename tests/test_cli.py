"""Bad input and missing requirements: a clear message naming the fix, a
non-zero exit code, and nothing created."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, installed_layout, lockscope


def run_bad(tmp_path, *args, code=2):
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    args = list(args)
    at = args.index("--") if "--" in args else len(args)
    args[at:at] = ["--out", str(out), "--scratch", str(scratch)]
    p = lockscope(*args, timeout=60)
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert not out.exists() and not scratch.exists(), "nothing may be created on bad input"
    return p.stderr


def test_unknown_workload_lists_the_valid_ones(tmp_path):
    err = run_bad(tmp_path, "run", "MWXX", "--workers", "2", "--duration", "1")
    assert "lockscope: error: unknown workload 'MWXX'" in err
    assert "fix: choose from: DRBL, DRBM, DRBH, DWOL, DWOM" in err and "MWRM" in err and "-- CMD ARGS" in err


def test_wrong_case_workload_suggests_the_right_one(tmp_path):
    err = run_bad(tmp_path, "run", "mwrm", "--duration", "1")
    assert "did you mean MWRM?" in err


def test_unknown_fs(tmp_path):
    err = run_bad(tmp_path, "run", "MWRM", "--fs", "zfs", "--duration", "1")
    assert "unknown file system 'zfs'" in err and "choose from: tmpfs, ext4" in err
    err = run_bad(tmp_path, "sweep", "--repeat", "1", "MWRM", "--fs", "tmpfs,zfs", "--duration", "1")
    assert "unknown file system 'zfs'" in err


@pytest.mark.parametrize("workers,message", [
    ("0", "needs at least 1 worker"),
    ("abc", "expected a count, a list (1,2,4) or a range (1-4)"),
    ("4-2", "expected a count"),
    ("100000", "more than 64 per CPU"),
])
def test_bad_worker_counts(tmp_path, workers, message):
    err = run_bad(tmp_path, "sweep", "--repeat", "1", "MWRM", "--workers", workers, "--duration", "1")
    assert message in err
    if workers == "100000":
        assert "--force" in err


def test_bad_durations(tmp_path):
    assert "must be more than 0 seconds" in run_bad(tmp_path, "run", "MWRM", "--duration", "0")
    assert "must be 0 or more" in run_bad(tmp_path, "run", "MWRM", "--duration", "1", "--warmup", "-1")


def test_run_needs_something_to_run(tmp_path):
    assert "no workload given" in run_bad(tmp_path, "run", "--duration", "1")
    assert "nothing after --" in run_bad(tmp_path, "run", "--duration", "1", "--")
    err = run_bad(tmp_path, "run", "--duration", "1", "--", "/nonexistent/prog", "{n}")
    assert "command not found or not executable: /nonexistent/prog" in err
    assert "both a workload" in run_bad(tmp_path, "run", "MWRM", "--duration", "1", "--", "true")


def test_double_dash_only_goes_with_run_sweep_and_confirm(tmp_path):
    p = lockscope("analyze", str(tmp_path), "--", "true")
    assert p.returncode == 2 and "only go with run, sweep and confirm" in p.stderr


def test_bad_cpus(tmp_path):
    assert "are not available here" in run_bad(tmp_path, "run", "MWRM", "--duration", "1", "--cpus", "999")


@pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv (util-linux) is needed to drop root")
def test_not_root_is_an_environment_error_with_the_fix(tmp_path):
    os.chmod(tmp_path, 0o777)
    cmd = [sys.executable, "-m", "lockscope", "run", "MWRM", "--duration", "1",
           "--out", str(tmp_path / "out"), "--scratch", str(tmp_path / "scratch")]
    if os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"] + cmd
    # root's Python and its editable install live under /root (0700): the
    # other user imports the package from a layout of the tree as installed
    # (pytest's tmp_path lies under a 0700 folder too)
    with tempfile.TemporaryDirectory(prefix="lockscope-test-") as site:
        os.chmod(site, 0o755)
        installed_layout(Path(site))
        env = {**os.environ, "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": site}
        p = subprocess.run(cmd, cwd=site, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "lockscope needs root" in p.stderr and "fix: run it with sudo" in p.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "scratch").exists()


def test_sweep_refuses_to_mix_parameters_into_an_existing_sweep(tmp_path, e2e):
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"schema": "lockscope.sweep/1", "params": {"duration": 5.0}}))
    p = lockscope("sweep", "--repeat", "1", "MWRM", "--fs", "tmpfs", "--duration", "3", "--out", str(out),
                  "--scratch", str(tmp_path / "scratch"))
    assert p.returncode == 2
    assert "holds a sweep with other parameters (duration: 5.0 there, 3.0 now)" in p.stderr
    assert not (out / "runs").exists() and not (tmp_path / "scratch").exists()


def test_list_names_workloads_and_file_systems():
    p = lockscope("list", "--json")
    assert p.returncode == 0
    doc = json.loads(p.stdout)
    names = {w["name"]: w for w in doc["workloads"]}
    assert {"DWOL", "DWOM", "MWCL", "MWCM", "MWUL", "MWRL", "MWRM", "MRPL", "MRPH", "mmap"} <= set(names)
    assert names["MWRM"]["sharing"] == "dir" and names["mmap"]["model"] == "thread"
    fs = {f["name"]: f for f in doc["fs"]}
    assert fs["tmpfs"]["available"] is True and "ext4" in fs
    text = lockscope("list").stdout
    assert "MWRM" in text and "rename a private file into one shared directory and back" in text


def test_installed_command_runs():
    exe = shutil.which("lockscope")
    if not exe:
        pytest.skip("the lockscope command is not installed: `make test` installs it with pip install -e .")
    p = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("lockscope ")
    p = subprocess.run([exe, "list", "--json"], capture_output=True, text=True, cwd="/")
    assert p.returncode == 0 and "MWRM" in p.stdout     # finds its installed C binaries


def test_missing_btf_names_the_kernel_option(monkeypatch, tmp_path):
    from lockscope.measure import probe
    from lockscope.errors import EnvironmentProblem
    if os.geteuid() != 0:
        pytest.skip("the root check comes first; run as root to reach the BTF check")
    monkeypatch.setattr(probe, "BTF", tmp_path / "vmlinux")
    with pytest.raises(EnvironmentProblem) as e:
        probe.preflight()
    assert "has no BTF type information" in e.value.message and "CONFIG_DEBUG_INFO_BTF=y" in e.value.fix
    assert e.value.exit_code == 3


@pytest.mark.parametrize("event,message,fix", [
    ({"stage": "preflight", "errno": 2, "message": "this kernel has no lock:contention_begin tracepoint"},
     "no lock:contention_begin tracepoint", "Linux 5.19+"),
    ({"stage": "load", "errno": 1, "message": "loading the BPF probes failed: Operation not permitted"},
     "Operation not permitted", "unprivileged_bpf_disabled"),
])
def test_probe_load_errors_become_environment_errors_with_a_fix(event, message, fix):
    from lockscope.errors import EnvironmentProblem
    from lockscope.measure.probe import ProbeSession
    s = ProbeSession()
    with pytest.raises(EnvironmentProblem) as e:
        s.on_error({"event": "error", **event})
    assert message in e.value.message and fix in e.value.fix and e.value.exit_code == 3


@pytest.mark.parametrize("option, message", [
    (["--param", "files"], "--param 'files': expected KEY=VALUE"),
    (["--interval", "-1"], "--interval -1: must be 0 (off) or more seconds"),
    (["--workers", "0"], "--workers 0: needs at least 1 worker"),
    (["--duration", "0"], "--duration 0: must be more than 0 seconds"),
    (["--warmup", "-1"], "--warmup -1: must be 0 or more seconds"),
    (["--sample-hz", "10001"], "--sample-hz 10001: must be between 0 and 10000"),
])
def test_run_and_sweep_share_their_checks(option, message):
    """run and sweep check their common options in one place, with one message."""
    from lockscope import settings
    from lockscope.cliargs import build_parser
    from lockscope.errors import UsageError

    for build, cmd in ((settings.point_spec, "run"), (settings.sweep_spec, "sweep")):
        args = build_parser().parse_args([cmd, "MWRM", *option])
        with pytest.raises(UsageError, match="^" + re.escape(message)):
            build(args, None)


def test_worker_counts_parse_lists_and_ranges():
    from lockscope.errors import UsageError
    from lockscope.validate import parse_workers

    assert parse_workers("4,1-3, 2") == [1, 2, 3, 4]
    with pytest.raises(UsageError, match="expected a count, a list"):
        parse_workers("3-1")


# ---- bad paths, bad run records, busy and full results directories (issue 12) ----
#
# Every case: one `lockscope: error:` line (with its `fix:`), the exit code of
# README.md's "Troubleshooting" table, no traceback, and for run and sweep
# nothing created or mounted. The tables below are that table's rows.

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")


def tmpfs(path, size="1m"):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    return path


def umount(path):
    subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def read_only(tmp_path):
    """A read-only tmpfs holding a copy of a recorded sweep in sweep/ (root
    ignores mode bits, a read-only mount refuses root too)."""
    ro = tmpfs(tmp_path / "ro")
    try:
        shutil.copytree(REPO / "tests" / "data" / "pool", ro / "sweep")
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        yield ro
    finally:
        umount(ro)


def assert_one_error(p, code, *needles):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("lockscope: error:")]
    assert len(errors) == 1, p.stderr
    for n in needles:
        assert n in p.stderr, (n, p.stderr)


# where --out points -> what the error says (exit 2, before anything is mounted or loaded)
BAD_OUT = [
    ("/proc/lockscope-x", "/proc is a virtual file system (proc)"),
    ("/sys/fs/lockscope-x", "is a virtual file system (sysfs)"),
    ("/proc/self/status", "/proc/self/status is not a directory"),
    ("/etc/hostname/x", "/etc/hostname is not a directory"),
    ("{ro}/out", "is mounted read-only"),
]


@needs_root
@pytest.mark.parametrize("cmd", ["run", "sweep"])
@pytest.mark.parametrize("out,message", BAD_OUT, ids=[o for o, _ in BAD_OUT])
def test_bad_out_directory_is_refused_before_anything_runs(tmp_path, read_only, cmd, out, message):
    out = out.format(ro=read_only)
    existed = os.path.exists(out)
    scratch = tmp_path / "scratch"
    p = lockscope(cmd, "MWRM", "--workers", "1", "--duration", "1", "--no-probe", "--out", out,
                  "--scratch", str(scratch), timeout=60)
    assert_one_error(p, 2, f"--out {out}", message, "fix: give --out a writable directory")
    assert not scratch.exists() and os.path.exists(out) == existed


@needs_root
@pytest.mark.parametrize("args,code,message", [
    (["report", "{ro}/sweep"], 2, "report directory {ro}/sweep/report: {ro} is mounted read-only"),
    (["report", "{ro}/sweep", "--out", "/proc/lockscope-x"], 2, "/proc is a virtual file system"),
    (["export", "{ro}/sweep"], 2, "exports directory {ro}/sweep/exports: {ro} is mounted read-only"),
    (["compare", "{ro}/sweep", "{ro}/sweep", "--html", "{ro}/c.html"], 2, "--html {ro}: {ro} is mounted read-only"),
    (["report", "{ro}/nope"], 2, "{ro}/nope does not exist"),
], ids=["report-ro", "report-proc", "export-ro", "compare-html-ro", "report-missing"])
def test_result_commands_refuse_unwritable_outputs(read_only, args, code, message):
    p = lockscope(*[a.format(ro=read_only) for a in args], timeout=120)
    assert_one_error(p, code, message.format(ro=read_only))


# a run record spoiled by hand or by a cut copy -> what the warning says about it
BAD_RECORDS = [
    ("cut", lambda t: t[:len(t) // 2], "cut short ("),
    ("not-json", lambda t: "x" + t, "not valid JSON (Expecting value: line 1 column 1)"),
    ("empty", lambda t: "", "empty file"),
    ("list", lambda t: "[1, 2]", "not a lockscope run record (a JSON list, not an object)"),
    ("no-workers", lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "workers"}),
     "missing field 'workers'"),
    ("workers-text", lambda t: json.dumps({**json.loads(t), "workers": "two"}),
     "field workers: expected an integer, got a string 'two'"),
    ("locks-object", lambda t: json.dumps({**json.loads(t), "locks": {"a": 1}}),
     "field locks: expected a list, got an object"),
    ("nested-type", lambda t: json.dumps({**json.loads(t), "cpu": {"user": "lots"}}),
     "field cpu.user: expected a number, got a string 'lots'"),
    ("schema", lambda t: json.dumps({**json.loads(t), "schema": "lockscope.run/9"}),
     "run record schema lockscope.run/9 is not supported"),
]


def spoiled(tmp_path, how):
    d = tmp_path / "sweep"
    shutil.copytree(REPO / "tests" / "data" / "pool", d)
    runs = sorted((d / "runs").glob("*.json"))
    bad = runs[-1]
    bad.write_text(how(bad.read_text()))
    return d, bad


@pytest.mark.parametrize("name,how,message", BAD_RECORDS, ids=[b[0] for b in BAD_RECORDS])
def test_bad_run_record_is_skipped_with_a_warning_and_exit_2(tmp_path, name, how, message):
    """A bad record is skipped: the command's output holds the good points,
    a warning names the file and what is wrong, and the exit code is 2."""
    d, bad = spoiled(tmp_path, how)
    p = lockscope("analyze", str(d), "--json", timeout=120)
    assert_one_error(p, 2, f"lockscope: warning: skipping run record {bad}: {message}", "1 unreadable run record")
    assert json.loads(p.stdout)["experiments"], "the good points are analyzed"


@pytest.mark.parametrize("cmd", ["report", "export", "compare"])
def test_every_result_command_skips_a_bad_record(tmp_path, cmd):
    d, bad = spoiled(tmp_path, BAD_RECORDS[0][1])
    args = {"report": [str(d)], "export": [str(d)], "compare": [str(d), str(REPO / "tests" / "data" / "pool")]}
    p = lockscope(cmd, *args[cmd], timeout=120)
    assert_one_error(p, 2, f"skipping run record {bad}: cut short")
    if cmd == "report":
        assert (d / "report" / "index.html").exists()
    if cmd == "export":
        assert (d / "exports" / "bottlenecks.csv").exists()
        assert not (d / "exports" / "runs" / bad.name).exists(), "a bad record is not exported"
    if cmd == "compare":
        assert p.stdout


def test_only_bad_run_records_stop_the_command(tmp_path):
    d = tmp_path / "sweep"
    (d / "runs").mkdir(parents=True)
    (d / "runs" / "a.json").write_text('{"schema": "lockscope.run/2", "id": ')
    p = lockscope("report", str(d), timeout=60)
    assert_one_error(p, 2, f"no readable run record in {d}: {d}/runs/a.json: cut short")
    assert not (d / "report").exists()


# ---- two sweeps into one --out; a full disk ----

def quick_sweep(out, *extra, seconds="1", wait=False):
    """The cheapest real sweep: a command, no probes, no file system."""
    args = [sys.executable, "-m", "lockscope", "sweep", "--repeat", "1", "--no-probe", "--workers", "1", *extra,
            "--duration", seconds, "--warmup", "0", "--out", str(out), "--", "/bin/sleep", "30"]
    if wait:
        return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_root
def test_a_second_sweep_into_the_same_out_refuses_naming_the_owner(tmp_path):
    import time
    out = tmp_path / "out"
    first = quick_sweep(out, seconds="4")
    try:
        lock = out / ".lockscope-sweep.lock"
        deadline = time.monotonic() + 30
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = quick_sweep(out, wait=True)
        assert_one_error(second, 2, f"{out} is in use by another sweep (pid {first.pid}",
                         "fix: wait for it to finish, or give this sweep another --out")
    finally:
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert not lock.exists(), "the lock is removed on the way out"
    assert json.loads((out / "runs" / "sleep-none-w1.json").read_text())["workers"] == 1


@needs_root
def test_a_stale_or_killed_sweeps_lock_is_reclaimed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / ".lockscope-sweep.lock"
    lock.write_text("999999999\n")                     # left by a dead pid
    p = quick_sweep(out, wait=True)
    assert p.returncode == 0, p.stderr
    assert not lock.exists()
    # a sweep killed with SIGKILL holds nothing: the kernel drops its flock
    holder = subprocess.run([sys.executable, "-c", f"""
import os
from pathlib import Path
from lockscope.measure.sweep import sweep_lock
with sweep_lock(Path({str(out)!r})):
    os.kill(os.getpid(), 9)
"""], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert holder.returncode == -9 and lock.exists()
    p = quick_sweep(out, wait=True)
    assert p.returncode == 0, p.stderr
    assert "1 of 1 points already measured" in p.stderr and not lock.exists()


@needs_root
def test_a_full_disk_keeps_finished_points_and_the_sweep_resumes(tmp_path):
    out = tmpfs(tmp_path / "out", size="256k")
    try:
        p = quick_sweep(out, wait=True)                 # the point with 1 worker is finished
        assert p.returncode == 0, p.stderr
        filler = out / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the disk to the last block
        try:
            while True:
                os.write(fd, b"x" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        p = subprocess.run([sys.executable, "-m", "lockscope", "sweep", "--repeat", "1", "--no-probe", "--workers", "1,2",
                            "--duration", "1", "--warmup", "0", "--out", str(out), "--", "/bin/sleep", "30"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
        assert_one_error(p, 3, "lockscope: error: no space left on the device",
                         "fix: free space and rerun the same command")
        assert json.loads((out / "runs" / "sleep-none-w1.json").read_text())["workers"] == 1
        assert not list(out.glob("**/.*.tmp")), "no partial file is left"
        filler.unlink()
        p = quick_sweep(out, "--workers", "1,2", wait=True)
        assert p.returncode == 0, p.stderr
        assert "1 points measured, 1 already there" in p.stdout
        assert {f.name for f in (out / "runs").glob("*.json")} == {"sleep-none-w1.json", "sleep-none-w2.json"}
    finally:
        umount(out)
