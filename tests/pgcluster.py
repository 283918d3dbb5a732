"""A private PostgreSQL cluster for tests (Debian's postgresql 15): initdb in
a temporary directory owned by the postgres user, the server on a private
unix socket directory and port, no TCP (listen_addresses=''), stopped and
removed on exit, always. Any other PostgreSQL on the machine is left alone."""
from __future__ import annotations

import glob
import os
import pwd
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

USER = "postgres"


def bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


def missing() -> str | None:
    """Why a cluster cannot be made here, or None."""
    if os.geteuid() != 0:
        return "a private PostgreSQL cluster is started as user postgres: needs root"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return "no 'postgres' user (Debian package postgresql)"
    b = bindir()
    if b is None or not (b / "initdb").exists() or not (b / "pg_ctl").exists():
        return "PostgreSQL server binaries missing: /usr/lib/postgresql/*/bin/{postgres,initdb,pg_ctl} (package postgresql)"
    for tool in ("pgbench", "psql", "runuser"):
        if not shutil.which(tool):
            return f"{tool} not found (packages postgresql-client, postgresql-contrib, util-linux)"
    return None


class Cluster:
    def __init__(self, settings: dict[str, str] | None = None):
        self.bin = bindir()
        self.root = Path(tempfile.mkdtemp(prefix="lksc-pg-"))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.port = random.randrange(20000, 60000)
        self.settings = settings or {}
        self.pid: int | None = None

    def as_user(self, *argv: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", USER, "--", *argv], capture_output=True, text=True,
                              check=True, timeout=kw.pop("timeout", 120), **kw)

    def popen(self, *argv: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["runuser", "-u", USER, "--", *argv], **kw)

    @property
    def conn(self) -> list[str]:
        return ["-h", str(self.sock), "-p", str(self.port)]

    def __enter__(self) -> "Cluster":
        try:
            pw = pwd.getpwnam(USER)
            os.chmod(self.root, 0o755)
            self.sock.mkdir()
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            os.chown(self.sock, pw.pw_uid, pw.pw_gid)
            self.as_user(str(self.bin / "initdb"), "-D", str(self.data), "--auth=trust", "--no-sync",
                         "-U", USER)
            opts = f"-k {self.sock} -p {self.port} -c listen_addresses=''" + "".join(
                f" -c {k}={v}" for k, v in self.settings.items())
            self.as_user(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                         str(self.root / "server.log"), "-w", "start")
            self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except BaseException:
            self.close()
            raise
        return self

    def psql(self, sql: str) -> str:
        return self.as_user("psql", *self.conn, "-X", "-Atq", "-d", "postgres", "-c", sql).stdout

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(["runuser", "-u", USER, "--", str(self.bin / "pg_ctl"), "-D", str(self.data),
                            "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)
        if self.pid:
            deadline = time.monotonic() + 10
            while Path(f"/proc/{self.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(self.root, ignore_errors=True)

    def __exit__(self, *exc) -> None:
        self.close()
