"""Application workloads (lockscope/measure/apps.toml): the table and its checks,
throughput parsed from the programs' real output, what a missing package
says, and one end-to-end sweep per application (1 and 2 workers on tmpfs)."""
import copy
import json
import re

import pytest

from conftest import DATA, REPO, e2e_missing, lockscope
from lockscope.analyzer import attribution
from lockscope.model import record
from lockscope.measure import apps
from lockscope.measure.apps import TableError
from lockscope.errors import EXIT_ENVIRONMENT, EnvironmentProblem, UsageError

OUTPUT = DATA / "apps"

GOOD = {
    "name": "toy", "package": "toy-tools", "binary": "toybench", "operation": "o", "sharing": "s",
    "component": "c", "model": "thread", "throughput_regex": r"rate: (\d+) ops/s", "unit": "ops/s (toybench)",
    "command": ["toybench", "--dir={dir}", "--threads={n}", "--seconds={duration}", "--size={size}"],
    "prepare": ["toybench", "--fill={dir}", "--size={size}"],
    "params": [{"name": "size", "default": 10, "min": 1, "max": 100, "help": "h"}],
}


def entry(**change):
    e = copy.deepcopy(GOOD)
    for k, v in change.items():
        if v is None:
            e.pop(k)
        else:
            e[k] = v
    return e


# ---- the table ------------------------------------------------------------

def test_the_table_has_the_application_workloads():
    table = apps.table()
    assert list(table) == ["rocksdb-fillrandom", "rocksdb-readrandom", "dbench", "pgbench", "sysbench-mariadb",
                           "exim"]
    assert {a.package for a in table.values()} == {"rocksdb-tools", "dbench", "postgresql",
                                                   "mariadb-server sysbench", "exim4-daemon-light"}
    pg = table["pgbench"]
    assert pg.target == "server" and pg.server["user"] == "postgres" and "{port}" in " ".join(pg.server["start"])
    assert table["rocksdb-readrandom"].prepare and not table["rocksdb-fillrandom"].prepare
    assert all(a.needs_dir for a in table.values())


def test_every_package_is_one_make_installs():
    """Every application's packages, servers too: `make deps` installs them
    with service starts refused (a policy-rc.d that exits 101, made only
    where none is, and removed after), so that no test skips on a fresh
    machine and the machine's own services stay stopped."""
    makefile = (REPO / "Makefile").read_text()
    listed = re.search(r"APT_PACKAGES :=(.*?)\n(?!\s)", makefile, re.S)[1].replace("\\\n", " ").split()
    for app in apps.table().values():
        missing = set(app.package.split()) - set(listed)
        assert not missing, f"{missing} ({app.name}) not in the Makefile's APT_PACKAGES"
    assert "policy=/usr/sbin/policy-rc.d" in makefile and "exit 101" in makefile
    assert 'if [ ! -e $$policy ]' in makefile and 'if [ -n "$$made" ]; then rm -f $$policy' in makefile


def test_application_names_differ_from_the_built_in_ones():
    if e2e_missing() and "C parts" in e2e_missing():
        pytest.skip(e2e_missing())
    from lockscope.measure import workloads
    assert not set(apps.table()) & set(workloads.catalog())


def test_a_good_entry_parses():
    app = apps.parse({"app": [entry()]})["toy"]
    assert app.command[0] == "toybench" and app.prepare == ("toybench", "--fill={dir}", "--size={size}")
    assert app.install_command == "apt-get install toy-tools"


@pytest.mark.parametrize("change,message", [
    ({"package": None}, "missing package"),
    ({"colour": "red"}, "unknown keys colour"),
    ({"unit": ""}, "unit must be a non-empty string"),
    ({"name": "a b"}, "name: letters, digits"),
    ({"model": "fiber"}, "model is process or thread"),
    ({"command": []}, "command must be a list of non-empty strings"),
    ({"command": "toybench {n}"}, "command must be a list of non-empty strings"),
    ({"command": ["othertool", "{n}", "{duration}"]}, "command must run its binary 'toybench' (or {python}, a load generator of lockscope's), not 'othertool'"),
    ({"prepare": ["sh", "-c", "x"]}, "prepare must run its binary"),
    ({"command": ["toybench", "{n}", "{duration}", "{sise}"]}, "command uses unknown placeholders {sise}"),
    ({"command": ["toybench", "{duration}"]}, "command must pass {n}, the worker count"),
    ({"command": ["toybench", "{n}"]}, "command must pass {duration}"),
    ({"throughput_regex": "rate: [0-9]+"}, "needs exactly one group (the throughput), it has 0"),
    ({"throughput_regex": "(a)(b)"}, "it has 2"),
    ({"throughput_regex": "rate: ([0-9]+"}, "throughput_regex does not compile"),
    ({"params": [{"name": "size", "default": 0, "min": 1, "max": 100, "help": "h"}]}, "min <= default <= max"),
    ({"params": [{"name": "n", "default": 1, "min": 1, "max": 2, "help": "h"}]}, "parameter name 'n'"),
    ({"params": [{"name": "size", "default": 1, "min": 1, "max": 2}]}, "exactly name, default, min, max, help"),
    ({"files": ["share/x"]}, "files are absolute paths"),
    ({"params": [{"name": "size", "default": "big", "choices": ["small"], "help": "h"}]}, "the default one of them"),
    ({"params": [{"name": "size", "default": "A b", "choices": ["A b"], "help": "h"}]}, "choices are words"),
    ({"params": [{"name": "size", "default": "a", "choices": ["a"], "min": 1, "help": "h"}]}, "(or name, default, "
                                                                                              "choices, help)"),
    ({"command": ["{python}", "-m", "x", "{n}", "{duration}"], "prepare": ["toybench", "{python}"]},
     "prepare: {python} is only a command's first word"),
    ({"server": {"user": "u", "init": [], "start": ["s", "{dir}"], "ready": ["r"], "write": [["/etc/x.conf",
                                                                                           "exim.conf"]]}},
     "server.write '/etc/x.conf': a path on the point's file system"),
    ({"server": {"user": "u", "init": [], "start": ["s", "{dir}"], "ready": ["r"], "write": [["{dir}/x", "nope"]]}},
     "the second is a file of"),
    ({"server": {"user": "u", "init": [], "start": ["s", "{dir}"]}}, "[app.server] has user, init, start, ready"),
    ({"max_workers": 0}, "max_workers is a positive integer"),
])
def test_a_bad_entry_is_refused_with_what_is_wrong(change, message):
    with pytest.raises(TableError) as e:
        apps.parse({"app": [entry(**change)]})
    assert message in e.value.message and e.value.message.startswith("apps.toml: [[app]] #1")


def test_a_name_used_twice_is_refused():
    with pytest.raises(TableError, match="#2 \\(toy\\): the name is used twice"):
        apps.parse({"app": [entry(), entry()]})


def test_point_fields_fill_the_window_and_parameters_and_leave_n_and_dir():
    app = apps.parse({"app": [entry()]})["toy"]
    f = app.point_fields(3.0, {})
    assert f["command"] == ["toybench", "--dir={dir}", "--threads={n}", "--seconds=3", "--size=10"]
    assert f["prepare"] == ["toybench", "--fill={dir}", "--size=10"]
    assert f["params"] == {"size": 10} and f["self_timed"] and f["throughput_unit"] == "ops/s (toybench)"
    assert f["application"]["name"] == "toy" and f["application"]["package"] == "toy-tools"
    assert app.point_fields(2, {"size": 50})["command"][-1] == "--size=50"
    with pytest.raises(UsageError, match="takes whole seconds"):
        app.point_fields(2.5, {})


def test_a_parameter_of_words_and_a_load_generator_of_lockscopes():
    import sys
    app = apps.parse({"app": [entry(command=["{python}", "-m", "lockscope.measure.x", "{n}", "{duration}",
                                             "--mode={mode}"],
                                    prepare=None, params=[{"name": "mode", "default": "fast",
                                                           "choices": ["fast", "slow"], "help": "h"}])]})["toy"]
    f = app.point_fields(2, {})
    assert f["command"] == [sys.executable, "-m", "lockscope.measure.x", "{n}", "2", "--mode=fast"]
    assert app.point_fields(2, {"mode": "slow"})["params"] == {"mode": "slow"}


def test_exim_writes_its_configuration_with_the_point_and_the_parameters_filled_in():
    exim = apps.get("exim")
    assert exim.target == "server" and exim.server["user"] == "Debian-exim" and "stop" not in exim.server
    f = exim.point_fields(3, {})
    assert f["params"] == {"config": "paper", "per_connection": 10}
    assert f["command"][1:] == ["-m", "lockscope.measure.smtpload", "--port", "{port}", "--clients", "{n}",
                                "--duration", "3", "--mail", "{dir}/mail", "--per-connection", "10"]
    [(path, text)] = f["server"]["write"]
    assert path == "{dir}/exim.conf" and f["server"]["stop"] is None
    # the parameter is filled in now; the point's file system and port when the server starts;
    # Exim's own expansions (${...}, $local_part_data) are left alone
    assert "CONFIG_paper = yes" in text and "{config}" not in text
    assert "spool_directory = {dir}/spool" in text and "daemon_smtp_ports = {port}" in text
    assert "directory = {dir}/mail/$local_part_data" in text
    stock = exim.point_fields(3, {"config": "stock"})["server"]["write"][0][1]
    assert "CONFIG_stock = yes" in stock and ".ifdef CONFIG_paper\nsplit_spool_directory = true" in stock
    assert apps.fill_text("a {x} ${b} {y}", {"x": 1}) == "a 1 ${b} {y}"


def test_an_unknown_word_for_a_parameter_is_refused():
    from lockscope.measure import workloads
    assert workloads.check_params("exim", {"config": "stock"}) == {"config": "stock"}
    with pytest.raises(UsageError, match="--param config=fast: must be one of paper, stock"):
        workloads.check_params("exim", {"config": "fast"})


# ---- throughput from the programs' own output -----------------------------

@pytest.mark.parametrize("name,file,expected", [
    ("rocksdb-fillrandom", "db_bench-fillrandom.txt", 279919.0),
    ("rocksdb-readrandom", "db_bench-readrandom.txt", 678397.0),
    ("dbench", "dbench.txt", 837.737),
])
def test_throughput_is_read_from_real_output(name, file, expected):
    text = (OUTPUT / file).read_text()
    app = apps.get(name)
    assert app.throughput(text) == expected
    others = {n: a.throughput(text) for n, a in apps.table().items() if a.throughput_regex != app.throughput_regex}
    assert all(v is None for v in others.values()), others      # no regex reads another program's number


def test_throughput_lines_one_by_one():
    fill, read, db = (apps.get(n) for n in ("rocksdb-fillrandom", "rocksdb-readrandom", "dbench"))
    assert fill.throughput("fillrandom   :       8.887 micros/op 225016 ops/sec 3.004 seconds 675998 operations;"
                           "   24.9 MB/s") == 225016
    assert read.throughput("readrandom   :       5.937 micros/op 168432.5 ops/sec 3.004 seconds 505999 operations;"
                           "   18.6 MB/s (505999 of 505999 found)") == 168432.5
    assert read.throughput("fillseq      :       2.447 micros/op 408621 ops/sec 2.447 seconds") is None
    assert db.throughput("   2     87212   974.13 MB/sec  execute   1 sec  latency 4.327 ms") is None
    assert db.throughput("Throughput 925.729 MB/sec  2 clients  2 procs  max_latency=5.174 ms") == 925.729


# ---- a missing package ----------------------------------------------------

MISSING = apps.App(name="toy-missing", package="toy-tools", binary="lockscope-no-such-program", operation="o",
                   sharing="s", component="c", model="process", command=("lockscope-no-such-program", "{n}",
                                                                          "{duration}", "{dir}"),
                   throughput_regex=r"(\d+)", unit="ops/s")


def test_a_missing_program_names_its_package_and_the_install_command():
    with pytest.raises(EnvironmentProblem) as e:
        MISSING.require_installed()
    assert e.value.exit_code == EXIT_ENVIRONMENT == 3
    assert "\n" not in e.value.message
    assert "toy-missing needs lockscope-no-such-program from the Debian package toy-tools" in e.value.message
    assert "apt-get install toy-tools" in e.value.message
    entry = MISSING.catalog_entry()
    assert entry["installed"] is False and entry["install"] == "apt-get install toy-tools"


@pytest.mark.parametrize("verb", ["run", "sweep"])
def test_run_and_sweep_of_a_missing_application_exit_3_before_anything(verb, monkeypatch, tmp_path, capsys):
    from lockscope import cli
    monkeypatch.setattr(apps, "table", lambda: {**apps.parse({"app": [entry()]}), MISSING.name: MISSING})
    if e2e_missing() and "C parts" in e2e_missing():
        pytest.skip(e2e_missing())
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    code = cli.main([verb, MISSING.name, "--fs", "tmpfs", "--workers", "1", "--out", str(out),
                     "--scratch", str(scratch)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert err.startswith("lockscope: error: workload toy-missing needs lockscope-no-such-program from the Debian "
                          "package toy-tools: lockscope-no-such-program is not installed (install it with "
                          "`apt-get install toy-tools`)\n")
    assert not out.exists() and not scratch.exists()


def test_list_shows_applications_with_package_and_state():
    p = lockscope("list", "--json")
    if p.returncode != 0:
        pytest.skip(f"lockscope list failed (driver not built?): {p.stderr.strip()}")
    by_name = {w["name"]: w for w in json.loads(p.stdout)["workloads"]}
    for app in apps.table().values():
        w = by_name[app.name]
        assert w["kind"] == "application" and w["package"] == app.package
        assert w["installed"] is (app.missing() is None)
    text = lockscope("list").stdout
    assert "applications (programs from Debian packages" in text
    assert re.search(r"rocksdb-readrandom .*\n.*\n\s+package rocksdb-tools: (installed|NOT INSTALLED)", text)


# ---- end to end: each application at 1 and 2 workers ----------------------

def _sweep(name: str, tmp_path, scratch, *extra: str) -> dict[int, record.RunRecord]:
    why = e2e_missing()
    if why:
        pytest.skip(why)
    app = apps.get(name)
    missing = app.missing()
    if missing:
        pytest.skip(f"{name} needs {app.binary} from the Debian package {app.package}: {missing} "
                    f"(`make test` installs it)")
    out = tmp_path / "out"
    p = lockscope("sweep", "--repeat", "1", name, "--fs", "tmpfs", "--workers", "1,2", "--duration", "2", "--out", str(out),
                  "--scratch", str(scratch), *extra, timeout=300)
    assert p.returncode == 0, p.stderr
    recs = {r.workers: r for r in (record.load(f) for f in sorted((out / "runs").glob("*.json")))}
    assert sorted(recs) == [1, 2]
    for n, r in recs.items():
        assert r.workload == name and r.kind == "command" and r.fs == "tmpfs"
        assert r.application.name == name and r.application.package == app.package
        assert r.application.version                       # dpkg knows it
        assert r.command[0] == app.binary and r.fs_detail.mountpoint and \
            any(r.fs_detail.mountpoint in a for a in r.command)
        assert r.ops_per_sec and r.ops_per_sec > 0, (n, r.warnings)
        assert r.throughput_unit == app.unit
        assert r.probe.attached, r.probe.reason
        assert r.duration_s < 2 + 30
    return recs


@pytest.mark.e2e
def test_rocksdb_fillrandom_end_to_end(tmp_path, scratch):
    recs = _sweep("rocksdb-fillrandom", tmp_path, scratch, "--param", "keys=100000")
    for n, r in recs.items():
        assert f"--threads={n}" in r.command and "--benchmarks=fillrandom" in r.command
        assert "--num=100000" in r.command and r.params == {"keys": 100000, "value_size": 100}
        assert r.application.prepare is None
        # the diagnosis of a program lockscope did not write: db_bench's threads
        # do the work; the flush/compaction pool waiting for work is idle, no lock
        assert "db_bench" in r.worker_roles and not {"rocksdb:low", "rocksdb:high"} & r.worker_roles
        assert not [lk for lk in r.locks if "_ZN" in lk.name or "BGThread" in lk.name and lk.kind == "pthread_cond"]
        assert not [w for w in attribution.waits(r) if "BGThread" in w]


@pytest.mark.e2e
def test_rocksdb_readrandom_end_to_end(tmp_path, scratch):
    recs = _sweep("rocksdb-readrandom", tmp_path, scratch, "--param", "keys=100000")
    for n, r in recs.items():
        assert f"--threads={n}" in r.command and "--use_existing_db=1" in r.command
        # the database was filled before the window, outside the probes
        assert "--benchmarks=fillseq,compact" in r.application.prepare and r.application.prepare_s > 0


@pytest.mark.e2e
def test_dbench_end_to_end(tmp_path, scratch):
    recs = _sweep("dbench", tmp_path, scratch)
    for n, r in recs.items():
        assert r.command[-1] == str(n) and r.command[r.command.index("-t") + 1] == "2"
        assert "MB/s" in r.throughput_unit
        assert r.ops_per_sec < 100_000          # MB/s, not operations
        # the parent waiting for its clients is idle, not lost capacity
        assert r.worker_roles == {"dbench"}
        assert not [w for w in attribution.waits(r).values() if w.lock_class == "child/signal wait"]
