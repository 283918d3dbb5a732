import subprocess, sys, time, statistics, numpy
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from lockscope import scratch
from lockscope.steadyload import SteadyLoad
PH = 1.5; ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
phases = ["alone", "bpf timer (tracked time)", "perf cpu-clock -a 49 Hz"]
got = {p: [] for p in phases}
with scratch.mounted("tmpfs") as m, SteadyLoad("PMUTEX", 2, m.mountpoint, ROUNDS * 3 * 6 + 60) as prog:
    for r in range(ROUNDS + 1):
        for p in phases if r < ROUNDS else ["alone"]:
            other = None
            if p.startswith("bpf"):
                other = subprocess.Popen(["./load", str(int(PH + 2))], stdout=subprocess.PIPE, text=True)
                other.stdout.readline()
            elif p.startswith("perf"):
                other = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-c", str(10**9 // 49), "-a", "-o", "/dev/null"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(0.5 if other else 0)
                t0 = time.monotonic_ns(); time.sleep(PH); t1 = time.monotonic_ns()
            finally:
                if other:
                    if p.startswith("bpf"):
                        print(other.communicate()[0].strip())
                    else:
                        other.terminate(); other.wait()
            got[p].append(((t0 + t1) / 2, prog.rate(t0, t1)))
            time.sleep(0.3)
alone = got["alone"]
for p, v in got.items():
    ratios = [rate / numpy.interp(t, [t for t, _ in alone], [r for _, r in alone]) for t, rate in v]
    print(f"| {p} | {statistics.median(ratios):.3f} | {', '.join(f'{x:.2f}' for x in ratios)} |")
