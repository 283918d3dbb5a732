#!/usr/bin/env python3
"""Re-record the run records the unit tests read (real runs, trimmed small).

    sudo python3 tests/data/record.py [SWEEP ...]     (default: all of SWEEPS)

Runs two small sweeps with the lockscope of this source tree and keeps, per
point, the heaviest probe aggregates and only the stacks and objects they
refer to: enough to recompute names, curves and root causes offline.
"""
import json
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
}
KEEP = {"contention": 60, "offcpu": 30, "cpu_samples": 120}


def trim(rec: dict) -> dict:
    raw = rec["probe"]["raw"]
    for key, n in KEEP.items():
        sort_key = "count" if key == "cpu_samples" else "total_ns"
        raw[key] = sorted(raw.get(key, []), key=lambda e: -e[sort_key])[:n]
    used = {str(e["stack"]) for e in raw["contention"] + raw["offcpu"]}
    raw["stacks"] = {k: v for k, v in raw["stacks"].items() if k in used}
    used = {str(e["stack"]) for e in raw["cpu_samples"]}
    raw["sample_stacks"] = {k: v for k, v in raw.get("sample_stacks", {}).items() if k in used}
    scratch = raw.get("scratch") or ""
    files = raw["objects"].get("files", [])
    raw["objects"]["files"] = [f for f in files if scratch and f["path"].startswith(scratch)][:50]
    for lock in rec["locks"]:
        lock["stacks"] = lock["stacks"][:3]
    rec["locks"] = rec["locks"][:15]
    series = raw.get("series") or {}
    kept = {a for lock in rec["locks"] for a in lock["addresses"]}
    for snap in series.get("snapshots", []):
        snap["locks"] = [e for e in snap["locks"] if e[0] in kept]
    rec["offcpu"] = rec["offcpu"][:10]
    return rec


def main() -> int:
    chosen = sys.argv[1:] or list(SWEEPS)
    for name in chosen:
        workloads, fs, workers = SWEEPS[name]
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "lockscope", "sweep", workloads, "--fs", fs, "--workers", workers,
                            "--duration", "2", "--warmup", "0.5", "--out", tmp], cwd=REPO, check=True)
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
