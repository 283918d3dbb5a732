"""Python threads running two functions share the GIL: one thread runs
`crunch`, which keeps the GIL until asked to drop it (every 5 ms), NIBBLERS
run `nibble`, which gives it up every millisecond (time.sleep(0)). Every
thread is always running or waiting for the GIL, so each holder keeps the
same number of threads waiting.

    gil_holders.py SECONDS NIBBLERS [CLOCK_FILE]

A CPU-bound Python thread runs only while it holds the GIL, so each
thread's CPU time (time.thread_time, read by the thread itself) is its time
holding it. At the end the program prints "ops/s: X" and, per function,
its share of the threads' CPU time: the truth for the GIL's holders by
Python function, and under "wait" its share of the threads' time asleep
(wall less CPU and run-queue time, schedstat's): the truth for where the
GIL's waiters were (lockscope's test compares them). With CLOCK_FILE both
are also written there as JSON."""
import json
import sys
import threading
import time

secs, nibblers = float(sys.argv[1]), int(sys.argv[2])
t0 = time.monotonic()
ops = [0]
cpu: dict[str, float] = {"crunch": 0.0, "nibble": 0.0}
waited: dict[str, float] = {"crunch": 0.0, "nibble": 0.0}
lock = threading.Lock()


def spin() -> None:
    x = 0
    for k in range(1000):
        x += k


def crunch() -> None:
    c0, w0, q0 = time.thread_time(), time.monotonic(), run_queue_s()
    while time.monotonic() < t0 + secs:
        spin()
        ops[0] += 1
    with lock:
        cpu["crunch"] += time.thread_time() - c0
        waited["crunch"] += time.monotonic() - w0 - (time.thread_time() - c0) - (run_queue_s() - q0)


def nibble() -> None:
    c0, w0, q0 = time.thread_time(), time.monotonic(), run_queue_s()
    while time.monotonic() < t0 + secs:
        start = time.monotonic()
        while time.monotonic() - start < 0.001:
            x = 0
            for k in range(1000):
                x += k
            ops[0] += 1
        time.sleep(0)
    with lock:
        cpu["nibble"] += time.thread_time() - c0
        waited["nibble"] += time.monotonic() - w0 - (time.thread_time() - c0) - (run_queue_s() - q0)


def run_queue_s() -> float:
    """This thread's time runnable but not running so far (the second field of
    /proc/thread-self/schedstat): a holder preempted by another program waits
    for no GIL, and is taken out of the threads' waiting."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


threads = [threading.Thread(target=f) for f in [crunch] + [nibble] * nibblers]
for t in threads:
    t.start()
for t in threads:
    t.join()
total = sum(cpu.values()) or 1.0
shares: dict = {f: round(v / total, 4) for f, v in cpu.items()}
shares["wait"] = {f: round(v / (sum(waited.values()) or 1.0), 4) for f, v in waited.items()}
print(f"ops/s: {ops[0] / secs:.1f}", flush=True)
print("gil_cpu_share:", json.dumps(shares), flush=True)
if len(sys.argv) > 3:
    with open(sys.argv[3], "w") as f:
        json.dump(shares, f)
