"""Bad input and missing requirements: a clear message naming the fix, a
non-zero exit code, and nothing created."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, lockscope


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
    err = run_bad(tmp_path, "sweep", "MWRM", "--fs", "tmpfs,zfs", "--duration", "1")
    assert "unknown file system 'zfs'" in err


@pytest.mark.parametrize("workers,message", [
    ("0", "needs at least 1 worker"),
    ("abc", "expected a count, a list (1,2,4) or a range (1-4)"),
    ("4-2", "expected a count"),
    ("100000", "more than 64 per CPU"),
])
def test_bad_worker_counts(tmp_path, workers, message):
    err = run_bad(tmp_path, "sweep", "MWRM", "--workers", workers, "--duration", "1")
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


def test_double_dash_only_goes_with_run_and_sweep(tmp_path):
    p = lockscope("analyze", str(tmp_path), "--", "true")
    assert p.returncode == 2 and "only go with run and sweep" in p.stderr


def test_bad_cpus(tmp_path):
    assert "are not available here" in run_bad(tmp_path, "run", "MWRM", "--duration", "1", "--cpus", "999")


@pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv (util-linux) is needed to drop root")
def test_not_root_is_an_environment_error_with_the_fix(tmp_path):
    os.chmod(tmp_path, 0o777)
    cmd = [sys.executable, "-m", "lockscope", "run", "MWRM", "--duration", "1",
           "--out", str(tmp_path / "out"), "--scratch", str(tmp_path / "scratch")]
    if os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"] + cmd
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "lockscope needs root" in p.stderr and "fix: run it with sudo" in p.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "scratch").exists()


def test_sweep_refuses_to_mix_parameters_into_an_existing_sweep(tmp_path, e2e):
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"schema": "lockscope.sweep/1", "params": {"duration": 5.0}}))
    p = lockscope("sweep", "MWRM", "--fs", "tmpfs", "--duration", "3", "--out", str(out),
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
        pytest.skip("the lockscope command is not installed: `make test` installs it with pip install .")
    p = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("lockscope ")
    p = subprocess.run([exe, "list", "--json"], capture_output=True, text=True, cwd="/")
    assert p.returncode == 0 and "MWRM" in p.stdout     # finds its installed C binaries


def test_missing_btf_names_the_kernel_option(monkeypatch, tmp_path):
    from lockscope import probe
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
    from lockscope.probe import ProbeSession
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
