#!/usr/bin/env python3
"""Does lockscope give the same answer twice? Reruns, N times quiet and N
times beside a CPU hog (`stress-ng --cpu 1`), each with lockscope's
defaults (3 interleaved repeats per point, sequential confirm within its
budget), and prints the agreement table (issue 41; the numbers are in
bench/README.md):

- the sweep's answer per experiment (MWRM, DWOM, mmap on tmpfs by
  default): collapse (decided, undecided or none) and the root cause, or
  for an undecided point the wait that grew most;
- a user mutex program's root-cause lock and its top holder (release
  site): tests/programs/holders.c, whose workers append under one mutex and
  one call in eight fdatasync() while holding it (ext4);
- `confirm`'s verdict on a kernel lock (MWRM's rename mutex, from the
  sweep above), on a serial user mutex (tests/programs/confirm.c, 2
  threads, 200 us in / 50 us out), and on a program whose most-waited lock
  is not the bottleneck (confirm.c, 4 threads on 2 CPUs, 10 us in / 200 us
  out: the CPUs limit).

    sudo python3 bench/stability.py [--reruns 5] [--out DIR] [--only sweep,holder,confirm]

A row agrees when every rerun named the same answer; a verdict "flips" when
one rerun said confirmed and another not confirmed (never allowed);
"decided" counts the reruns that were not inconclusive. Each rerun's raw
answer is kept in OUT/stability.json.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lockscope.analyzer.analyze import analyze, load_records  # noqa: E402

WORKLOADS = "MWRM,DWOM,mmap"


def lockscope(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "lockscope", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"lockscope {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p


@contextlib.contextmanager
def hog(on: bool):
    if not on:
        yield
        return
    if not shutil.which("stress-ng"):
        raise SystemExit("stress-ng not found (apt-get install stress-ng)")
    p = subprocess.Popen(["stress-ng", "--cpu", "1", "--quiet"])
    try:
        yield
    finally:
        p.terminate()
        p.wait()


def build(tmp: Path) -> dict[str, Path]:
    out = {}
    for name in ("holders", "confirm"):
        exe = tmp / name
        subprocess.run(["gcc", "-O2", "-g", "-pthread", "-o", str(exe), str(REPO / "tests" / "programs" / f"{name}.c")],
                       check=True)
        out[name] = exe
    return out


def answer(e) -> str:
    """An experiment's answer in a few words."""
    if e.collapse is None and e.undecided is None:
        return "no collapse"
    name = e.root_cause.wait.name if e.root_cause else "no wait named"
    return ("collapse: " if e.collapse else "undecided; grew most: ") + name


def sweep_answers(work: Path, fs: str) -> dict[str, str]:
    out = work / "sweep"
    lockscope("sweep", WORKLOADS, "--fs", fs, "--workers", "1,2", "--out", str(out))
    exps = analyze(load_records(out))
    for e in exps:                  # the efficiency at 2 workers the decision was made on
        est = next((p.est.get("efficiency") for p in e.points if p.workers == 2), None)
        WHY[e.title] = f"efficiency at 2 workers {est.fmt('.0%')}" if est else "no 2-worker point"
    return {e.title: answer(e) for e in exps}, out


def holder_answer(work: Path, exe: Path) -> dict[str, str]:
    out = work / "holders"
    lockscope("sweep", "--fs", "ext4", "--workers", "1,2", "--name", "ledger", "--throughput-regex",
              r"ops/s: ([0-9.]+)", "--out", str(out), "--", str(exe), "{n}", "3", "sync", "{dir}")
    e = analyze(load_records(out))[0]
    rc = e.root_cause
    h = rc.holder if rc else None
    return {"ledger: root cause": rc.wait.name if rc else answer(e),
            "ledger: top holder": f"{h.site} ({h.first_in} of {h.repeats})" if h else "none recorded"}


WHY: dict[str, str] = {}       # a rerun's confirm verdicts, with the reason given (kept in stability.json)


def confirm_verdicts(work: Path, sweep_dir: Path, exes: dict[str, Path]) -> dict[str, str]:
    out = {}
    # at 2 workers and on the rename mutex whether or not that rerun's sweep decided a collapse
    # there (a point that scales has no collapse point and no root cause)
    r = lockscope("confirm", str(sweep_dir), "--experiment", "MWRM-tmpfs", "--workers", "2", "--lock",
                  "sb->s_vfs_rename_mutex of tmpfs at <scratch>", "--json")
    c = json.loads(r.stdout)[0]
    out["confirm: MWRM rename mutex"] = c["verdict"]
    WHY["confirm: MWRM rename mutex"] = c["why"]
    for label, name, workers, hold, spin in (("serial C mutex", "cmutex", "1,2", "200", "50"),
                                            ("C mutex, CPUs limit", "cpubound", "2,4", "10", "200")):
        res = work / name
        lockscope("sweep", "--repeat", "1", "--workers", workers, "--duration", "8", "--force", "--name", name,
                  "--throughput-regex", r"ops/s: ([0-9.]+)", "--out", str(res), "--",
                  str(exes["confirm"]), "{n}", hold, spin, "3")
        r = lockscope("confirm", str(res), "--workers", workers.split(",")[-1], "--lock",
                      "pthread_mutex lock in confirm", "--ops-regex", "ops: ([0-9]+)", "--json", "--",
                      str(exes["confirm"]), "{n}", hold, spin, "{duration}")
        c = json.loads(r.stdout)[0]
        out[f"confirm: {label}"] = c["verdict"]
        WHY[f"confirm: {label}"] = c["why"]
    return out


def table(runs: list[dict]) -> str:
    rows = collections.OrderedDict()
    for run in runs:
        for item, ans in run["answers"].items():
            rows.setdefault(item, {"quiet": [], "hog": []})[run["condition"]].append(ans)
    lines = ["| item | quiet | beside `stress-ng --cpu 1` | the same lock or verdict | decided (quiet / hog) |",
             "|---|---|---|---|---|"]
    for item, by in rows.items():
        def counts(xs):
            return "; ".join(f"{a} ×{n}" for a, n in collections.Counter(xs).most_common()) or "-"
        alls = by["quiet"] + by["hog"]
        if item.startswith("confirm:"):
            flips = "confirmed" in alls and "not confirmed" in alls
            agree = "FLIPS" if flips else "no flip"
            dec = " / ".join(f"{sum(a != 'inconclusive' for a in by[c])} of {len(by[c])}" for c in ("quiet", "hog"))
        else:
            # the wait named, whether the collapse was decided or not
            named = [a.split(": ", 1)[-1] if a.startswith(("collapse: ", "undecided; grew most: ")) else a
                     for a in alls]
            top = collections.Counter(named).most_common(1)[0][1]
            agree = f"all {len(named)}" if top == len(named) else f"{top} of {len(named)}"
            dec = " / ".join(f"{sum(not a.startswith('undecided') for a in by[c])} of {len(by[c])}"
                             for c in ("quiet", "hog"))
        lines.append(f"| {item} | {counts(by['quiet'])} | {counts(by['hog'])} | {agree} | {dec} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reruns", type=int, default=5, help="reruns per condition (default 5)")
    ap.add_argument("--out", type=Path, default=Path("stability-results"))
    ap.add_argument("--only", default="sweep,holder,confirm", help="which parts (default all)")
    ap.add_argument("--conditions", default="quiet,hog", help="quiet, hog or both (default both)")
    ap.add_argument("--fs", default="tmpfs", help="the file system of the sweep (default tmpfs)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: lockscope loads BPF programs and mounts file systems")
    parts = set(a.only.split(","))
    a.out.mkdir(parents=True, exist_ok=True)
    state = a.out / "stability.json"
    runs = json.loads(state.read_text()) if state.exists() else []
    with tempfile.TemporaryDirectory(prefix="lockscope-stability-") as tmp:
        exes = build(Path(tmp))
        for i in range(a.reruns):
            for cond in a.conditions.split(","):        # interleaved: quiet, hog, quiet, hog, ...
                if any(r["condition"] == cond and r["rerun"] == i for r in runs):
                    continue                            # resumable: this rerun is in the state file
                work = Path(tmp) / f"{cond}-{i}"
                work.mkdir()
                t0 = time.monotonic()
                answers: dict[str, str] = {}
                with hog(cond == "hog"):
                    sweep_dir = None
                    if parts & {"sweep", "confirm"}:
                        got, sweep_dir = sweep_answers(work, a.fs)
                        answers |= got if "sweep" in parts else {}
                    if "holder" in parts:
                        answers |= holder_answer(work, exes["holders"])
                    if "confirm" in parts:
                        answers |= confirm_verdicts(work, sweep_dir, exes)
                runs.append({"condition": cond, "rerun": i, "seconds": round(time.monotonic() - t0),
                             "answers": answers, "why": dict(WHY)})
                WHY.clear()
                state.write_text(json.dumps(runs, indent=1))
                print(f"{cond} rerun {i + 1}/{a.reruns} ({runs[-1]['seconds']} s): "
                      + "; ".join(f"{k}: {v}" for k, v in answers.items()), flush=True)
                shutil.rmtree(work, ignore_errors=True)
    text = table(runs)
    (a.out / "stability.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
