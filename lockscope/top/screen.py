"""What `lockscope top` shows: a frame (lockscope/top/session.py) as lines of
text, printed N times for --batch (like `top -b`) or drawn with curses,
refreshed every interval, with keys to sort (s share, w waits/s, m max
wait), freeze (space) and quit (q). Curses draws through the terminal's
terminfo entry, so it works over ssh and inside tmux or screen; the
terminal is restored however the screen ends."""
from __future__ import annotations

import curses
import signal
import sys
import time
from typing import Callable, TextIO

from lockscope.top.session import Frame, LiveSession

SORTS = {"share": lambda r: -r.share, "waits/s": lambda r: -r.waits_per_s, "max": lambda r: -r.max_wait_ns}
SORT_KEYS = {ord("s"): "share", ord("w"): "waits/s", ord("m"): "max"}
KEYS_LINE = "keys: s sort by share  w by waits/s  m by max wait  space freeze  q quit"
MAX_ROLES = 6
POLL_S = 0.1


def _dur(ns: int) -> str:
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.2f}s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.1f}ms"
    return f"{ns / 1e3:.1f}us"


def frame_lines(frame: Frame, label: str, sort: str = "share", frozen: bool = False,
                max_locks: int | None = None) -> list[str]:
    """The screen of one interval, top to bottom."""
    head = (f"lockscope top - {label} - interval {frame.seq} ending {frame.wall} ({frame.interval_s:.2f} s), "
            f"shares of {frame.workers} {frame.unit}{'s' if frame.workers != 1 else ''} x interval - sort: {sort}"
            + (" - FROZEN (space resumes)" if frozen else ""))
    out = [head, f"throughput: {frame.throughput}", ""]
    if frame.roles is None:
        out.append("roles: the per-thread probe did not load, no CPU split")
    else:
        out.append("roles, this interval (% of each role's thread time; * = counted as the work):")
        out.append(f"  {'ROLE':<24} {'THREADS':>7} {'ON-CPU':>7} {'LOCK':>6} {'IO':>6} {'STORAGE':>7} "
                   f"{'PREEMPT':>7} {'OTHER':>6} {'IDLE':>6}")
        for r in frame.roles[:MAX_ROLES]:
            s = r.split
            out.append(f"  {(r.name + ('*' if r.worker else ''))[:24]:<24} {r.threads:>7} {s['on-cpu']:>7.1%} "
                       f"{s['lock']:>6.1%} {s['io']:>6.1%} {s['storage']:>7.1%} {s['preempted']:>7.1%} "
                       f"{s['other']:>6.1%} {s['idle']:>6.1%}")
        if len(frame.roles) > MAX_ROLES:
            out.append(f"  ... {len(frame.roles) - MAX_ROLES} more roles")
    out.append("")
    rows = sorted(frame.locks, key=SORTS[sort])
    out.append(f"top waits, this interval ({len(frame.locks)} lock{'s' if len(frame.locks) != 1 else ''} waited on):")
    out.append(f"  {'SHARE':>7} {'WAITS/S':>9} {'MAX':>9}  {'TIER':<8} {'KIND':<14} NAME")
    for r in rows[:max_locks] if max_locks is not None else rows:
        out.append(f"  {r.share:>7.2%} {r.waits_per_s:>9.0f} {_dur(r.max_wait_ns):>9}  {r.tier:<8} "
                   f"{r.kind[:14]:<14} {r.name}" + (f"  (held by {r.holder})" if r.holder else ""))
    if not rows:
        out.append("  (no lock waits in this interval)")
    return out


class Quit:
    """SIGINT, SIGTERM and SIGHUP end the screen (the first one wins) instead
    of interrupting it half-drawn; the old handlers come back after."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.why: str | None = None
        self._old: dict = {}

    def _on(self, signum, frame) -> None:
        self.why = self.why or signal.Signals(signum).name

    def __enter__(self) -> "Quit":
        for s in self.SIGNALS:
            self._old[s] = signal.signal(s, self._on)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def _wait_interval(session: LiveSession, quit: Quit, on_tick: Callable[[float], None] | None = None) -> str | None:
    """Until the interval is due: None, or why the view ends."""
    while True:
        if quit.why:
            return quit.why
        if not session.targets_alive():
            return "targets exited"
        left = session.due_in()
        if left <= 0:
            return None
        if on_tick:
            on_tick(min(POLL_S, left))
            if quit.why:
                return quit.why
        else:
            time.sleep(min(POLL_S, left))


def run_batch(session: LiveSession, label: str, count: int, sort: str, out: TextIO, quit: Quit) -> str:
    """Print `count` intervals as plain text; why it ended."""
    for i in range(count):
        why = _wait_interval(session, quit)
        if why:
            return why
        lines = frame_lines(session.next_frame(), label, sort)
        out.write("\n".join(lines) + "\n\n")
        out.flush()
    return "done"


class Screen:
    """The interactive screen: the last frame (or the frozen one) and the keys."""

    def __init__(self, win, label: str, sort: str):
        self.win = win
        self.label = label
        self.sort = sort
        self.frozen = False
        self.frame: Frame | None = None      # what is shown
        self.latest: Frame | None = None
        self.quit = False

    def key(self, ch: int) -> None:
        if ch in (ord("q"), ord("Q")):
            self.quit = True
        elif ch in SORT_KEYS:
            self.sort = SORT_KEYS[ch]
        elif ch == ord(" "):
            self.frozen = not self.frozen
            if not self.frozen:
                self.frame = self.latest
        elif ch != curses.KEY_RESIZE:
            return
        self.draw()

    def show(self, frame: Frame) -> None:
        self.latest = frame
        if not self.frozen:
            self.frame = frame
        self.draw()

    def draw(self) -> None:
        h, w = self.win.getmaxyx()
        self.win.erase()
        if self.frame is None:
            lines = [f"lockscope top - {self.label} - attached, the first interval is being measured ...", "",
                     KEYS_LINE]
        else:
            lines = frame_lines(self.frame, self.label, self.sort, self.frozen)
        for y, line in enumerate(lines[:max(0, h - 1)]):
            try:
                self.win.addnstr(y, 0, line, max(0, w - 1), curses.A_BOLD if y == 0 else curses.A_NORMAL)
            except curses.error:
                pass
        try:
            self.win.addnstr(h - 1, 0, KEYS_LINE, max(0, w - 1), curses.A_REVERSE)
        except curses.error:
            pass
        self.win.refresh()


def run_screen(session: LiveSession, label: str, sort: str, quit: Quit) -> str:
    """The curses screen until q, a signal, or the targets exit; the
    terminal is restored on the way out, whatever ends it."""
    win = curses.initscr()
    try:
        curses.noecho()
        curses.cbreak()          # keys at once; Ctrl-C still sends SIGINT
        win.keypad(True)
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        screen = Screen(win, label, sort)
        screen.draw()

        def tick(timeout: float) -> None:
            win.timeout(max(1, int(timeout * 1000)))
            ch = win.getch()
            if ch != -1:
                screen.key(ch)
                if screen.quit:
                    quit.why = quit.why or "q"

        while True:
            why = _wait_interval(session, quit, tick)
            if why:
                return why
            screen.show(session.next_frame())
    finally:
        try:
            win.keypad(False)
            curses.nocbreak()
            curses.echo()
            curses.endwin()
        except curses.error:
            pass        # the terminal is gone (SIGHUP)


def interactive_ok() -> str | None:
    """Why the interactive screen cannot run here, or None."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return "the interactive screen needs a terminal (stdin and stdout)"
    try:
        curses.setupterm()
    except curses.error as e:
        return f"the terminal type is unknown to curses ({e})"
    return None
