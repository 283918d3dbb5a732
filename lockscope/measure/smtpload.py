"""The load of the `exim` application workload: N client processes on the
loopback, each sending 1 KB messages over SMTP with pipelining to a mailbox
of its own (userK@lockscope.invalid), as FxMark's Exim client does. Its
throughput is what the server *delivered* in the window: the messages that
reached the mailboxes' new/ directories, counted from the file system when
the window ends, not what the clients sent.

    python -m lockscope.measure.smtpload --port P --clients N --duration S --mail DIR

It makes DIR/user0..user{N-1} (the server's router accepts a local part
only where its mailbox directory exists) owned as DIR is, then prints one
line the workload's throughput_regex reads:

    smtpload: 4 clients, 5.00 s: 1234 messages accepted, 1230 delivered: 246.0 messages/s delivered

A client that cannot connect or whose message is refused ends the run with
exit 1 and the server's answer."""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

DOMAIN = "lockscope.invalid"
CONNECT_TIMEOUT_S = 10.0


class SmtpRefused(Exception):
    pass


def message(size: int, client: int, seq: int) -> bytes:
    """One message of about `size` bytes (headers included): CRLF lines of
    x's, none starting with a dot."""
    head = (f"From: load@{DOMAIN}\r\nTo: user{client}@{DOMAIN}\r\nSubject: lockscope load {client}.{seq}\r\n"
            "\r\n").encode()
    body = bytearray()
    while len(head) + len(body) < size:
        body += b"x" * max(min(74, size - len(head) - len(body) - 2), 1) + b"\r\n"
    return head + bytes(body)


class Client:
    """One SMTP connection: EHLO, then MAIL, RCPT and DATA sent together
    (PIPELINING), the message, its answer."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S)
        self.sock.settimeout(60.0)
        self.reader = self.sock.makefile("rb")
        self.expect(220, "greeting")
        self.sock.sendall(f"EHLO load.{DOMAIN}\r\n".encode())
        lines = self.expect(250, "EHLO")
        if not any(line[4:].upper().startswith(b"PIPELINING") for line in lines):
            raise SmtpRefused("the server does not offer PIPELINING")

    def expect(self, code: int, what: str) -> list[bytes]:
        lines = []
        while True:
            line = self.reader.readline()
            if not line:
                raise SmtpRefused(f"the server closed the connection (waiting for the answer to {what})")
            lines.append(line.rstrip(b"\r\n"))
            if line[3:4] != b"-":
                break
        if not lines[-1][:3].isdigit() or int(lines[-1][:3]) != code:
            raise SmtpRefused(f"{what}: {b' / '.join(lines).decode(errors='replace')}")
        return lines

    def send(self, client: int, body: bytes) -> None:
        self.sock.sendall(f"MAIL FROM:<load@{DOMAIN}>\r\nRCPT TO:<user{client}@{DOMAIN}>\r\nDATA\r\n".encode())
        self.expect(250, "MAIL FROM")
        self.expect(250, "RCPT TO")
        self.expect(354, "DATA")
        self.sock.sendall(body + b".\r\n")
        self.expect(250, "the message")

    def close(self) -> None:
        """QUIT, and close without waiting for the 221: Exim answers QUIT
        only when the client has closed or 200 ms have passed."""
        try:
            self.sock.sendall(b"QUIT\r\n")
        except OSError:
            pass
        self.reader.close()
        self.sock.close()


def run_client(client: int, port: int, deadline: float, per_connection: int, size: int) -> int:
    """Send until the deadline; the number of messages the server accepted."""
    sent = 0
    while time.monotonic() < deadline:
        c = Client(port)
        try:
            for _ in range(per_connection):
                if time.monotonic() >= deadline:
                    break
                c.send(client, message(size, client, sent))
                sent += 1
        finally:
            c.close()
    return sent


def make_mailboxes(mail: Path, clients: int) -> None:
    st = mail.stat()
    for k in range(clients):
        box = mail / f"user{k}"
        box.mkdir(exist_ok=True)
        os.chown(box, st.st_uid, st.st_gid)


def delivered(mail: Path) -> int:
    """Messages in the mailboxes' new/ directories (a maildir delivery
    writes tmp/ and renames into new/ when the message is complete)."""
    n = 0
    for box in mail.iterdir():
        try:
            with os.scandir(box / "new") as it:
                n += sum(1 for _ in it)
        except FileNotFoundError:
            pass
    return n


def _child(k: int, port: int, deadline: float, per_connection: int, size: int, wfd: int) -> None:
    code = 0
    try:
        sent = run_client(k, port, deadline, per_connection, size)
        os.write(wfd, f"{sent}\n".encode())
    except (OSError, SmtpRefused) as e:
        print(f"smtpload: client {k}: {e}", file=sys.stderr, flush=True)
        code = 1
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lockscope.measure.smtpload", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--mail", type=Path, required=True, help="the server's mailbox directory")
    ap.add_argument("--per-connection", type=int, default=10, help="messages per connection")
    ap.add_argument("--size", type=int, default=1024, help="bytes per message")
    a = ap.parse_args(argv)
    if a.clients < 1 or a.duration <= 0 or a.per_connection < 1 or a.size < 1:
        ap.error("--clients, --duration, --per-connection and --size are positive")
    if not a.mail.is_dir():
        ap.error(f"--mail {a.mail}: no such directory")
    make_mailboxes(a.mail, a.clients)
    before = delivered(a.mail)
    start = time.monotonic()
    deadline = start + a.duration
    rfd, wfd = os.pipe()
    pids = []
    for k in range(a.clients):
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            _child(k, a.port, deadline, a.per_connection, a.size, wfd)
        pids.append(pid)
    os.close(wfd)
    time.sleep(max(deadline - time.monotonic(), 0))
    got = delivered(a.mail) - before
    wall = time.monotonic() - start
    failed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        failed += os.waitstatus_to_exitcode(status) != 0
    with os.fdopen(rfd) as r:
        accepted = sum(int(x) for x in r.read().split())
    if failed:
        print(f"smtpload: {failed} of {a.clients} clients failed (above)", file=sys.stderr)
        return 1
    print(f"smtpload: {a.clients} clients, {wall:.2f} s: {accepted} messages accepted, {got} delivered: "
          f"{got / wall:.1f} messages/s delivered", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
