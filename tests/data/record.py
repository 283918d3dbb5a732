#!/usr/bin/env python3
"""Re-record the run records the unit tests read (real runs, trimmed small).

    sudo python3 tests/data/record.py [NAME...]   (default: all)

RECORD_SCRATCH=DIR passes --scratch DIR (where the file systems are mounted).

Runs the small sweeps (SWEEPS) and commands (COMMANDS) with the lockscope of
this source tree and keeps, per
point, the heaviest probe aggregates and only the stacks and objects they
refer to: enough to recompute names, curves and root causes offline.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SWEEPS = {
    # name: (workloads, fs, workers)
    "mwrm_mmap_tmpfs": ("MWRM,mmap", "tmpfs", "1,2"),
    "shared_tmpfs": ("DWOM,MWCM,MWCL", "tmpfs", "2"),
    # with the per-interval series (time view); tmpfs against ext4 for `compare`
    "series_mwrm": ("MWRM", "tmpfs,ext4", "1,2"),
    "ext4_journal": ("MWCL,MWUL", "ext4", "2"),
    # a user-space lock: futex waits named by ELF symbol, counted once (not again as off-CPU)
    "pmutex": ("PMUTEX", "tmpfs", "1,2"),
    # fsync of a private file: the flush bio's completion lock (submit_bio_wait)
    "dwsl_ext4": ("DWSL", "ext4", "2"),
    # applications (issue 9): roles, sleep kinds, wake-ups, attribution that adds up
    "rocksdb_tmpfs": ("rocksdb-fillrandom", "tmpfs", "1,2"),
    "dbench_ext4": ("dbench", "ext4", "1,2"),
    # issue 11: the sampled waiters: one i_rwsem shared by both workers (MWCM), private directories (MWCL)
    "sharing_tmpfs": ("MWCM,MWCL", "tmpfs", "2"),
    # a workload that slows down by itself (MWCM fills one directory): a 4-s window's time series
    "mwcm_drift": ("MWCM", "tmpfs", "2"),
    # issue 27: the owner of a shared file's i_rwsem as waits begin, with more workers than
    # CPUs here (2): often preempted while holding it (lock-holder preemption)
    "owners_ext4": ("DWOM", "ext4", "4"),
    # issue 27: PostgreSQL's locks by their holders (USDT-named waits, their releasers), 4 clients
    "pgbench_ext4": ("pgbench", "ext4", "4"),
    # issue 30: Exim (FxMark's third application), 4 clients: its spool directories' i_rwsem,
    # the rename mutex of maildir deliveries, more processes at once than clients
    "exim_ext4": ("exim", "ext4", "4"),
    # issue 41: every point run 3 times, interleaved (sweep --repeat 3): intervals, the root cause by repeat
    "repeats_tmpfs": ("MWRM,mmap", "tmpfs", "1,2"),
}
# name: arguments of `lockscope run` (a built-in workload), with OPTIONS or --duration 2 --warmup 0.5
RUNS = {
    # issue 43: a cost budget below what the probe takes on MWRM (~4% of the CPUs here): the steps shed,
    # each period's cost
    "budget_mwrm": ["MWRM", "--fs", "tmpfs", "--workers", "2", "--max-overhead", "1"],
}
# the run options of a job, where they are not --duration 2 --warmup 0.5 --repeat 1
OPTIONS = {"mwcm_drift": ["--duration", "4", "--warmup", "1", "--repeat", "1"],
           # a process per connection and per message: every one of them is a task of the record
           "exim_ext4": ["--duration", "1", "--warmup", "0.5", "--repeat", "1"],
           "repeats_tmpfs": ["--duration", "1.5", "--warmup", "0.5", "--repeat", "3"],
           "budget_mwrm": ["--duration", "4", "--warmup", "0.5"]}
# name: (fs, workers, command): profiled commands (`lockscope run -- CMD`)
COMMANDS = {
    # small files written with fsync: jbd2 commits, j_state_lock
    "ext4_fsync": ("ext4", "2", ["sh", "-c", "for i in $(seq 1 {n}); do (while :; do dd if=/dev/zero "
                                 "of={dir}/f$i bs=4k count=4 conv=fsync 2>/dev/null; done) & done; wait"]),
    # issue 28: Debian's stripped python3, a thread in crunch() holding the GIL until asked to drop it
    # and one in nibble() dropping it every millisecond: the GIL's holders by their Python frames
    "gil_holders": ("tmpfs", "2", ["/usr/bin/python3", str(REPO / "tests" / "programs" / "gil_holders.py"), "3", "1"]),
}
# name: (workers, command, throughput regex): sweeps of a program of tests/programs
# (built here with gcc -O2, no frame pointers, as Debian builds)
PROGRAM_SWEEPS = {
    # main joins N workers on one global mutex, two pool threads idle on a condvar
    "pool": ("1,2", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)"),
    # issue 11: workers flock() files of their own while /proc/locks is read: the global file_rwsem
    "flocker": ("2", ["{program}", "{n}", "2", "{dir}"], "ops/s: ([0-9.]+)"),
    # issue 10: the same pool, --system-wide: every task traced; the work is pool's threads, never a
    # kernel thread or another program (name: program, then extra options of the sweep)
    "pool_systemwide": ("1,2", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)", "pool", ["--system-wide"]),
    # issue 29: workers send to and receive from one POSIX message queue: its
    # mqueue_inode_info->lock, named through the queue's descriptor (fileobjects.toml [fs.mqueue])
    "mqueue": ("2", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)"),
    # issue 29: workers raise and lower one SysV semaphore: sem_array's sems[0].lock, in an object of a
    # generic kmalloc cache typed by the functions its waits pass through (locks.toml [slab_site])
    "sysvsem": ("2", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)"),
    # issue 29: workers send to and receive from one SysV message queue: msg_queue's q_perm.lock
    # (a kmalloc object typed by do_msgsnd/do_msgrcv)
    "sysvmsg": ("2", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)"),
    # issue 29: 4 workers attach and detach one SysV shared memory segment: shmid_kernel's
    # shm_perm.lock, and the rwsem of the IPC namespace's shm ids (ids[2].rwsem of init_ipc_ns, a
    # static object reached through task->nsproxy->ipc_ns)
    "sysvshm": ("4", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)"),
    # issue 29: statfs of the working directory, a tmpfs outside the scratch fs (/dev/shm), no file
    # open: shmem_sb_info->used_blocks.lock, the percpu_counter reached through the task's cwd
    "statfs_cwd": ("2", ["sh", "-c", "cd /dev/shm && exec {program} statfs {n} ."], "ops/s: ([0-9.]+)",
                   "objstress", ["--duration", "2"]),
    # issue 29: workers vfork, exit and wait in a loop: the global tasklist_lock, css_set_lock and
    # pidmap_lock, taken directly by copy_process, cgroup_exit, alloc_pid...: named from the kernel's text
    "forkstorm": ("2", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)"),
    # issue 29: workers set the MTU of the loopback of a network namespace each: the global
    # rtnl_mutex, taken through rtnl_lock(), named from the kernel's text (no data symbols here)
    "netdev": ("2", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)"),
    # issue 27: workers append under one mutex, one call in eight fdatasync()s while holding it: the
    # holders (flush_journal) sleep in the ext4 journal
    "holders_sync": ("1,2", ["{program}", "{n}", "2", "sync", "{dir}"], "ops/s: ([0-9.]+)", "holders",
                     ["--fs", "ext4"]),
    # issue 41: 4 threads signalling each other on 2 CPUs, beside `stress-ng --cpu 1` (BESIDE_A_HOG):
    # preempted by the time-sharing and by the machine's other work, their lock sighand->siglock
    "selfsig_hog": ("4", ["{program}", "{n}", "2"], "ops/s: ([0-9.]+)", "selfsig", []),
}
# jobs recorded beside `stress-ng --cpu 1`: one CPU's worth of the machine's other work
BESIDE_A_HOG = {"selfsig_hog"}
# name: runs of (fs, mode): a program of tests/programs run once per mode,
# `lockscope run --fs FS -- PROGRAM MODE {n} {dir}` for 2 s, all in one directory
PROGRAM_RUNS = {
    # issue 11: the locks of the objects behind open files, named by struct and BTF member
    "objstress": [("tmpfs", "pipe"), ("ext4", "fcntl"), ("ext4", "statfs")],
}
# name: (workers, arguments): a C++ program of tests/programs (g++ -O2 -g), `lockscope run` for 2 s
CXX_RUNS = {
    # issue 25: a std::mutex member of a heap object; the futex hash bucket lock and the runqueue
    # locks its futex calls spin on are part of its wait (recorded beside `stress-ng --cpu N` where
    # RECORD_CPU_HOG=1, as on the busy machine where the hash bucket lock had ranked first)
    "bank_cpp": ("2", ["{program}", "{n}"]),
}
# issue 44: tests/programs/filelock.c per mode (2 workers on one write lock of one file: POSIX between
# processes, OFD and flock between threads), told the window ({duration}), with the program's own
# clock of its blocking lock calls kept beside the records (filelocks/clock.json)
FILELOCK_MODES = {"posix": "0", "ofd": "1", "flock": "1"}
KEEP = {"contention": 60, "offcpu": 30, "cpu_samples": 120}
MAX_TASKS = 1000         # the per-thread times kept (a fork storm makes thousands)
# records with per-thread data (schema /2) keep what the roles are computed
# from: every thread, and more of the per-thread off-CPU and futex aggregates
KEEP_ROLES = {"offcpu": 200, "futex": 80, "wakeups": 80}


def trim(rec: dict) -> dict:
    raw = rec["probe"]["raw"]
    roles = "tasks" in raw
    for key, n in (KEEP | KEEP_ROLES if roles else KEEP).items():
        sort_key = {"cpu_samples": "count", "wakeups": "wait_ns"}.get(key, "total_ns")
        if key in raw:
            raw[key] = sorted(raw[key], key=lambda e: -e[sort_key])[:n]
    if raw.get("futex") is not None:
        used_f = {e.get("user_stack") or f"{e['tgid']}:{e['stack']}" for e in raw["futex"]}
        raw["user_stacks"] = {k: v for k, v in (raw.get("user_stacks") or {}).items() if k in used_f}
        used_a = {f"{e['tgid']}:{e['uaddr']}" for e in raw["futex"]}
        raw["futex_addresses"] = {k: v for k, v in (raw.get("futex_addresses") or {}).items() if k in used_a}
    if raw.get("futex_kernel") is not None:     # the breakdown of kept contention aggregates only
        kept_keys = {(e["lock"], e["flags"], e["stack"]) for e in raw["contention"]}
        raw["futex_kernel"] = [e for e in raw["futex_kernel"] if (e["lock"], e["flags"], e["stack"]) in kept_keys]
    if raw.get("holds") is not None:            # the heaviest releases, what their releasers did, their stacks
        raw["holds"] = sorted(raw["holds"], key=lambda e: -e["wait_ns"])[:40]
        kept_h = {(e["lock"], e["tgid"], e["stack"]) for e in raw["holds"]}
        raw["hold_activity"] = [a for a in raw.get("hold_activity") or []
                                if (a["lock"], a["tgid"], a["stack"]) in kept_h]
        used_h = {e.get("site_stack") for e in raw["holds"]}
        raw["hold_stacks"] = {k: v for k, v in (raw.get("hold_stacks") or {}).items() if k in used_h}
    used = {str(e["stack"]) for e in raw["contention"] + raw["offcpu"]} | \
        {str(a["act_stack"]) for a in raw.get("hold_activity") or []}
    raw["stacks"] = {k: v for k, v in raw["stacks"].items() if k in used}
    used = {str(e["stack"]) for e in raw["cpu_samples"]}
    raw["sample_stacks"] = {k: v for k, v in raw.get("sample_stacks", {}).items() if k in used}
    scratch = raw.get("scratch") or ""
    files = raw["objects"].get("files", [])
    workload = {t["tgid"] for t in raw["objects"].get("tasks", [])}
    # the test paths, and the workload's files with an object behind them
    # (pipes, sockets, eventpolls...: what raw.objlocks names)
    raw["objects"]["files"] = [f for f in files if (scratch and f["path"].startswith(scratch))
                               or (f["tgid"] in workload and "private_data" in f)][:50]
    kept = {e["lock"] for e in raw["contention"]}
    if len(raw["objects"].get("tasks", [])) > 50:
        # system-wide: every process's task object; keep those behind a kept lock, and the workers'
        workers = {p for r in rec.get("roles", []) if r.get("worker") for p in r.get("processes", [])}
        raw["objects"]["tasks"] = [t for t in raw["objects"]["tasks"] if t.get("comm") in workers
                                   or any(v in kept for v in t.values() if isinstance(v, str))]
    if len(raw.get("tasks") or []) > MAX_TASKS:
        # a fork storm: thousands of short-lived children; the record's roles are computed already
        busy = lambda t: t.get("on_cpu_ns", 0) + t.get("preempted_ns", 0) + t.get("sleep_ns", 0)
        raw["tasks"] = sorted(raw["tasks"], key=lambda t: -busy(t))[:MAX_TASKS]
        tids = {t["tid"] for t in raw["tasks"]}
        raw["waiters"] = [e for e in raw.get("waiters") or [] if e["tid"] in tids]
    if raw.get("waiters") is not None:
        raw["waiters"] = [e for e in raw["waiters"] if e["lock"] in kept]
    if raw.get("owners") is not None:
        raw["owners"] = [e for e in raw["owners"] if e["lock"] in kept]
    if "slab" in raw:
        raw["slab"]["entries"] = [e for e in raw["slab"].get("entries", []) if e["addr"] in kept]
    if "objlocks" in raw:
        raw["objlocks"]["entries"] = [e for e in raw["objlocks"].get("entries", []) if e["addr"] in kept]
    for lock in rec["locks"]:
        lock["stacks"] = lock["stacks"][:3]
    rec["locks"] = rec["locks"][:15]
    series = raw.get("series") or {}
    kept = {a for lock in rec["locks"] for a in lock["addresses"]}
    for snap in series.get("snapshots", []):
        snap["locks"] = [e for e in snap["locks"] if e[0] in kept]
    rec["offcpu"] = rec["offcpu"][:40 if roles else 10]   # with roles, the attribution reads them all
    return rec


def record_cxx(name: str, workers: str, args: list[str], programs: str) -> None:
    exe = Path(programs, name)
    subprocess.run(["g++", "-O2", "-g", "-pthread", "-o", str(exe), str(REPO / "tests" / "programs" /
                                                                     f"{name.split('_')[0]}.cpp")], check=True)
    dest = HERE / name / "runs"
    shutil.rmtree(dest.parent, ignore_errors=True)
    dest.mkdir(parents=True)
    hog = subprocess.Popen(["stress-ng", "--cpu", str(os.cpu_count()), "--quiet"]) \
        if os.environ.get("RECORD_CPU_HOG") else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            opts = ["--duration", "2", "--warmup", "0.5", "--out", tmp] + (
                ["--scratch", os.environ["RECORD_SCRATCH"]] if os.environ.get("RECORD_SCRATCH") else [])
            subprocess.run([sys.executable, "-m", "lockscope", "run", "--workers", workers, "--name", name.replace("_", "-"), *opts,
                            "--", *[a.replace("{program}", str(exe)) for a in args]], cwd=REPO, check=True)
            for f in sorted(Path(tmp, "runs").glob("*.json")):
                rec = trim(json.loads(f.read_text()))
                (dest / f.name).write_text(json.dumps(rec, separators=(",", ":")) + "\n")
                print(f"{name}/runs/{f.name}: {(dest / f.name).stat().st_size // 1024} KiB")
    finally:
        if hog:
            hog.terminate()
            hog.wait()


def _keep(runs: Path, dest: Path, name: str) -> None:
    for f in sorted(runs.glob("*.json")):
        rec = trim(json.loads(f.read_text()))
        (dest / f.name).write_text(json.dumps(rec, separators=(",", ":")) + "\n")
        print(f"{name}/runs/{f.name}: {(dest / f.name).stat().st_size // 1024} KiB")


def _build(programs: str, name: str, *libs: str) -> Path:
    """tests/programs/NAME.c built into the directory `programs`."""
    exe = Path(programs, name)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(REPO / "tests" / "programs" / f"{name}.c"), *libs],
                   check=True)
    return exe


def _share(text: str) -> dict:
    """A clock file of "lock_wait_share: W ..." (filelock.c, sqlwriters.py)."""
    return {"lock_wait_share": float(text.split()[1])}


def _filelock_run(name: str, fs: str, cmd: list[str], read_clock) -> dict:
    """One file-lock case: `lockscope run` of cmd (2 workers, 2 s; "{clock}" in it: a clock file in a
    temporary directory), its record kept under filelocks/runs; the program's clock, read_clock(text)."""
    with tempfile.TemporaryDirectory() as tmp:
        clock = Path(tmp, "clock")
        opts = ["--duration", "2", "--out", str(Path(tmp, "out"))] + (
            ["--scratch", os.environ["RECORD_SCRATCH"]] if os.environ.get("RECORD_SCRATCH") else [])
        subprocess.run([sys.executable, "-m", "lockscope", "run", "--workers", "2", "--fs", fs, "--name", name,
                        "--throughput-regex", r"ops/s: ([0-9.]+)", *opts, "--",
                        *[str(clock) if c == "{clock}" else c for c in cmd]], cwd=REPO, check=True)
        _keep(Path(tmp, "out", "runs"), HERE / "filelocks" / "runs", "filelocks")
        return read_clock(clock.read_text())


def _merge_clocks(clocks: dict) -> None:
    """filelocks/clock.json with `clocks` added (or replaced)."""
    path = HERE / "filelocks" / "clock.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps(old | clocks, indent=1) + "\n")


def record_filelocks(programs: str) -> None:
    """Every file-lock case, filelocks/ made anew."""
    exe = str(_build(programs, "filelock"))
    shutil.rmtree(HERE / "filelocks", ignore_errors=True)
    (HERE / "filelocks" / "runs").mkdir(parents=True)
    clocks = {mode: _filelock_run(mode, "tmpfs", ["env", f"FILELOCK_THREADS={threads}", exe, mode, "{n}", "200",
                                                  "50", "{duration}", "{dir}/lockfile", "{clock}"], _share)
              for mode, threads in FILELOCK_MODES.items()}
    # SQLite writers started by multiprocessing (Python's sqlite3): busy retries on the database lock,
    # the parent blocked on the Queue of results all along
    clocks["sqlite"] = _filelock_run("sqlite", "tmpfs", [
        "/usr/bin/python3", str(REPO / "tests" / "programs" / "sqlwriters.py"), "{n}", "500", "200", "{duration}",
        "{dir}/app.db", "{clock}"], _share)
    # SQLite writers as threads of one process (Python's sqlite3): SQLite's in-memory lock, busy sleeps
    # told from the program's own sleeps by their user stacks
    clocks["sqlite-threads"] = _filelock_run("sqlite-threads", "tmpfs", [
        "/usr/bin/python3", str(REPO / "tests" / "programs" / "sqlthreads.py"), "{n}", "{duration}", "{dir}/app.db",
        "{clock}"], json.loads)
    _merge_clocks(clocks)


def record_sqlbusy(programs: str) -> None:
    """tests/programs/sqlbusy.c, writers in 2 processes: SQLite's busy waits at the program's own
    busy handler's clock, and the holder's release site (its COMMIT, from its writer loop), beside
    the other file-lock records (clock.json merged)."""
    exe = str(_build(programs, "sqlbusy", "-lsqlite3"))
    _merge_clocks({"sqlbusy": _filelock_run("sqlbusy", "tmpfs", [
        exe, "{n}", "300", "{duration}", "{dir}/app.db", "{clock}", "procs"], json.loads)})


def record_filelock_sync(programs: str) -> None:
    """tests/programs/filelock.c, posix, each worker holding the lock across a write and fdatasync of
    the file on ext4: what the holders did while holding (block I/O, writeback), the chain's cause,
    beside the other file-lock records (clock.json merged)."""
    exe = str(_build(programs, "filelock"))
    _merge_clocks({"posix-sync": _filelock_run("posix-sync", "ext4", [
        "env", "FILELOCK_HOLD=sync", exe, "posix", "{n}", "200", "50", "{duration}", "{dir}/lockfile", "{clock}"],
        _share)})


def main() -> int:
    jobs = {name: ["sweep", workloads, "--fs", fs, "--workers", workers]
            for name, (workloads, fs, workers) in SWEEPS.items()}
    jobs.update({name: ["run", "--fs", fs, "--workers", workers, "--name", name.replace("_", "-"), "--", *cmd]
                 for name, (fs, workers, cmd) in COMMANDS.items()})
    jobs.update({name: ["run", *args] for name, args in RUNS.items()})
    only = set(sys.argv[1:])
    programs = tempfile.mkdtemp()
    for name, (workers, cmd, regex, *more) in PROGRAM_SWEEPS.items():
        program, extra = more if more else (name, [])
        exe = _build(programs, program)
        fs = ["--fs", "tmpfs"] if "{dir}" in cmd and "--fs" not in extra else []
        jobs[name] = ["sweep", "--workers", workers, *fs, "--name", program, "--throughput-regex", regex, *extra,
                      "--", *[c.replace("{program}", str(exe)) for c in cmd]]
    if not only or "filelocks" in only:
        record_filelocks(programs)
    if not only or "sqlbusy" in only:
        record_sqlbusy(programs)
    if not only or "filelock_sync" in only:
        record_filelock_sync(programs)
    for name, (workers, args) in CXX_RUNS.items():
        if not only or name in only:
            record_cxx(name, workers, args, programs)
    for name, runs in PROGRAM_RUNS.items():
        if only and name not in only:
            continue
        exe = _build(programs, name)
        jobs_of = [(mode, ["run", "--fs", fs, "--workers", "2", "--duration", "2", "--name", mode,
                           "--", str(exe), mode, "{n}", "{dir}"]) for fs, mode in runs]
        dest = HERE / name / "runs"
        shutil.rmtree(dest.parent, ignore_errors=True)
        dest.mkdir(parents=True)
        for mode, args in jobs_of:
            with tempfile.TemporaryDirectory() as tmp:
                i = args.index("--")
                opts = ["--out", tmp] + (["--scratch", os.environ["RECORD_SCRATCH"]]
                                         if os.environ.get("RECORD_SCRATCH") else [])
                subprocess.run([sys.executable, "-m", "lockscope", *args[:i], *opts, *args[i:]], cwd=REPO, check=True)
                for f in sorted(Path(tmp, "runs").glob("*.json")):
                    rec = trim(json.loads(f.read_text()))
                    (dest / f.name).write_text(json.dumps(rec, separators=(",", ":")) + "\n")
                    print(f"{name}/runs/{f.name}: {(dest / f.name).stat().st_size // 1024} KiB")
    for name, args in jobs.items():
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            # a program of tests/programs runs for its own time (it prints its
            # throughput at the end)
            opts = (["--out", tmp] + (["--repeat", "1"] if args[0] == "sweep" else []) if name in PROGRAM_SWEEPS else
                    OPTIONS.get(name, ["--duration", "2", "--warmup", "0.5"] +
                                (["--repeat", "1"] if args[0] == "sweep" else [])) + ["--out", tmp])
            if os.environ.get("RECORD_SCRATCH"):
                opts += ["--scratch", os.environ["RECORD_SCRATCH"]]
            i = args.index("--") if "--" in args else len(args)
            args = args[:i] + opts + args[i:]
            hog = subprocess.Popen(["stress-ng", "--cpu", "1", "--quiet"]) if name in BESIDE_A_HOG else None
            try:
                subprocess.run([sys.executable, "-m", "lockscope", *args], cwd=REPO, check=True)
            finally:
                if hog:
                    hog.terminate()
                    hog.wait()
            dest = HERE / name / "runs"
            shutil.rmtree(dest.parent, ignore_errors=True)
            dest.mkdir(parents=True)
            for f in sorted(Path(tmp, "runs").glob("*.json")):
                rec = trim(json.loads(f.read_text()))
                (dest / f.name).write_text(json.dumps(rec, separators=(",", ":")) + "\n")
                print(f"{name}/runs/{f.name}: {(dest / f.name).stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
