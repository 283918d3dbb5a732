"""Measuring a point: runner.py runs it (built-in workloads through
workloads.py's driver, commands and applications of apps.toml/apps.py, a
server through server.py), window.py times its window with the probe
(probe.py, the loader's JSON lines through jsonlines.py), the CPU breakdown
(cpustat.py) and CPI (hwcounters.py); assemble.py makes its run record;
sweep.py runs many points; attach.py measures processes lockscope did not
start (found by targets.py); steadyload.py holds a workload's rate for the
benchmarks."""
