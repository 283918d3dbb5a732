"""The built-in PostgreSQL experiment `pgbench` (apps.toml: [app.server],
target = "server"): a fresh cluster on the point's tmpfs, the server as the
unprivileged user postgres on a private unix socket, pgbench -c N -j N as
the load. The record has pgbench's tps; the worker roles are the server's
backends (comm `postgres`), pgbench is the driver, not a worker; afterwards
no server lockscope started is left running and nothing is mounted, after
a normal end and after SIGTERM in the window."""
from __future__ import annotations

import pwd
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, lockscope, servers_under
from lockscope.model import record
from lockscope.analyzer.user import usdt
from lockscope.measure import apps


@pytest.fixture
def postgres(e2e):
    app = apps.get("pgbench")
    why = app.missing()
    if why:
        pytest.skip(f"the pgbench experiment needs PostgreSQL 15 (Debian package postgresql): {why}")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("the pgbench experiment needs the user postgres (made by the Debian package postgresql)")


def test_pgbench_point(postgres, server_scratch, tmp_path):
    out = tmp_path / "out"
    r = lockscope("run", "pgbench", "--fs", "tmpfs", "--workers", "2", "--duration", "3",
                  "--scratch", str(server_scratch), "--out", str(out))
    assert r.returncode == 0, r.stderr
    rec = record.load(out / "runs" / "pgbench-tmpfs-w2.json")
    assert rec.ops_per_sec and rec.ops_per_sec > 0 and rec.throughput_unit == "tps (pgbench)"
    assert rec.application.name == "pgbench" and rec.params == {"scale": 1}
    # the work: the server's backends (comm postgres); pgbench drives the load
    assert rec.worker_roles == {"postgres"}, [(x.name, x.worker, x.reason) for x in rec.roles]
    drivers = {x.name for x in rec.roles if x.driver}
    assert drivers == {"pgbench (driver)"}, drivers
    assert rec.target.how == "server" and [p.comm for p in rec.target.processes] == ["postgres"]
    # the backends' waits for each other are seen: named by PostgreSQL's own
    # USDT probes (LWLock tranches, heavyweight locks by tag) where they load,
    # else as the semaphore sleeps they are (PGSemaphoreLock)
    usdt_ok = bool(rec.probe.raw.usdt_probe and rec.probe.raw.usdt_probe.loaded and rec.probe.raw.usdt_probe.attached)
    assert any(lk.component == "PostgreSQL" and lk.tier == "verified" if usdt_ok else "PGSemaphoreLock" in lk.name
               for lk in rec.locks), ([lk.name for lk in rec.locks[:8]], rec.probe.raw.usdt_probe)
    if usdt_ok:
        # who held them: a backend woken out of a wait the probes name was woken by the releasing
        # backend (SetLatch for a heavyweight lock, PGSemaphoreUnlock for an LWLock), charged to the
        # code past the lock manager (usdt.toml release_frames): the transaction's commit, an update
        held = [lk for lk in rec.locks if lk.component == "PostgreSQL" and lk.holders]
        assert held, [(lk.name, lk.holder_note) for lk in rec.locks[:8]]
        release = usdt.default().release_frames(0)
        for lk in held:
            assert all(h.who == "postgres" and h.site not in release for h in lk.holders), (lk.name, lk.holders)
        top = held[0]
        assert any(h.site in ("CommitTransactionCommand", "heap_update", "heap_lock_tuple") for h in top.holders), \
            (top.name, [h.site for h in top.holders])
    assert servers_under(server_scratch) == []        # the server_scratch fixture checks that nothing is mounted


def test_sigterm_stops_the_server(postgres, server_scratch, tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "lockscope", "run", "pgbench", "--fs", "tmpfs", "--workers", "2",
                          "--duration", "20", "--scratch", str(server_scratch), "--out", str(tmp_path / "out")],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any("pgbench -h" in s and " -c 2 " in s for s in servers_under(server_scratch)):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.2)
    assert any("postgres -D" in s for s in servers_under(server_scratch))
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "interrupted (SIGTERM)" in err, err
    assert servers_under(server_scratch) == []


def test_unreachable_scratch_is_explained(postgres, tmp_path):
    r = lockscope("run", "pgbench", "--fs", "tmpfs", "--workers", "1", "--duration", "1",
                  "--scratch", str(tmp_path / "scratch"), "--out", str(tmp_path / "out"))
    assert r.returncode == 3 and "may not enter" in r.stderr and "--scratch" in r.stderr, r.stderr
