"""THREADS CPU-bound Python threads for SECONDS: the GIL lets one run at a time.

    gil.py THREADS SECONDS [CLOCK_FILE]

At the end it prints "ops/s: X" and "gil_wait: F", the threads' own clock
of the share of their time they did not run: 1 - their CPU time
(time.thread_time, read by each thread) / their wall time. With a CPU for
each thread, that is their wait for the GIL (lockscope's test compares it
with the "GIL (CPython)" entry). With CLOCK_FILE, the figure is written
there, then a second one: the share of their time they were asleep, 1 -
(CPU time + time runnable in the run queue) / wall time, from the kernel's
own count of each thread (/proc/thread-self/schedstat). On a machine whose
CPUs are busy with other work the two differ: a GIL holder preempted by
another program is not running but holds the GIL, no wait of it; a waiter
woken to take the GIL waits in the run queue until it runs. The GIL wait
lies between the two. The main thread only joins them: it does not contend
for the GIL meanwhile (a main thread waking every second to print waited up
to a second for the GIL on 2 CPUs, a wait the threads' clock does not see)."""
import sys
import threading
import time

n, secs = int(sys.argv[1]), float(sys.argv[2])
ops = [0] * n
cpu = [0.0] * n
queued = [0.0] * n
t0 = time.monotonic()


def run_queue_s() -> float:
    """This thread's time runnable but not running so far (schedstat's second field)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def work(i: int) -> None:
    c0, q0 = time.thread_time(), run_queue_s()
    end = t0 + secs
    while time.monotonic() < end:
        x = 0
        for k in range(1000):
            x += k
        ops[i] += 1
        cpu[i] = time.thread_time() - c0
    queued[i] = run_queue_s() - q0


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
        f.write(f"{1 - sum(cpu) / (n * wall):.4f} {1 - (sum(cpu) + sum(queued)) / (n * wall):.4f}\n")
