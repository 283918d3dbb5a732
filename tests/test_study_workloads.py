"""The study workloads (syncs, fsmark, varmail, mdtest) on a real tmpfs and
ext4, the per-operation latency histograms, the time series and --param."""
import json
import os
import subprocess

import pytest

from conftest import e2e_missing, left_under, lockscope

# the workload driver on real file systems, its work sized by the rate it measures (a worker may
# run out of pre-created files when that rate was taken while another test shared the CPUs): run
# with the end-to-end tests, one at a time, not beside the tests that measure nothing
pytestmark = pytest.mark.e2e

WORKERS = 2
# small parameters keep each run to about half a second
SMALL = {"fsmark": ["files=16", "size_kib=64"], "varmail": ["files=20"], "mdtest_shared": ["files=200"],
         "mdtest_private": ["files=200"], "syncs": []}


def driver():
    from lockscope import paths
    return str(paths.workload_binary())


def run(workload, directory, *extra, workers=WORKERS, duration="0.5"):
    argv = [driver(), "run", "--workload", workload, "--workers", str(workers), "--duration", duration,
            "--warmup", "0.1", "--dir", str(directory), *extra]
    for kv in SMALL.get(workload, []):
        argv += ["--param", kv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    events = [json.loads(line) for line in p.stdout.splitlines()]
    result = events[-1]
    assert result["event"] == "result" and result["ops"] > 0
    assert all(w["ops"] > 0 for w in result["per_worker"])
    return events, result


@pytest.fixture(scope="module", params=["tmpfs", "ext4"])
def fs(request, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("workload tests mount file systems: they need root")
    why = e2e_missing()
    if why and "C parts" in why:
        pytest.skip(why)
    from lockscope.machine import scratch
    root = tmp_path_factory.mktemp("scratch")
    with scratch.mounted(request.param, root, image_size_gib=2) as m:
        yield m.mountpoint
    left = left_under(root)
    assert not left["mounts"] and not left["loop_devices"], f"left behind: {left}"


@pytest.fixture
def d(fs, request):
    path = fs / "".join(c if c.isalnum() else "_" for c in request.node.name)
    path.mkdir()
    return path


def check_latency(result):
    """Histogram sanity: every counted op is timed, percentiles ordered."""
    lat = result["latency"]
    assert set(lat) == set(result["op_counts"])
    for op, h in lat.items():
        assert h["count"] == result["op_counts"][op] > 0, op
        assert 0 < h["timed"] == sum(h["buckets"]) <= h["count"], op
        if len(lat) > 1:                # multi-operation workloads time every op
            assert h["timed"] == h["count"], op
        assert 0 < h["p50_ns"] <= h["p99_ns"] <= h["max_ns"], (op, h)
        assert h["mean_ns"] <= h["max_ns"]
        assert 2 ** (len(h["buckets"]) - 1) <= h["max_ns"] < 2 ** len(h["buckets"])   # top bucket holds the max


def test_syncs_appends_and_fsyncs_private_files(d):
    _, r = run("syncs", d, workers=4)
    assert r["params"] == {"bytes": 1024}
    c = r["op_counts"]
    assert c["fsync"] == r["ops"] and abs(c["append"] - c["fsync"]) <= 4   # one op = append + fsync (window edges)
    for w in r["per_worker"]:
        size = os.path.getsize(d / "share" / f"s{w['worker']}")
        assert size % 1024 == 0 and size >= 1024 * w["ops"]                    # warm-up appends too
    check_latency(r)


def test_fsmark_runs_the_file_life_cycle_on_private_files(d):
    _, r = run("fsmark", d)
    assert r["params"] == {"files": 16, "size_kib": 64}
    c = r["op_counts"]
    assert set(c) == {"create", "write", "close", "stat", "open", "read", "unlink"} and min(c.values()) > 0
    assert sum(c.values()) == r["ops"]
    for i in range(WORKERS):
        for name in os.listdir(d / f"w{i}"):
            assert name.startswith("f") and int(name[1:]) < 16
            assert os.path.getsize(d / f"w{i}" / name) in (0, 64 * 1024)
    check_latency(r)


def test_varmail_works_small_files_in_one_shared_dir(d):
    _, r = run("varmail", d)
    c = r["op_counts"]
    assert min(c.values()) > 0 and sum(c.values()) == r["ops"]
    assert abs(c["fsync"] - 2 * c["create"]) <= 4 * WORKERS        # two fsyncs per create, window edges aside
    names = os.listdir(d / "share")
    for i in range(WORKERS):
        mine = [n for n in names if n.startswith(f"m{i}-")]
        assert 19 <= len(mine) <= 20                   # one may be between delete and create
        assert all(os.path.getsize(d / "share" / n) <= 2 * 16384 for n in mine)
    check_latency(r)


@pytest.mark.parametrize("workload,where", [("mdtest_shared", "share/f{i}-"), ("mdtest_private", "w{i}/f")])
def test_mdtest_creates_stats_and_removes(d, workload, where):
    _, r = run(workload, d)
    c = r["op_counts"]
    assert set(c) == {"create", "stat", "remove"} and min(c.values()) > 0 and sum(c.values()) == r["ops"]
    for i in range(WORKERS):
        prefix = where.format(i=i)
        parent, stem = os.path.split(d / prefix)
        left = [n for n in os.listdir(parent) if n.startswith(stem)]
        assert all(int(n[len(stem):]) < 200 for n in left)
    check_latency(r)


def test_single_operation_workload_samples_cheap_ops(d):
    """DWOL's op takes well under a microsecond on tmpfs: one in k is timed,
    k adapted so that the clock reads cost about 1% (an op of ~250 ns: k ~ 20)."""
    _, r = run("DWOL", d)
    assert r["op_counts"] == {"op": r["ops"]} and r["latency_clock"] in ("TSC", "CLOCK_MONOTONIC")
    check_latency(r)
    h = r["latency"]["op"]
    assert 3 <= h["count"] / h["timed"] <= 64 + 1


def test_single_operation_workload_times_every_slow_op(d):
    """MRDL: one op enumerates 1,000 directory entries, tens of microseconds: every op is timed."""
    _, r = run("MRDL", d)
    h = r["latency"]["op"]
    assert h["timed"] == h["count"] == r["ops"]


def test_no_latency_still_counts_each_operation(d):
    _, r = run("mdtest_private", d, "--no-latency")
    assert r["latency"] is None and r["latency_clock"] is None
    assert min(r["op_counts"].values()) > 0 and sum(r["op_counts"].values()) == r["ops"]


def test_time_series_covers_the_window(d):
    events, r = run("varmail", d, "--interval", "0.1", duration="0.6")
    kinds = [e["event"] for e in events]
    start, end = kinds.index("measure_start"), kinds.index("measure_end")
    prog = events[start + 1:end]
    assert len(prog) >= 5 and all(e["event"] == "progress" for e in prog)
    assert sum(e["interval_ops"] for e in prog) == r["ops"]          # the intervals tile the window
    assert sum(e["interval_s"] for e in prog) == pytest.approx(r["duration_s"], rel=1e-6)
    for e in prog:
        assert e["ops_per_sec"] == pytest.approx(e["interval_ops"] / e["interval_s"], rel=1e-3)
        f = e["latency"]["fsync"]
        assert f["count"] == e["op_counts"]["fsync"] and f["p50_ns"] <= f["p99_ns"] <= f["max_ns"]
    assert max(e["latency"]["fsync"]["max_ns"] for e in prog) == r["latency"]["fsync"]["max_ns"]


@pytest.mark.parametrize("workload,param,message", [
    ("fsmark", "files=abc", "--param files must be an integer between 1 and 1000000 (got 'abc')"),
    ("fsmark", "size_kib=-1", "--param size_kib must be an integer between 0 and"),
    ("fsmark", "nope=1", "unknown parameter 'nope' for workload fsmark (valid: files, size_kib)"),
    ("DWOL", "files=1", "workload DWOL takes no parameters"),
    ("varmail", "files", "expected KEY=VALUE"),
])
def test_driver_rejects_bad_params(tmp_path, workload, param, message):
    p = subprocess.run([driver(), "run", "--workload", workload, "--workers", "1", "--duration", "1",
                        "--dir", str(tmp_path), "--param", param], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and p.stderr.startswith("lockscope-workload: error: ") and message in p.stderr
    assert os.listdir(tmp_path) == []                # nothing created


def test_driver_worker_limit_is_per_workload(tmp_path):
    p = subprocess.run([driver(), "run", "--workload", "MWRM", "--workers", "5000", "--duration", "1",
                        "--dir", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "between 1 and 4096" in p.stderr
    p = subprocess.run([driver(), "run", "--workload", "syncs", "--workers", "20000", "--duration", "1",
                        "--dir", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "between 1 and 16384 for this workload" in p.stderr


def test_list_documents_parameters_and_operations():
    out = json.loads(subprocess.run([driver(), "--list"], capture_output=True, text=True).stdout)
    cat = {w["name"]: w for w in out["workloads"]}
    assert cat["fsmark"]["params"] == [
        {"name": "files", "default": 128, "min": 1, "max": 1000000, "help": "files per worker (per round)"},
        {"name": "size_kib", "default": 512, "min": 0, "max": 1048576, "help": "size of each file in KiB"}]
    assert cat["syncs"]["many_tasks"] and cat["syncs"]["max_workers"] >= 10000
    assert cat["varmail"]["op_names"] == ["delete", "create", "append", "fsync", "close", "open", "read"]
    assert cat["DWOL"]["op_names"] == ["op"] and cat["DWOL"]["params"] == []


def test_cli_param_errors_exit_2():
    p = lockscope("run", "fsmark", "--param", "files=0", "--no-probe", "--scratch", "/tmp/ls-unused")
    assert p.returncode == 2 and "--param files=0: must be an integer between 1 and 1000000" in p.stderr
    p = lockscope("run", "MWRM", "--param", "files=3", "--no-probe")
    assert p.returncode == 2 and "workload MWRM has no parameter 'files' (it takes none)" in p.stderr


def test_worker_limit_rule_lets_syncs_scale_without_force():
    from lockscope import validate
    from lockscope.measure import workloads
    from lockscope.errors import UsageError
    syncs, mwrm = workloads.check_workload("syncs"), workloads.check_workload("MWRM")
    validate.check_workers([10000], force=False, infos=[syncs])          # no error: tasks sleep in fsync
    with pytest.raises(UsageError, match="--force"):
        validate.check_workers([1000], force=False, infos=[mwrm])
    with pytest.raises(UsageError, match="at most 16384 workers"):
        validate.check_workers([20000], force=True, infos=[syncs])


def test_run_records_latency_time_series_and_params(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("lockscope run mounts a tmpfs: it needs root")
    out = tmp_path / "out"
    p = lockscope("run", "varmail", "--fs", "tmpfs", "--workers", "2", "--duration", "1", "--warmup", "0.1",
                  "--interval", "0.25", "--param", "files=20", "--no-probe", "--scratch", str(tmp_path / "sc"),
                  "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "latency per operation (ops, p50 / p99 / max):" in p.stdout and "  fsync " in p.stdout
    from lockscope.model import record
    rec = record.load(out / "runs" / "varmail-tmpfs-w2.json")
    assert rec.params == {"files": 20, "iosize_kib": 16}
    assert sum(rec.op_counts.values()) == rec.ops == sum(w.ops for w in rec.per_worker)
    fs = rec.latency["fsync"]
    assert isinstance(fs, record.Latency) and fs.count == rec.op_counts["fsync"] and fs.p50_ns <= fs.p99_ns <= fs.max_ns
    assert rec.interval_s == 0.25 and len(rec.timeseries) == 4
    assert sum(i.ops for i in rec.timeseries) == rec.ops
    assert all(isinstance(i.latency["fsync"], record.Latency) for i in rec.timeseries)
    assert rec.oversubscribed is False
    assert record.to_dict(record.load(out / "runs" / "varmail-tmpfs-w2.json")) == \
        json.loads((out / "runs" / "varmail-tmpfs-w2.json").read_text())
