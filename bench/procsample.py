#!/usr/bin/env python3
"""Where do a program's threads spend their time? An outside view from /proc.

Samples /proc/PID/task/TID/{stat,wchan} (and, with --syscall, the syscall a
sleeping thread is in) of a process and all its descendants every --interval-ms,
and reads each thread's /proc schedstat (time on CPU, time runnable on a run
queue). Prints per thread name (numbers folded to '#', the command's own thread
apart as 'NAME [command]'): threads, observed thread-seconds, the shares of them
on CPU / runnable waiting for a CPU / asleep (schedstat, exact), the shares of
samples by state (R running or runnable, S sleeping, D uninterruptible) and the
kernel functions sleeping threads waited in (wchan). No BPF, no lockscope code.

    procsample.py [options] -- CMD ARGS...     run CMD and sample it to its end
    procsample.py [options] --pid PID          sample a running process (Ctrl-C or --seconds)
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict

FUTEX_OPS = {0: "WAIT", 9: "WAIT_BITSET", 6: "LOCK_PI", 11: "WAIT_REQUEUE_PI"}


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def children(pid):
    """pid's child processes (/proc/PID/task/TID/children of each thread)."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        text = read(f"/proc/{pid}/task/{tid}/children")
        if text:
            out += [int(c) for c in text.split()]
    return out


def fold(name):
    return re.sub(r"\d+", "#", name)


class Thread:
    def __init__(self, tid, pid, t, base):
        self.tid, self.pid = tid, pid
        self.first = self.last = t
        self.base = base               # schedstat (on CPU ns, run queue ns, times run) at first sight
        self.sched = base
        self.comm = ""
        self.states = Counter()
        self.wchan = Counter()         # (state, wchan) of sleeping samples
        self.futex = Counter()         # (op, uaddr) of samples asleep in futex()


def sample(root, threads, t, with_syscall, maps, first_tick):
    pids, todo = [], [root]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += children(p)
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in map(int, tids):
            d = f"/proc/{pid}/task/{tid}"
            stat = read(d + "/stat")
            ss = read(d + "/schedstat")
            if not stat or not ss:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            state = stat[stat.rindex(")") + 2]
            on, rq, slices = (int(x) for x in ss.split()[:3])
            th = threads.get(tid)
            if th is None:
                # born since the last tick: its counters started at 0 then
                th = threads[tid] = Thread(tid, pid, t, (on, rq, slices) if first_tick else (0, 0, 0))
            th.last, th.sched, th.comm = t, (on, rq, slices), comm
            th.states[state] += 1
            if state in "SDI":
                th.wchan[(state, read(d + "/wchan") or "?")] += 1
                if with_syscall:
                    sc = (read(d + "/syscall") or "").split()
                    if sc and sc[0] == "202":          # futex(uaddr, op, ...)
                        uaddr, op = int(sc[1], 16), int(sc[2], 16) & 0x7f
                        th.futex[(FUTEX_OPS.get(op, str(op)), uaddr)] += 1
                        if (pid, uaddr) not in maps:
                            maps[(pid, uaddr)] = where(pid, uaddr)


def where(pid, addr):
    """The mapping an address lies in: 'FILE+0xVADDR' (file-relative, from the
    file's lowest mapping, so that `nm FILE` finds it: also the .bss after it)
    or '[heap]', '[stack]', 'anon'."""
    text = read(f"/proc/{pid}/maps") or ""
    rows = []
    for line in text.splitlines():
        f = line.split(None, 5)
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        rows.append((lo, hi, int(f[2], 16), f[5] if len(f) > 5 else ""))
    for i, (lo, hi, off, path) in enumerate(rows):
        if lo <= addr < hi:
            if not path and i and rows[i - 1][1] == lo and rows[i - 1][3].startswith("/"):
                path = rows[i - 1][3]                  # anonymous .bss right after a file
            if path.startswith("/"):
                base = min(r[0] - r[2] for r in rows if r[3] == path)
                return f"{path}+{addr - base:#x}"
            return path or "anon"
    return "unmapped"


def symbolize(loc, cache={}):
    """'FILE+0xV' -> 'symbol in FILE' through nm, when nm knows it."""
    m = re.match(r"(/\S+)\+0x([0-9a-f]+)$", loc)
    if not m or not shutil.which("nm"):
        return loc
    path, v = m.group(1), int(m.group(2), 16)
    if path not in cache:
        out = subprocess.run(["nm", "-S", "-C", path], capture_output=True, text=True).stdout
        cache[path] = [(int(a, 16), int(s, 16), n) for a, s, _, n in
                       (l.split(None, 3) for l in out.splitlines() if len(l.split(None, 3)) == 4)]
    for a, s, n in cache[path]:
        if a <= v < a + max(s, 1):
            return f"{n} in {os.path.basename(path)}"
    return loc


def report(threads, root, elapsed, ticks, interval, sampler_cpu, maps, top, per_thread):
    groups = defaultdict(list)
    for th in threads.values():
        name = th.comm + " [command]" if th.tid == root else fold(th.comm)
        groups[name].append(th)
    print(f"procsample: {ticks} samples every {interval * 1000:.0f} ms over {elapsed:.2f} s; "
          f"the sampler used {sampler_cpu:.2f} s of CPU ({100 * sampler_cpu / elapsed:.0f}% of one CPU)")
    print(f"{'name':<22} {'thr':>4} {'obs s':>7} | {'on CPU':>6} {'runq':>5} {'asleep':>6} | "
          f"{'R':>4} {'S':>4} {'D':>4} {'oth':>4} | sleeping in (share of samples)")
    result = {}
    order = sorted(groups.items(), key=lambda kv: -sum(t.sched[0] - t.base[0] for t in kv[1]))
    for name, ths in order:
        obs = sum(t.last - t.first for t in ths) + len(ths) * interval
        on = sum(t.sched[0] - t.base[0] for t in ths) / 1e9
        rq = sum(t.sched[1] - t.base[1] for t in ths) / 1e9
        st, wc, fx = Counter(), Counter(), Counter()
        for t in ths:
            st.update(t.states)
            wc.update(t.wchan)
            fx.update(t.futex)
        n = sum(st.values()) or 1
        pct = lambda x: 100 * x / n
        waits = ", ".join(f"{w} {pct(c):.0f}%" for (s, w), c in wc.most_common(top))
        print(f"{name:<22} {len(ths):>4} {obs:>7.2f} | {100 * on / obs:>5.1f}% {100 * rq / obs:>4.1f}% "
              f"{100 * max(obs - on - rq, 0) / obs:>5.1f}% | {pct(st['R']):>3.0f}% {pct(st['S']):>3.0f}% "
              f"{pct(st['D']):>3.0f}% {pct(n - st['R'] - st['S'] - st['D']):>3.0f}% | {waits}")
        for (op, uaddr), c in fx.most_common(top):
            loc = symbolize(maps.get((ths[0].pid, uaddr), "")) if len({t.pid for t in ths}) == 1 else ""
            print(f"{'':<22}   futex {op} {uaddr:#x} {loc}: {pct(c):.0f}% of samples")
        result[name] = {"threads": len(ths), "observed_s": obs, "on_cpu_s": on, "runqueue_s": rq,
                        "samples": dict(st), "wchan": {f"{s} {w}": c for (s, w), c in wc.items()},
                        "futex": {f"{op} {u:#x}": c for (op, u), c in fx.items()}}
        if per_thread:
            for t in sorted(ths, key=lambda t: t.tid):
                o = t.last - t.first + interval
                print(f"    tid {t.tid:<7} pid {t.pid:<7} {t.comm:<15} {o:6.2f} s: on CPU "
                      f"{(t.sched[0] - t.base[0]) / 1e9:6.3f} s, runq {(t.sched[1] - t.base[1]) / 1e9:6.3f} s, "
                      f"ran {t.sched[2] - t.base[2]} times; "
                      + ", ".join(f"{s} {w} {c}" for (s, w), c in t.wchan.most_common(3)))
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid", type=int, help="sample this running process (and its descendants)")
    ap.add_argument("--seconds", type=float, help="stop after this long (default: when it exits)")
    ap.add_argument("--interval-ms", type=float, default=10)
    ap.add_argument("--syscall", action="store_true",
                    help="also read the futex address and op of threads asleep in futex()")
    ap.add_argument("--per-thread", action="store_true", help="a line per thread too")
    ap.add_argument("--top", type=int, default=4, help="sleep sites shown per name")
    ap.add_argument("--json", help="write the table as JSON to this file")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if bool(cmd) == bool(a.pid):
        ap.error("give either --pid PID or -- CMD ARGS")
    proc = subprocess.Popen(cmd) if cmd else None
    root = proc.pid if proc else a.pid
    interval = a.interval_ms / 1000
    threads, maps = {}, {}
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    t0 = time.monotonic()
    c0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    ticks = 0
    while not stop:
        t = time.monotonic()
        if a.seconds and t - t0 >= a.seconds:
            break
        if proc and proc.poll() is not None:
            break
        if not os.path.exists(f"/proc/{root}"):
            break
        sample(root, threads, t - t0, a.syscall, maps, ticks == 0 and not proc)
        ticks += 1
        time.sleep(max(0.0, interval - (time.monotonic() - t)))
    elapsed = time.monotonic() - t0
    cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - c0
    rc = proc.wait() if proc else 0
    sys.stdout.flush()
    res = report(threads, root, elapsed, ticks, interval, cpu, maps, a.top, a.per_thread)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"elapsed_s": elapsed, "ticks": ticks, "interval_s": interval,
                       "sampler_cpu_s": cpu, "groups": res}, f, indent=1)
    sys.exit(rc)


if __name__ == "__main__":
    main()
