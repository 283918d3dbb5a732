#!/usr/bin/env python3
"""db_bench's own account of where a fillrandom's time goes.

Runs `db_bench --benchmarks=fillrandom` with the flags of lockscope's
rocksdb-fillrandom workload (lockscope/measure/apps.toml), on a fresh tmpfs, with
`--statistics --stats_level=5` (kAll: DB mutex waits timed too) and
`--perf_level=5` (kEnableTime: per-thread PerfContext timers, mutexes included),
at each thread count, and prints from db_bench's output: throughput, the DB
mutex wait (rocksdb.db.mutex.wait.micros: RocksDB 7.8 adds nanoseconds to it,
whatever its name says), write stalls, the time inside DB::Write against threads x seconds,
and the PerfContext split of one writer thread's time per operation (db_bench
keeps the PerfContext of one thread). `--plain` also runs each count without
statistics, for the throughput they cost. Needs root (mounts a tmpfs).

    python3 bench/dbbench_stats.py --threads 1,2 [--duration 3] [--out DIR]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

PERF = ["write_thread_wait_nanos", "write_wal_time", "write_memtable_time",
        "write_pre_and_post_process_time", "write_scheduling_flushes_compactions_time",
        "db_mutex_lock_nanos", "db_condition_wait_nanos", "write_delay_time"]


def run(threads, duration, keys, value_size, stats, outdir):
    mnt = tempfile.mkdtemp(prefix="dbbench-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "noatime", "tmpfs", mnt], check=True)
    try:
        cmd = ["db_bench", f"--db={mnt}/db", "--benchmarks=fillrandom", f"--threads={threads}",
               f"--duration={duration}", f"--num={keys}", f"--value_size={value_size}"]
        if stats:
            cmd += ["--statistics", "--stats_level=5", "--perf_level=5"]
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)
    if outdir:
        with open(os.path.join(outdir, f"fillrandom-t{threads}{'-stats' if stats else ''}.txt"), "w") as f:
            f.write(" ".join(cmd) + "\n" + out)
    m = re.search(r"^fillrandom\s+:\s+(\S+) micros/op (\d+) ops/sec (\S+) seconds (\d+) operations", out, re.M)
    r = {"cmd": " ".join(cmd), "ops_per_sec": int(m.group(2)), "seconds": float(m.group(3)),
         "ops": int(m.group(4))}
    for name, val in re.findall(r"^(rocksdb\.\S+) COUNT : (\d+)$", out, re.M):
        r[name] = int(val)
    for name, cnt, total in re.findall(r"^(rocksdb\.\S+) P50 .* COUNT : (\d+) SUM : (\d+)$", out, re.M):
        r[name + ".count"], r[name + ".sum"] = int(cnt), int(total)
    for name in PERF + ["user_key_comparison_count"]:
        m = re.search(rf"\b{name} = (\d+)", out)
        r[name] = int(m.group(1)) if m else None
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--duration", type=int, default=3)
    ap.add_argument("--keys", type=int, default=500000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--plain", action="store_true", help="also run without statistics")
    ap.add_argument("--out", help="keep db_bench's outputs in this directory")
    a = ap.parse_args()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    for n in map(int, a.threads.split(",")):
        if a.plain:
            p = run(n, a.duration, a.keys, a.value_size, False, a.out)
            print(f"threads {n}, no statistics: {p['ops_per_sec']:,} ops/s")
        r = run(n, a.duration, a.keys, a.value_size, True, a.out)
        thr_us = n * r["seconds"] * 1e6
        g = r.get
        print(f"threads {n}, statistics on: {r['ops_per_sec']:,} ops/s, {r['ops']:,} ops in {r['seconds']:.3f} s")
        print(f"  DB::Write (rocksdb.db.write.micros): {g('rocksdb.db.write.micros.sum', 0) / 1e6:.3f} s "
              f"= {100 * g('rocksdb.db.write.micros.sum', 0) / thr_us:.1f}% of threads x seconds")
        # RocksDB 7.8 adds nanoseconds to this ticker despite its name (the
        # mutex timer, PerfStepTimer, records NowNanos differences)
        mw = g('rocksdb.db.mutex.wait.micros', 0)
        print(f"  DB mutex wait (rocksdb.db.mutex.wait.micros, counted in ns): {mw / 1e3:.1f} us"
              f" = {100 * mw / 1e3 / thr_us:.4f}% of threads x seconds")
        print(f"  write stalls (rocksdb.stall.micros): {g('rocksdb.stall.micros', 0) / 1e3:.2f} ms; "
              f"rocksdb.db.write.stall: {g('rocksdb.db.write.stall.count', 0)} writes, "
              f"{g('rocksdb.db.write.stall.sum', 0) / 1e3:.2f} ms")
        print(f"  writes done by the thread itself / by a group leader: {g('rocksdb.write.self', 0):,} / "
              f"{g('rocksdb.write.other', 0):,}; flushes: {g('rocksdb.db.flush.micros.count', 0)} "
              f"({g('rocksdb.db.flush.micros.sum', 0) / 1e3:.1f} ms); compactions: "
              f"{g('rocksdb.compaction.times.micros.count', 0)} ({g('rocksdb.compaction.times.micros.sum', 0) / 1e3:.1f} ms)")
        per = r["ops"] / n          # the one thread's ops, about
        parts = ", ".join(f"{k} {g(k) / 1e9:.3f} s ({g(k) / per:.0f} ns/op)" for k in PERF if g(k))
        print(f"  PerfContext of one writer (~{per:,.0f} ops): {parts}")
        print(f"  user_key_comparison_count per op: {g('user_key_comparison_count', 0) / per:.1f}")


if __name__ == "__main__":
    sys.exit(main())
