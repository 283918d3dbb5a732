"""End to end: on every built-in workload (2 workers, tmpfs and ext4), at
least 95% of the lock wait time is attributed to a verified or inferred name,
and `lockscope analyze` reports that share per point."""
import json

from conftest import lockscope

WORKLOADS = "DWOL,DWOM,MWCL,MWCM,MWUL,MWRL,MWRM,MRPL,MRPH,mmap"
MIN_NAMED = 0.95


def test_builtin_workloads_have_named_lock_waits(e2e, scratch, tmp_path):
    out = tmp_path / "res"
    p = lockscope("sweep", WORKLOADS, "--fs", "tmpfs,ext4", "--workers", "2", "--duration", "0.5",
                  "--warmup", "0.2", "--out", str(out), "--scratch", str(scratch), timeout=400)
    assert p.returncode == 0, p.stderr
    a = lockscope("analyze", str(out), "--json")
    assert a.returncode == 0, a.stderr
    exps = json.loads(a.stdout)["experiments"]
    # mmap has no file system: one point; every other workload on both
    assert {(e["workload"], e["fs"]) for e in exps} >= {(w, fs) for w in WORKLOADS.split(",") if w != "mmap"
                                                          for fs in ("tmpfs", "ext4")}
    low = {}
    for e in exps:
        [pt] = e["points"]
        share = pt["named_share"]
        assert share is not None, f"{e['workload']} on {e['fs']}: no lock wait recorded at 2 workers"
        if share < MIN_NAMED:
            low[f"{e['workload']}/{e['fs']}"] = round(share, 3)
    assert not low, f"named share below {MIN_NAMED:.0%}: {low}"
    text = lockscope("analyze", str(out))
    assert text.returncode == 0 and "named " in text.stdout
