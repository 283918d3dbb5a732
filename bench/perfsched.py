#!/usr/bin/env python3
"""Per thread name: time on CPU, runnable waiting for a CPU, asleep -- from
`perf sched` (the kernel's scheduler tracepoints recorded by perf; no lockscope
code). Every switch is recorded, so unlike sampling /proc it does not take a CPU
from the program at the moments it looks.

    perfsched.py [--per-thread] -- CMD ARGS...     record CMD with `perf sched record`
    perfsched.py [--per-thread] --data perf.data   an existing recording

From `perf sched timehist --state`: per run of a thread, its run time and the
time off CPU before it, which is runnable time when the thread had left the CPU
runnable (preempted, or sched_yield), else sleep. Threads are grouped by name with numbers folded to '#' (the command's own
thread apart, as 'NAME [command]'). A sleep still open when the recording ends
is not counted.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

ROW = re.compile(r"^\s*[\d.]+\s+\[\d+\]\s+(.+?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="read this perf.data instead of recording")
    ap.add_argument("--per-thread", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if bool(cmd) == bool(a.data):
        ap.error("give either --data FILE or -- CMD ARGS")
    data = a.data
    if cmd:
        data = tempfile.mktemp(prefix="perfsched-", suffix=".data")
        rc = subprocess.call(["perf", "sched", "record", "-q", "-o", data, "--"] + cmd)
        if rc:
            print(f"perfsched: the command exited with {rc}", file=sys.stderr)
    out = subprocess.run(["perf", "sched", "timehist", "--state", "-i", data],
                         capture_output=True, text=True).stdout
    if cmd:
        os.unlink(data)
    th = defaultdict(lambda: [0.0, 0.0, 0.0, 0, ""])      # tid -> asleep, runnable, run (ms), sched-ins, name
    pid_of, last_state = {}, {}
    for line in out.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        name, tid, pid = m.group(1), int(m.group(2)), int(m.group(3) or m.group(2))
        if name in ("<idle>",) or name.startswith(("perf", ":-1")):
            continue
        # the time off CPU before this run (perf's wait time + sch delay) was
        # spent runnable if the thread had left the CPU runnable (R: yield,
        # W: perf 6.1's letter for a preempted task, R+), else asleep; perf
        # 6.1 does not make this split itself for kernels that report R+
        t = th[tid]
        off = float(m.group(4)) + float(m.group(5))
        t[1 if last_state.get(tid) in ("R", "W") else 0] += off
        t[2] += float(m.group(6)); t[3] += 1
        t[4] = name
        last_state[tid] = m.group(7)
        pid_of[tid] = pid
    # the command's processes: those with a thread named like the command (and
    # all their threads, renamed ones too); its own thread: the lowest such pid
    base = os.path.basename(cmd[0])[:15] if cmd else None
    pids = {pid_of[t] for t in th if th[t][4] == base} if base else set(pid_of.values())
    root = min(pids) if base and pids else None
    groups = defaultdict(list)
    for tid, t in th.items():
        if pid_of[tid] in pids:
            groups[t[4] + " [command]" if tid == root else re.sub(r"\d+", "#", t[4])].append(tid)
    print(f"{'name':<24} {'thr':>4} {'run s':>8} {'runq s':>8} {'asleep s':>9} {'ran':>7} | run  runq  asleep (shares)")
    for name, tids in sorted(groups.items(), key=lambda kv: -sum(th[t][2] for t in kv[1])):
        w, d, r, n = (sum(th[t][i] for t in tids) for i in range(4))
        tot = (w + d + r) or 1
        print(f"{name:<24} {len(tids):>4} {r / 1e3:>8.3f} {d / 1e3:>8.3f} {w / 1e3:>9.3f} {n:>7} | "
              f"{100 * r / tot:4.1f}% {100 * d / tot:4.1f}% {100 * w / tot:5.1f}%")
        if a.per_thread:
            for t in sorted(tids, key=lambda t: -th[t][2])[:8]:
                x = th[t]
                print(f"    {x[4]}[{t}/{pid_of[t]}]: run {x[2] / 1e3:.3f} s, runq {x[1] / 1e3:.3f} s, "
                      f"asleep {x[0] / 1e3:.3f} s, ran {x[3]} times")


if __name__ == "__main__":
    main()
