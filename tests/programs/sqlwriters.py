"""SQLite writers in processes started by multiprocessing, with their own
clock, for lockscope's file-lock tests (issue 44).

    python3 sqlwriters.py N HOLD_US WORK_US SECONDS DB [CLOCK_FILE]

N processes, each with its own connection (Python's sqlite3, its default
busy handler: sqlite3_busy_timeout), loop: BEGIN IMMEDIATE (the database's
write lock: a writer that finds it held gets SQLITE_BUSY inside, sleeps in
SQLite's busy handler and retries), insert a row, spin HOLD_US, COMMIT,
spin WORK_US. The parent waits for their results on a multiprocessing
Queue (a pipe read, all along: it waits for its workers, it does no work);
a thread of it prints "ops: N" every 0.1 s; then "ops/s: X" and "lock_wait_share: W": the
workers' time inside BEGIN IMMEDIATE over their running time (the program's
own clock of its database-lock waits), also into CLOCK_FILE when given."""
import multiprocessing as mp
import sqlite3
import sys
import threading
import time


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def worker(db: str, hold: float, work: float, deadline: float, ops, results) -> None:
    con = sqlite3.connect(db, timeout=30, isolation_level=None)
    start = time.monotonic()
    waited = 0.0
    while time.monotonic() < deadline:
        t = time.monotonic()
        con.execute("BEGIN IMMEDIATE")
        waited += time.monotonic() - t
        con.execute("INSERT INTO t (v) VALUES (?)", (t,))
        spin(hold)
        con.execute("COMMIT")
        with ops.get_lock():
            ops.value += 1
        spin(work)
    results.put((waited, time.monotonic() - start))


def main() -> int:
    if len(sys.argv) not in (6, 7):
        print(__doc__, file=sys.stderr)
        return 2
    n, hold, work, seconds, db = int(sys.argv[1]), float(sys.argv[2]) / 1e6, float(sys.argv[3]) / 1e6, \
        float(sys.argv[4]), sys.argv[5]
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE IF NOT EXISTS t (v REAL)")
    con.commit()
    con.close()
    ops, results = mp.Value("L", 0), mp.Queue()
    start = time.monotonic()
    deadline = start + seconds
    procs = [mp.Process(target=worker, args=(db, hold, work, deadline, ops, results)) for _ in range(n)]
    for p in procs:
        p.start()

    def progress() -> None:
        while time.monotonic() < deadline:
            time.sleep(0.1)
            print(f"ops: {ops.value}", flush=True)
    threading.Thread(target=progress, daemon=True).start()
    done = [results.get() for _ in procs]          # the parent waits for its workers here, all along
    for p in procs:
        p.join()
    print(f"ops/s: {ops.value / (time.monotonic() - start):.1f}")
    clock = f"lock_wait_share: {sum(w for w, _ in done) / sum(r for _, r in done):.4f}\n"
    print(clock, end="")
    if len(sys.argv) == 7:
        with open(sys.argv[6], "w") as f:
            f.write(clock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
