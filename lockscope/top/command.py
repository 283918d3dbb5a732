"""`lockscope top`: the command (the live view of lockscope/top/session.py
drawn by lockscope/top/screen.py); its options are in lockscope/cliargs.py."""
from __future__ import annotations

import argparse
import os
import sys

from lockscope import validate
from lockscope.errors import EXIT_INTERRUPTED, UsageError
from lockscope.measure import targets
from lockscope.top import screen as topscreen
from lockscope.top.session import LiveSession, LiveSpec


def live_spec(args: argparse.Namespace) -> LiveSpec:
    """`lockscope top`'s options, checked: the same targets as attach, cut
    every --interval; without --batch, a terminal it can draw on."""
    validate.check_live_interval(args.interval)
    validate.check_batch(args.batch)
    validate.check_worker_count(args.workers)
    validate.check_sample_hz(args.sample_hz)
    vmlinux = validate.check_vmlinux(args.vmlinux)
    if args.batch is None:
        why = topscreen.interactive_ok()
        if why:
            raise UsageError(f"{why}; use --batch N for plain text")
    found = None if args.system_wide else targets.resolve(args.pid, args.comm, args.cgroup)
    return LiveSpec(found, args.interval, args.workers, args.sample_hz, vmlinux)


def cmd_top(args: argparse.Namespace) -> int:
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

