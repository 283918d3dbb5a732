"""A private MariaDB server for tests (Debian's mariadb-server): a data
directory made by mariadb-install-db in a temporary directory, the server on
a private unix socket with no TCP (--skip-networking), stopped and removed on
exit, always. Any other MariaDB on the machine is left alone."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

SERVER = "/usr/sbin/mariadbd"
TOOLS = ("mariadb-install-db", "mariadb")


def missing() -> str | None:
    """Why a server cannot be made here, or None."""
    if os.geteuid() != 0:
        return "a private MariaDB server is started with --user=root: needs root"
    if not os.access(SERVER, os.X_OK):
        return (f"{SERVER} not found: apt-get install mariadb-server (not in the Makefile's APT_PACKAGES: "
                "installing it starts the machine's own MariaDB service)")
    for tool in TOOLS:
        if not shutil.which(tool):
            return f"{tool} not found (Debian packages mariadb-server, mariadb-client)"
    return None


class Server:
    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="lksc-mdb-"))
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.proc: subprocess.Popen | None = None
        self.clients: list[subprocess.Popen] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def sql(self, statements: str, db: str = "") -> str:
        r = subprocess.run(["mariadb", "-S", str(self.sock), "-u", "root", "-N", "-B", *([db] if db else []),
                            "-e", statements], capture_output=True, text=True, timeout=60)
        if r.returncode:
            raise RuntimeError(f"mariadb: {statements!r}: {r.stderr.strip()}")
        return r.stdout

    def status(self, name: str) -> int:
        """A global status counter (SHOW GLOBAL STATUS)."""
        return int(self.sql(f"SHOW GLOBAL STATUS LIKE '{name}'").split()[1])

    def client(self, script: str, db: str) -> subprocess.Popen:
        """A client session running `script` (SQL, read from a file: a pipe
        would block the caller until the session had read most of it) until
        it ends or the server stops."""
        f = self.root / f"client{len(self.clients)}.sql"
        f.write_text(script)
        with open(f) as stdin:
            p = subprocess.Popen(["mariadb", "-S", str(self.sock), "-u", "root", db], stdin=stdin,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.clients.append(p)
        return p

    def __enter__(self) -> "Server":
        subprocess.run(["mariadb-install-db", "--no-defaults", "--user=root", f"--datadir={self.data}",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       capture_output=True, text=True, check=True, timeout=120)
        self.proc = subprocess.Popen(
            [SERVER, "--no-defaults", "--user=root", f"--datadir={self.data}", f"--socket={self.sock}",
             "--skip-networking", "--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=0",
             f"--log-error={self.root / 'error.log'}", f"--pid-file={self.root / 'mariadbd.pid'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.sql("SELECT 1")
                return self
            except RuntimeError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.root / "error.log")
                    self.__exit__(None, None, None)
                    raise RuntimeError("mariadbd did not start: "
                                       + (log.read_text()[-800:] if log.exists() else "no error log"))
                time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        for p in self.clients:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()            # a clean shutdown (SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)
