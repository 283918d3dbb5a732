"""The probe's own effect on a point (analyzer/probeeffect.py): the window's
rate over the reference rate the driver measured in the warm-up before the
probes recorded, and the warning when the probes slowed the point."""
import dataclasses
import json
import re
import shutil

import pytest

from conftest import DATA, load, lockscope
from lockscope import textout
from lockscope.model import record
from lockscope.analyzer import probeeffect
from lockscope.model.jsondata import to_dict

# MRPH at 12 workers on a quiet 16-CPU machine (kernel 6.18, tmpfs):
# 2,623,676 ops/s with --no-probe, 429,154 with the probes
MRPH_RATIO = 429_154 / 2_623_676


def with_reference(rec, ratio, seconds=0.5, ops=None):
    """A real record whose reference says the window ran at `ratio` of it."""
    ref = rec.ops_per_sec / ratio
    return dataclasses.replace(rec, reference_s=seconds, reference_ops=int(ref * seconds) if ops is None else ops,
                               reference_ops_per_sec=ref, probe_effect=ratio)


def test_old_records_have_no_reference_and_no_warning():
    rec = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")       # recorded before the reference existed
    assert rec.probe.attached and rec.reference_ops_per_sec is None and rec.probe_effect is None
    assert not probeeffect.flagged(rec) and probeeffect.warning(rec) is None
    # the new fields are left out while unset: the old record round-trips unchanged
    raw = json.loads((DATA / "mwrm_mmap_tmpfs/runs/MWRM-tmpfs-w2.json").read_text())
    assert to_dict(rec) == raw


def test_warning_below_the_threshold_only():
    rec = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    slowed = with_reference(rec, MRPH_RATIO)
    w = probeeffect.warning(slowed)
    assert w.startswith("the probes slowed this point to 16% of its unrecorded rate (")
    assert f"{slowed.reference_ops_per_sec:,.0f} -> {rec.ops_per_sec:,.0f} ops/s" in w
    assert "contention_end" in w and "--no-probe" in w
    assert probeeffect.warning(with_reference(rec, probeeffect.THRESHOLD - 0.01))
    assert probeeffect.warning(with_reference(rec, probeeffect.THRESHOLD + 0.01)) is None
    assert probeeffect.warning(with_reference(rec, 1.3)) is None          # faster than the reference: noise


def test_no_warning_from_a_short_reference_or_without_probes():
    rec = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    assert probeeffect.warning(with_reference(rec, MRPH_RATIO, seconds=0.1)) is None     # --warmup 0.2
    assert probeeffect.warning(with_reference(rec, MRPH_RATIO, ops=20)) is None          # too few ops
    unprobed = dataclasses.replace(with_reference(rec, MRPH_RATIO),
                                   probe=dataclasses.replace(rec.probe, attached=False))
    assert probeeffect.warning(unprobed) is None                # --no-probe: the ratio is warm-up noise
    quiet = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w1")                  # 1 worker: no lock waits to speak of
    assert probeeffect.lock_share(quiet) < probeeffect.MIN_LOCK_SHARE <= probeeffect.lock_share(rec)
    assert probeeffect.warning(with_reference(quiet, MRPH_RATIO)) is None   # slowed, but not by lock waits


def test_ratio():
    assert probeeffect.ratio(50.0, 100.0) == 0.5
    assert probeeffect.ratio(None, 100.0) is None and probeeffect.ratio(50.0, 0.0) is None


def test_analyze_warns_at_a_slowed_point_and_the_diagnosis_says_so(tmp_path):
    """Real records (MWRM at 1 and 2 workers, probes on); the 2-worker one is
    given a reference so that its window ran at MRPH's measured ratio (the
    probed over the --no-probe rate of MRPH at 12 workers, above), as a run
    where the probes slowed the point records it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(DATA / "mwrm_mmap_tmpfs/runs/MWRM-tmpfs-w1.json", runs)
    record.save(with_reference(load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2"), MRPH_RATIO), runs / "MWRM-tmpfs-w2.json")
    p = lockscope("analyze", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "warning: the probes slowed this point to 16% of its unrecorded rate" in p.stdout
    diagnosis = p.stdout.splitlines()[p.stdout.splitlines().index("MWRM on tmpfs") + 1] \
        if "MWRM on tmpfs" in p.stdout.splitlines() else p.stdout
    assert "but the probes slowed that point to 16% of its unrecorded rate" in diagnosis
    data = json.loads(lockscope("analyze", "--json", str(tmp_path)).stdout)
    point = next(pt for e in data["experiments"] for pt in e["points"] if pt["workers"] == 2)
    assert any(w.startswith("the probes slowed this point to 16%") for w in point["warnings"])


def test_a_workload_that_slows_by_itself_is_not_blamed_on_the_probes():
    """MWCM filling one directory, 4 s, probed (a real run): its rate fell from
    314,592 to 169,956 ops/s during the window, and the window ran at 70% of
    the reference; its first interval ran at 96% of it. The probes did not do
    that (--no-probe, the same fall: 76%), so no warning; a first interval as
    slow as the rest is flagged."""
    rec = load("mwcm_drift/MWCM-tmpfs-w2")
    assert rec.timeseries[-1].ops_per_sec < 0.6 * rec.timeseries[0].ops_per_sec
    assert probeeffect.start_effect(rec) == pytest.approx(rec.timeseries[0].ops_per_sec / rec.reference_ops_per_sec)
    assert probeeffect.lock_share(rec) >= probeeffect.MIN_LOCK_SHARE
    drifted = with_reference(rec, 0.65)
    assert probeeffect.start_effect(drifted) > probeeffect.THRESHOLD
    assert probeeffect.warning(drifted) is None
    # the whole window at 65%, the first interval too: flagged
    flat = dataclasses.replace(drifted, timeseries=[dataclasses.replace(i, ops_per_sec=rec.ops_per_sec)
                                                    for i in rec.timeseries])
    assert probeeffect.warning(flat).startswith("the probes slowed this point to 65%")
    # lockscope run's text says where the window started
    assert re.search(r"the window ran at 65% of it \(its first interval at \d+%\)", textout.summarize(drifted))


def test_builtin_run_records_a_sane_reference_without_warning(e2e, scratch, tmp_path):
    """DRBL at 1 worker contends on nothing: the probes do not slow the window
    below half the reference's rate, and nothing warns. The other way is
    looser: a neighbour that takes the CPU for part of the 0.5 s reference
    leaves the window faster than it (2.9x once in CI, 1.3-1.4x here on 2 of
    12 runs, with or without probes), which warns of nothing."""
    out = tmp_path / "out"
    p = lockscope("run", "DRBL", "--workers", "1", "--duration", "1", "--warmup", "1", "--scratch", str(scratch),
                  "--out", str(out))
    assert p.returncode == 0, p.stderr
    rec = record.load(out / "runs" / "DRBL-tmpfs-w1.json")
    assert rec.reference_s == pytest.approx(0.5, abs=0.1) and rec.reference_ops > 0
    assert 0.5 < rec.probe_effect < 5
    assert rec.probe_effect == pytest.approx(rec.ops_per_sec / rec.reference_ops_per_sec)
    assert not any("probes slowed" in w for w in rec.warnings)
    assert re.search(r"reference \(first 0\.\d\d s of the warm-up, probes not recording\)", p.stdout), p.stdout
