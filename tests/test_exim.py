"""FxMark's third application, Exim (apps.toml `exim`, issue 30): a private
Exim per point on the point's file system as the unprivileged user
Debian-exim, driven by lockscope's SMTP load generator (smtpload.py), its
throughput the messages that reached the mailboxes. End to end: a 1,2
sweep on tmpfs with the paper's settings and one point with Exim's stock
ones; the worker role is Exim's processes, the clients the driver; no share
above 100% although Exim has more processes at once than clients; nothing
left running or mounted; a port already taken is a clear error. Without a
kernel: the load generator's messages and its count of deliveries."""
from __future__ import annotations

import pwd
import re
import socket
from pathlib import Path

import pytest

from conftest import load, lockscope, servers_under
from lockscope.model import record
from lockscope.analyzer import attribution
from lockscope.errors import LockscopeError
from lockscope.measure import apps, server, smtpload


@pytest.fixture
def exim(e2e):
    app = apps.get("exim")
    why = app.missing()
    if why:
        pytest.skip(f"the exim workload needs Exim (Debian package exim4-daemon-light, `make test` installs it): "
                    f"{why}")
    try:
        pwd.getpwnam("Debian-exim")
    except KeyError:
        pytest.skip("the exim workload needs the user Debian-exim (made by the Debian package exim4-base)")
    return app


# ---- the load generator, without a server ----------------------------------

def test_a_message_is_1_kb_of_short_lines_none_starting_with_a_dot():
    m = smtpload.message(1024, 3, 7)
    assert len(m) == 1024 and m.endswith(b"\r\n")
    head, body = m.split(b"\r\n\r\n", 1)
    assert b"To: user3@lockscope.invalid" in head and b"Subject: lockscope load 3.7" in head
    assert all(0 < len(line) <= 76 and not line.startswith(b".") for line in body.split(b"\r\n")[:-1])


def test_deliveries_are_counted_in_the_mailboxes_new_directories(tmp_path):
    smtpload.make_mailboxes(tmp_path, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user0", "user1", "user2"]
    for k, (new, tmp) in enumerate([(2, 1), (0, 0), (5, 3)]):
        for sub, count in (("new", new), ("tmp", tmp)):
            (tmp_path / f"user{k}" / sub).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                (tmp_path / f"user{k}" / sub / f"m{i}").write_text("x")
    # a message still in tmp/ is not delivered yet
    assert smtpload.delivered(tmp_path) == 7


def test_a_server_that_is_not_there_fails_the_load_with_its_reason(tmp_path, capfd):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # bound, not listening: connections are refused
        code = smtpload.main(["--port", str(port), "--clients", "2", "--duration", "1", "--mail", str(tmp_path)])
    err = capfd.readouterr().err
    assert code == 1 and "Connection refused" in err and "2 of 2 clients failed" in err, err


# ---- a recorded run: 4 clients on ext4 (tests/data/exim_ext4, 1 s) ----------

def test_the_recorded_run_names_the_spool_directories_and_the_rename_of_delivery():
    rec = load("exim_ext4/exim-ext4-w4")
    names = [lk.name for lk in rec.locks]
    # creating, renaming and unlinking the spool files of each message in one of the 62 split
    # spool directories (FxMark's MWCL/MWUL-like finding), and the maildir delivery's rename of
    # tmp/ to new/: two directories, so the file system's rename mutex (FxMark's rename finding)
    spool = [lk for lk in rec.locks if re.fullmatch(r"inode->i_rwsem of <scratch>/spool/input/\w \(ext4, dir\)",
                                                    lk.name)]
    assert spool and spool[0].tier == "verified" and spool[0].kind == "rwsem", names
    assert {st.syscall for lk in spool for st in lk.stacks} >= {"openat", "unlink"}, names
    rename = next(lk for lk in rec.locks if lk.name == "sb->s_vfs_rename_mutex of ext4 at <scratch>")
    assert rename.stacks[0].site == "do_renameat2"
    assert "inode->i_rwsem of <scratch>/log/mainlog (ext4, file)" in names       # every process appends to it


def test_the_recorded_run_counts_exims_processes_as_the_work_and_no_share_exceeds_100_percent():
    rec = load("exim_ext4/exim-ext4-w4")
    assert rec.worker_roles == {"exim4"} and {r.name for r in rec.roles if r.driver} == {"python3 (driver)"}
    exim4 = next(r for r in rec.roles if r.name == "exim4")
    # hundreds of processes in one second for 4 clients: together they were busy (on CPU or
    # waiting) longer than 4 workers x the window, so shares are of their busy time
    assert exim4.pids > 100
    cap = attribution.capacity(rec)
    busy = sum(getattr(exim4, f) for f in ("on_cpu_ns", "lock_ns", "io_ns", "storage_ns", "preempted_ns",
                                           "other_ns")) / (rec.probe.window_s * 1e9)
    assert cap == pytest.approx(busy) and cap > rec.workers
    waits = attribution.waits(rec).values()
    assert all(0 <= w.wait_share <= 1.0 for w in waits), [(w.name, w.wait_share) for w in waits]
    # 6-10 runnable processes on 2 CPUs: their preemption is time-sharing, not a wait (not lost
    # capacity: the ideal counts the CPUs), shown apart, a share of the same capacity
    assert not [w for w in waits if w.lock_class == "preempted"]
    assert attribution.time_sharing(rec) * cap > rec.workers * 0.5


def test_shares_of_a_record_whose_workers_fit_their_window_stay_as_they_were():
    rec = load("pgbench_ext4/pgbench-ext4-w4")
    assert attribution.capacity(rec) == rec.workers


# ---- end to end --------------------------------------------------------------

@pytest.mark.e2e
def test_exim_sweep_names_exims_processes_as_the_work_and_leaves_nothing(exim, server_scratch, tmp_path):
    out = tmp_path / "out"
    p = lockscope("sweep", "--repeat", "1", "exim", "--fs", "tmpfs", "--workers", "1,2", "--duration", "2", "--out", str(out),
                  "--scratch", str(server_scratch), timeout=300)
    assert p.returncode == 0, p.stderr
    recs = {r.workers: r for r in (record.load(f) for f in sorted((out / "runs").glob("*.json")))}
    assert sorted(recs) == [1, 2]
    for n, r in recs.items():
        assert r.application.name == "exim" and r.application.package == "exim4-daemon-light"
        assert r.params == {"config": "paper", "per_connection": 10}
        assert r.throughput_unit == "messages/s delivered (counted in the mailboxes)"
        assert r.ops_per_sec and r.ops_per_sec > 20, (n, r.warnings)
        assert f"--clients {n} " in " ".join(r.command)
        # the work is Exim's: the daemon, a process per connection and one per delivery
        # (more processes than messages/s x window / 10 messages per connection)
        assert r.worker_roles == {"exim4"}, [(x.name, x.worker, x.reason) for x in r.roles]
        assert {x.name for x in r.roles if x.driver} == {"python3 (driver)"}
        exim4 = next(x for x in r.roles if x.name == "exim4")
        assert exim4.pids > r.ops_per_sec * r.probe.window_s * 0.5, exim4.pids
        assert r.target.how == "server" and r.target.processes[0].comm == "exim4"
        # Exim has more processes at once than clients: no share above 100% all the same
        assert all(0 <= w.wait_share <= 1.0 for w in attribution.waits(r).values()), \
            [(w.name, w.wait_share) for w in attribution.waits(r).values()]
    assert servers_under(server_scratch) == []


@pytest.mark.e2e
def test_exims_stock_settings_are_a_parameter(exim, server_scratch, tmp_path):
    out = tmp_path / "out"
    p = lockscope("run", "exim", "--fs", "tmpfs", "--workers", "1", "--duration", "2", "--param", "config=stock",
                  "--out", str(out), "--scratch", str(server_scratch), timeout=300)
    assert p.returncode == 0, p.stderr
    r = record.load(out / "runs" / "exim-tmpfs-w1.json")
    assert r.params["config"] == "stock" and r.ops_per_sec > 20
    assert servers_under(server_scratch) == []


@pytest.mark.e2e
def test_a_port_already_taken_is_a_clear_error_and_the_server_is_gone(exim, server_scratch, monkeypatch):
    d = server_scratch / "mnt"
    d.mkdir()
    d.chmod(0o755)
    spec = exim.point_fields(2, {})["server"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(server, "free_port", lambda: port)
        with pytest.raises(LockscopeError) as e:
            with server.ServerSession(spec, d, progress=lambda _: None):
                pass
    assert "exited with code 1 before it was ready" in e.value.message, e.value.message
    assert f"bind() to port {port}" in e.value.message and "Address already in use" in \
        e.value.message
    assert servers_under(server_scratch) == []
    assert (d / "exim.conf").stat().st_uid == 0          # its configuration is root's, not writable by Exim


def test_a_configuration_file_is_written_only_on_the_points_file_system():
    with pytest.raises(apps.TableError, match="a path on the point's file system"):
        apps.parse({"app": [{"name": "x", "package": "p", "binary": "b", "operation": "o", "sharing": "s",
                             "component": "c", "model": "process", "command": ["b", "{n}", "{duration}"],
                             "throughput_regex": "(1)", "unit": "u",
                             "server": {"user": "u", "init": [], "start": ["s"], "ready": ["r"],
                                        "write": [["{dir}/../etc/x", "exim.conf"]]}}]})
    assert Path(apps.APPFILES / "exim.conf").is_file()
