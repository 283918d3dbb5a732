#!/usr/bin/env python3
"""Overhead of `lockscope attach` on PostgreSQL, side by side.

One private cluster (tests/pgcluster.py: Debian's PostgreSQL, initdb in a
temporary directory, private socket and port, no TCP; removed at the end),
`pgbench -i -s SCALE` once, then for each client count pairs of pgbench runs
of the same length: one with the server alone, one while
`lockscope attach --pid <postmaster>` traces it (the window opens before
pgbench starts and is ended with SIGINT after it exits, so the whole pgbench
run is traced, connections forked during it included). The order inside a
pair alternates (alone first, then attached first, ...) so that a drift of
the machine does not favour one side. Each pair gives a ratio (tps attached /
tps alone); the median ratio is the result, and every pair is printed so the
noise can be judged. Uses only what is installed (postgresql, pgbench) and
this tree's lockscope; needs root (the server runs as user postgres, the
probes need BPF).

    sudo python3 bench/attach_overhead.py                        # -c 2 and -c 4, 5 pairs of 5 s
    sudo python3 bench/attach_overhead.py --clients 2,4,8 --pairs 7 --seconds 5 --json /tmp/o.json
    sudo python3 bench/attach_overhead.py --null     # A/A: both runs alone, the machine's own noise
    sudo python3 bench/attach_overhead.py --bpf-stats   # and each BPF program's run time (probe_cost.py's table)

A ratio of 0.90 means pgbench kept 90% of its tps under the probes. Not a
test: the table goes in bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import pgcluster  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from probe_cost import enable_stats, names, prog_stats  # noqa: E402

# per program over every attached run: [run_cnt, run_time_ns], and the runs' seconds (--bpf-stats)
bpf_totals: dict[str, list[int]] = {}
bpf_seconds: list[float] = []


def probe_pid(pid: int) -> int | None:
    """the lockscope-probe process below pid"""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if Path(f"/proc/{child}/comm").read_text().strip() == "lockscope-probe":
            return int(child)
        if (found := probe_pid(int(child))) is not None:
            return found
    return None

TPS = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")


stats_on = None                # the BPF_ENABLE_STATS fd, with --bpf-stats


def pgbench(cluster: pgcluster.Cluster, clients: int, seconds: int) -> float:
    r = cluster.as_user("pgbench", *cluster.conn, "-c", str(clients), "-j", str(clients), "-T", str(seconds),
                        "-n", "postgres", timeout=seconds + 60)
    m = TPS.search(r.stdout)
    if not m:
        raise SystemExit(f"no tps in pgbench's output:\n{r.stdout}\n{r.stderr}")
    return float(m.group(1))


def attached(cluster: pgcluster.Cluster, clients: int, seconds: int, out: Path, extra: list[str]) -> tuple[float, float]:
    """pgbench while lockscope attach traces the postmaster: (tps, seconds
    from starting lockscope to its window being open)."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "lockscope", "attach", "--pid", str(cluster.pid), "--out", str(out),
                          "--name", "postgres", *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    log = []
    for line in p.stderr:
        log.append(line)
        if "attached to" in line:
            break
    else:
        p.wait()
        raise SystemExit("lockscope attach failed:\n" + "".join(log))
    ready = time.monotonic() - t0
    lpid = probe_pid(p.pid) if bpf_seconds is not None and stats_on else None
    try:
        if lpid:
            names.clear()
            s0, w0 = prog_stats(lpid), time.monotonic()
        tps = pgbench(cluster, clients, seconds)
        if lpid:
            s1 = prog_stats(lpid)
            bpf_seconds.append(time.monotonic() - w0)
            for name, (cnt, ns) in s1.items():
                tot = bpf_totals.setdefault(name, [0, 0])
                tot[0] += cnt - s0.get(name, (0, 0))[0]
                tot[1] += ns - s0.get(name, (0, 0))[1]
    finally:
        p.send_signal(signal.SIGINT)      # ends the window; the record is written
        rest = p.communicate(timeout=300)
    if p.returncode != 0:
        raise SystemExit("lockscope attach failed:\n" + "".join(log) + rest[1])
    return tps, ready


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="2,4", help="pgbench client counts, comma-separated (default 2,4)")
    ap.add_argument("--pairs", type=int, default=5, help="pairs (alone, attached) per client count (default 5)")
    ap.add_argument("--seconds", type=int, default=5, help="pgbench -T of every run (default 5)")
    ap.add_argument("--scale", type=int, default=1, help="pgbench -i -s (default 1: hot rows)")
    ap.add_argument("--attach-arg", action="append", default=[],
                    help="an extra argument of lockscope attach (repeat), e.g. --attach-arg=--sample-hz=0")
    ap.add_argument("--null", action="store_true",
                    help="A/A: both runs of a pair alone (no lockscope), to see the machine's own noise")
    ap.add_argument("--json", type=Path, help="write every run here too")
    ap.add_argument("--bpf-stats", action="store_true",
                    help="time every BPF program during the attached runs (kernel.bpf_stats: ~20 ns per run)")
    args = ap.parse_args()
    why = pgcluster.missing()
    if why:
        raise SystemExit(f"attach_overhead: {why}")
    clients = [int(c) for c in args.clients.split(",")]
    results = []
    global stats_on
    stats_on = enable_stats() if args.bpf_stats else None
    with tempfile.TemporaryDirectory(prefix="lksc-attach-overhead-") as tmp, pgcluster.Cluster() as cluster:
        cluster.as_user("pgbench", *cluster.conn, "-i", "-s", str(args.scale), "-q", "postgres", timeout=300)
        pgbench(cluster, max(clients), 2)                        # warm the cache and the server
        for c in clients:
            for i in range(args.pairs):
                out = Path(tmp) / f"c{c}-{i}"
                if args.null:
                    alone = pgbench(cluster, c, args.seconds)
                    traced, ready = pgbench(cluster, c, args.seconds), 0.0
                elif i % 2 == 0:
                    alone = pgbench(cluster, c, args.seconds)
                    traced, ready = attached(cluster, c, args.seconds, out, args.attach_arg)
                else:
                    traced, ready = attached(cluster, c, args.seconds, out, args.attach_arg)
                    alone = pgbench(cluster, c, args.seconds)
                row = {"clients": c, "pair": i + 1, "null": args.null,
                       "first": "alone" if i % 2 == 0 or args.null else "attached",
                       "tps_alone": alone, "tps_attached": traced, "ratio": traced / alone,
                       "attach_ready_s": round(ready, 2)}
                results.append(row)
                print(f"-c {c} pair {i + 1}: alone {alone:.0f} tps, alone again {traced:.0f} tps, ratio "
                      f"{row['ratio']:.3f}" if args.null else
                      f"-c {c} pair {i + 1} ({row['first']} first): alone {alone:.0f} tps, attached {traced:.0f} "
                      f"tps, ratio {row['ratio']:.3f} (attach ready in {ready:.1f} s)", flush=True)
    print()
    print("| clients | tps alone (median) | tps " + ("alone again" if args.null else "attached") +
          " (median) | median ratio | per-pair ratios |")
    print("|---|---|---|---|---|")
    for c in clients:
        rows = [r for r in results if r["clients"] == c]
        print(f"| {c} | {statistics.median(r['tps_alone'] for r in rows):.0f} | "
              f"{statistics.median(r['tps_attached'] for r in rows):.0f} | "
              f"{statistics.median(r['ratio'] for r in rows):.3f} | "
              + ", ".join(f"{r['ratio']:.2f}" for r in rows) + " |")
    if bpf_totals:
        wall = sum(bpf_seconds)
        print(f"\nBPF programs during the attached runs ({wall:.0f} s in all):\n"
              "| program | events/s | ns/event | CPU% |\n|---|---|---|---|")
        for name, (cnt, ns) in sorted(bpf_totals.items(), key=lambda kv: -kv[1][1]):
            if cnt:
                print(f"| {name} | {cnt / wall:,.0f} | {ns / cnt:,.0f} | {ns / wall / 1e7:.2f} |")
        print(f"| **total** | | | **{sum(ns for _, ns in bpf_totals.values()) / wall / 1e7:.2f}** |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
