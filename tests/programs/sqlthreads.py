"""SQLite writers as threads of one process, with their own clock, for
lockscope's file-lock tests (issue 44).

    python3 sqlthreads.py N SECONDS DB CLOCK_FILE

N threads, each with its own connection (Python's sqlite3, its default
busy handler: sqlite3_busy_timeout), loop: BEGIN IMMEDIATE (the database's
write lock), insert a row, sleep 300 us holding it (time.sleep: a sleep of
the program's own, not a lock wait), COMMIT, sleep 100 us. The threads
share SQLite's in-memory lock of the file (one process): a writer that
finds it held gets SQLITE_BUSY without a system call and sleeps in SQLite's
busy handler. Prints "ops/s: X"; CLOCK_FILE gets {"begin_s": S,
"begin_share": W}: the writers' time inside BEGIN IMMEDIATE (the program's
own clock of its database-lock waits), in seconds and over their running
time."""
import json
import sqlite3
import sys
import threading
import time


def main() -> None:
    n, seconds, db, clock = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE IF NOT EXISTS t (v)")
    con.commit()
    con.close()
    totals = {"ops": 0, "begin": 0.0, "ran": 0.0}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def writer() -> None:
        c = sqlite3.connect(db, timeout=30, isolation_level=None)
        start, begin, ops = time.monotonic(), 0.0, 0
        while time.monotonic() < deadline:
            t = time.monotonic()
            c.execute("BEGIN IMMEDIATE")
            begin += time.monotonic() - t
            c.execute("INSERT INTO t VALUES (1)")
            time.sleep(0.0003)
            c.execute("COMMIT")
            ops += 1
            time.sleep(0.0001)
        with lock:
            totals["ops"] += ops
            totals["begin"] += begin
            totals["ran"] += time.monotonic() - start

    threads = [threading.Thread(target=writer) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"ops/s: {totals['ops'] / seconds:.1f}", flush=True)
    with open(clock, "w") as f:
        json.dump({"begin_s": round(totals["begin"], 4), "begin_share": round(totals["begin"] / totals["ran"], 4)}, f)


if __name__ == "__main__":
    main()
