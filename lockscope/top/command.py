"""`lockscope top`: its command line and the command (the live view of
lockscope/top/session.py drawn by lockscope/top/screen.py)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lockscope import validate
from lockscope.errors import EXIT_INTERRUPTED
from lockscope.probe import DEFAULT_SAMPLE_HZ

DESCRIPTION = ("A live view of running processes lockscope did not start: every --interval seconds the top lock "
               "waits of that interval (name, tier, kind, share of the targets' time, waits/s, longest wait), the "
               "roles' time split of the interval, and throughput where known. Keys: s, w, m sort by share, "
               "waits/s, max wait; space freezes the screen; q quits (so do Ctrl-C, SIGTERM and SIGHUP). "
               "It ends by itself when the targets exit. The targets are never stopped or signalled, and "
               "nothing stays attached after it ends. --batch N prints N intervals as plain text instead "
               "(like top -b).")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("top", help="live view of the lock waits of running processes (pid, comm, cgroup)",
                       description=DESCRIPTION)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid", default=None, metavar="P[,P...]",
                     help="these processes, with their threads and the children they fork")
    who.add_argument("--comm", default=None, metavar="NAME", help="the processes named NAME (/proc/PID/comm)")
    who.add_argument("--cgroup", default=None, metavar="PATH",
                     help="the processes of this cgroup v2 directory and those below it")
    who.add_argument("--system-wide", action="store_true",
                     help="every task on the machine (shares are of the allowed CPUs' time)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds per refresh (default 1; at least 0.2)")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="print N intervals as plain text to stdout and exit (no terminal needed)")
    p.add_argument("--sort", choices=("share", "waits/s", "max"), default="share",
                   help="the waits' order at the start (default share; keys s, w, m change it)")
    p.add_argument("--workers", type=int, default=None,
                   help="the thread count the shares are relative to (default: the targets' threads at the start)")
    p.add_argument("--sample-hz", type=int, default=DEFAULT_SAMPLE_HZ,
                   help=f"on-CPU samples per second per CPU (default {DEFAULT_SAMPLE_HZ}; 0: none)")
    p.add_argument("--vmlinux", type=Path, default=None, metavar="PATH",
                   help="a System.map or vmlinux of the running kernel: names global kernel locks by variable")


def cmd_top(args: argparse.Namespace) -> int:
    from lockscope.settings import live_spec
    from lockscope.top import screen as topscreen
    from lockscope.top.session import LiveSession

    spec = live_spec(args)
    validate.require_run_environment(True)
    label = spec.label
    with LiveSession(spec) as session, topscreen.Quit() as quit:
        if args.batch is not None:
            why = topscreen.run_batch(session, label, args.batch, args.sort, sys.stdout, quit)
        else:
            why = topscreen.run_screen(session, label, args.sort, quit)
    # the probe process has exited here: nothing of it stays attached
    if why == "SIGHUP":          # the terminal is gone: nothing to say, nowhere to say it
        _quiet()
        return EXIT_INTERRUPTED
    print(f"lockscope top: ended ({why}); the probe is detached", file=sys.stderr)
    return EXIT_INTERRUPTED if why == "SIGTERM" else 0


def _quiet() -> None:
    """Point stdout and stderr at /dev/null so that flushing them at exit
    does not fail on a hung-up terminal."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)

