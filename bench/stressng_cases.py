#!/usr/bin/env python3
"""Rerun the stress-ng survey of issue 11 (bench/stressng_survey.md).

For every case of a case list (bench/stressng_cases.txt: `NAME | stress-ng options`) and
every file system, profile stress-ng with lockscope as a command:

    python3 -m lockscope run --fs FS --workers N --duration D --scratch S --out OUT/NAME-FS \
        --throughput-regex RE -- stress-ng OPTIONS --temp-path {dir} --timeout T --metrics-brief

then read `lockscope analyze OUT/NAME-FS --json` and the run record, and print a Markdown
table: top kernel lock, its tier, its share of worker time, the named share of the
experiment, the top 3 kernel locks and the top stack of the top lock. User-space locks
(component "user space") are left out of the kernel columns.

Run from the repository root (it calls `python3 -m lockscope`), as root:
    python3 bench/stressng_cases.py                       # every case, tmpfs and ext4
    python3 bench/stressng_cases.py --cases pipe,flock --fs tmpfs --md /tmp/t.md
An existing result directory is reused (analyzed again) unless --fresh is given.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# stress-ng --metrics-brief: "stress-ng: metrc: [pid] NAME  BOGO-OPS  REAL  USR  SYS  OPS/S(real) ..."
METRICS_RE = r"(?:metrc|info):\s+\[\d+\]\s+[a-z][\w-]*\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)"
NO_CONTENTION = 0.01   # kernel lock wait below 1% of worker time: "does not contend"


def read_cases(path):
    cases = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, _, opts = (s.strip() for s in line.partition("|"))
            cases.append((name, shlex.split(opts)))
    return cases


def run_case(name, opts, fs, a):
    out = os.path.join(a.out, f"{name}-{fs}")
    if a.fresh and os.path.exists(out):
        shutil.rmtree(out)
    if not os.path.isdir(os.path.join(out, "runs")) or not os.listdir(os.path.join(out, "runs")):
        if os.path.exists(out):
            shutil.rmtree(out)
        cmd = [sys.executable, "-m", "lockscope", "run", "--fs", fs, "--workers", str(a.workers),
               "--duration", str(a.duration), "--scratch", a.scratch, "--out", out,
               "--throughput-regex", METRICS_RE, "--",
               "stress-ng", *opts, "--temp-path", "{dir}", "--timeout", str(a.timeout), "--metrics-brief"]
        print("+", shlex.join(cmd), file=sys.stderr, flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return {"case": name, "fs": fs, "error": (p.stderr.strip() or p.stdout.strip())[-300:]}
    p = subprocess.run([sys.executable, "-m", "lockscope", "analyze", out, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        return {"case": name, "fs": fs, "error": "analyze: " + p.stderr.strip()[-300:]}
    exp = json.loads(p.stdout)["experiments"][0]
    point = exp["points"][0]
    runs = os.path.join(out, "runs")
    with open(os.path.join(runs, sorted(os.listdir(runs))[0])) as f:
        record = json.load(f)
    kernel = [lk for lk in record.get("locks") or [] if lk.get("component") != "user space"]
    kernel.sort(key=lambda lk: -lk["wait_ns"])
    total_lock_ns = sum(lk["wait_ns"] for lk in record.get("locks") or [])
    row = {"case": name, "fs": fs, "command": shlex.join(record["command"]),
           "ops_per_sec": point["ops_per_sec"], "unit": exp["unit"],
           "named_share": point["named_share"],
           "kernel_lock_share": sum(lk["wait_share"] for lk in kernel),
           "top": [{"name": lk["name"], "tier": lk["tier"], "kind": lk["kind"],
                    "share": lk["wait_share"], "of_lock_wait": lk["wait_ns"] / total_lock_ns if total_lock_ns else None,
                    "instances": lk.get("instances"), "rule": lk.get("rule"),
                    "stack": (lk.get("stacks") or [{}])[0].get("frames", [])}
                   for lk in kernel[:3]],
           "top_nonlock": [(w["name"], w["wait_share"]) for w in point["waits"] if w["type"] == "nonlock"][:2]}
    return row


def pct(x):
    return "–" if x is None else f"{100 * x:.1f}%"


def markdown(rows):
    lines = ["| stressor | fs | top kernel lock | tier | share (worker time) | of lock wait | named share | "
             "kernel lock wait | top 3 kernel locks (share, tier) | top stack of the top lock |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            err = " ".join(r["error"].split()).replace("|", "/")
            lines.append(f"| {r['case']} | {r['fs']} | error: {err} |||||||")
            continue
        t = r["top"][0] if r["top"] else None
        flag = " (no contention)" if r["kernel_lock_share"] < NO_CONTENTION else ""
        top3 = "; ".join(f"`{x['name']}` {pct(x['share'])} {x['tier']}" for x in r["top"])
        lines.append(" | ".join([
            f"| {r['case']}", r["fs"], f"`{t['name']}`" if t else "none", t["tier"] if t else "–",
            pct(t["share"]) if t else "–", pct(t["of_lock_wait"]) if t else "–", pct(r["named_share"]),
            pct(r["kernel_lock_share"]) + flag, top3 or "–",
            " <- ".join(t["stack"][:6]) if t else "–"]) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case-file", default=os.path.join(HERE, "stressng_cases.txt"))
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--fs", default="tmpfs,ext4")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duration", type=float, default=6, help="lockscope's window, longer than --timeout")
    ap.add_argument("--timeout", type=int, default=4, help="stress-ng's own run time (it prints its metrics)")
    ap.add_argument("--scratch", default="/tmp/lksc-stressng")
    ap.add_argument("--out", default="/tmp/stressng")
    ap.add_argument("--fresh", action="store_true", help="rerun cases whose results exist")
    ap.add_argument("--md", help="also write the table here")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    cases = read_cases(a.case_file)
    if a.cases:
        want = a.cases.split(",")
        cases = [c for c in cases if c[0] in want]
    rows = [run_case(name, opts, fs, a) for name, opts in cases for fs in a.fs.split(",")]
    md = markdown(rows)
    print(md)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
