"""THREADS CPU-bound Python threads for SECONDS: the GIL lets one run at a time.

    gil.py THREADS SECONDS [CLOCK_FILE]

At the end it prints "ops/s: X" and "gil_wait: F", the threads' own clock
of the share of their time they did not run: 1 - their CPU time
(time.thread_time, read by each thread) / their wall time. With a CPU for
each thread, that is their wait for the GIL (lockscope's test compares it
with the "GIL (CPython)" entry). With CLOCK_FILE, the figure is also
written there. The main thread only joins them: it does not contend for
the GIL meanwhile (a main thread waking every second to print waited up to
a second for the GIL on 2 CPUs, a wait the threads' clock does not see)."""
import sys
import threading
import time

n, secs = int(sys.argv[1]), float(sys.argv[2])
ops = [0] * n
cpu = [0.0] * n
t0 = time.monotonic()


def work(i: int) -> None:
    c0 = time.thread_time()
    end = t0 + secs
    while time.monotonic() < end:
        x = 0
        for k in range(1000):
            x += k
        ops[i] += 1
        cpu[i] = time.thread_time() - c0


threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = secs
print(f"ops/s: {sum(ops) / wall:.1f}", flush=True)
print(f"gil_wait: {1 - sum(cpu) / (n * wall):.3f}", flush=True)
if len(sys.argv) > 3:
    with open(sys.argv[3], "w") as f:
        f.write(f"{1 - sum(cpu) / (n * wall):.4f}\n")
