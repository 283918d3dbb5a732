"""Server wait APIs by exported function (analyzer/user/usdt.toml, attach =
"function"; probes/usdt.bpf.c's entry uprobes): MariaDB's thd_wait_begin /
thd_wait_end, which Debian's stripped mariadbd exports. Checked against the
server's own count of InnoDB row-lock waits (Innodb_row_lock_time and
_waits, SHOW GLOBAL STATUS) while client sessions update one hot row, each
holding its row lock a few milliseconds (so the server's milliseconds per
wait lose little to rounding)."""
from __future__ import annotations

import subprocess
import time

import pytest

import mariadbserver
from conftest import e2e_missing, leaked_progs, lockscope
from lockscope.model import record
from lockscope.analyzer.user import usdt
from lockscope.measure import apps

CLIENTS = 4
WINDOW_S = 4
HOLD_S = 0.005
ROW_LOCK = "MariaDB row lock (InnoDB)"


def test_mariadb_is_a_table_entry_of_exported_functions(tmp_path):
    """The table is data: MariaDB's wait API is one entry, probed at the
    functions' entries; only the lock types count (not a network read)."""
    [spec] = usdt.default().probes_for("/usr/sbin/mariadbd")
    assert (spec.attach, spec.probe_provider, spec.probe) == ("function", "-", "thd_wait_begin()")
    assert (spec.cookie >> 8) & 0xf == 2 and not spec.cookie & (1 << 12)
    mask = spec.cookie >> 32
    assert mask & (1 << 3) and mask & (1 << 6) and not mask & (1 << 11) and not mask & (1 << 1)
    assert spec.lock_name(3, "") == ROW_LOCK and spec.lock_name(5, "") == "MariaDB metadata lock"
    bad = tmp_path / "usdt.toml"
    bad.write_text('[[program]]\nname = "x"\nbinaries = ["*/x"]\nattach = "function"\n'
                   '[[program.probe]]\nstart = "a"\ndone = "b"\nkind = "k"\nname_arg = 6\n')
    with pytest.raises(ValueError, match="name_arg must be 1..5"):
        usdt.Table.load(bad)


@pytest.fixture(scope="module")
def experiment(e2e, tmp_path_factory):
    why = e2e_missing() or mariadbserver.missing()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("mariadb")
    with mariadbserver.Server() as s:
        s.sql("CREATE DATABASE t; CREATE TABLE t.hot (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; "
              "INSERT INTO t.hot VALUES (1, 0)")
        txn = f"BEGIN; UPDATE hot SET v = v + 1 WHERE id = 1; DO SLEEP({HOLD_S}); COMMIT;\n"
        for _ in range(CLIENTS):
            s.client(txn * 20000, "t")
        time.sleep(1)
        t0, ms0, n0 = time.monotonic(), s.status("Innodb_row_lock_time"), s.status("Innodb_row_lock_waits")
        r = lockscope("attach", "--pid", str(s.pid), "--duration", str(WINDOW_S), "--workers", str(CLIENTS),
                      "--out", str(out), "--name", "mariadb", timeout=120)
        t1, ms1, n1 = time.monotonic(), s.status("Innodb_row_lock_time"), s.status("Innodb_row_lock_waits")
        assert all(c.poll() is None for c in s.clients), "a client session ended early"
    assert r.returncode == 0, r.stderr
    [run] = sorted((out / "runs").glob("*.json"))
    server = {"share": (ms1 - ms0) / 1e3 / (CLIENTS * (t1 - t0)), "mean_ms": (ms1 - ms0) / max(1, n1 - n0)}
    rec = record.load(run)
    print({"server": server, "lockscope": [(lk.name, round(lk.wait_share, 3), lk.count) for lk in rec.locks[:5]]})
    return rec, server


def test_row_lock_wait_is_named_and_sized_as_the_server_counts_it(experiment):
    rec, server = experiment
    top = rec.locks[0]
    assert (top.name, top.kind, top.component, top.tier) == (ROW_LOCK, "server lock wait", "MariaDB", "verified")
    assert server["share"] > 0.3, server          # the load did contend
    assert abs(top.wait_share - server["share"]) <= 0.10, (top.wait_share, server)
    assert top.wait_ns / top.count / 1e6 == pytest.approx(server["mean_ms"], rel=0.25), server


def test_waits_that_are_not_locks_and_sleeps_inside_are_not_named(experiment):
    """The holder's DO SLEEP (thd_wait type sleep) and idle network reads are
    no lock; a waiter's condition-variable sleep inside the row-lock wait is
    that wait, not a futex lock as well."""
    rec, _ = experiment
    names = [lk.name for lk in rec.locks]
    assert not [n for n in names if n in ("MariaDB sleep", "MariaDB network", "MariaDB disk I/O")], names
    futex = sum(lk.wait_share for lk in rec.locks if lk.component != "MariaDB")
    assert futex < 0.1, [(lk.name, lk.wait_share) for lk in rec.locks[:6]]


def test_nothing_left_attached(experiment):
    assert not leaked_progs("lksc_func") and not leaked_progs("lksc_usdt")


def test_the_sysbench_mariadb_workload_names_the_row_lock_and_leaves_nothing(e2e, tmp_path):
    """`lockscope run sysbench-mariadb` (apps.toml): a fresh server as user
    mysql on the point's tmpfs, sysbench's hot-row updates as the load; the
    server's connection threads are the work; the row lock is named; no
    server left running, nothing mounted."""
    why = apps.get("sysbench-mariadb").missing()
    if why:
        pytest.skip(f"the sysbench-mariadb workload needs mariadb-server and sysbench: {why}")
    before = set(_servers())
    out = tmp_path / "out"
    r = lockscope("run", "sysbench-mariadb", "--fs", "tmpfs", "--workers", "4", "--duration", "3",
                  "--out", str(out), timeout=240)
    assert r.returncode == 0, r.stderr
    [path] = (out / "runs").glob("*.json")
    rec = record.load(path)
    assert rec.ops_per_sec and rec.ops_per_sec > 0
    assert "MariaDB row lock (InnoDB)" in [lk.name for lk in rec.locks if lk.component == "MariaDB"]
    assert set(_servers()) <= before, "a mariadbd lockscope started is still running"
    assert "lockscope" not in open("/proc/mounts").read()


def _servers() -> list[int]:
    out = subprocess.run(["pgrep", "-x", "mariadbd"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]
