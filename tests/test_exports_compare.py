"""`lockscope export` (figures, bottleneck table, run records) and
`lockscope compare` on recorded real runs, with numbers checked against
values computed by hand from the records."""
import csv
import io
import json
import re

import pytest

from conftest import DATA, load, lockscope
from lockscope.reports import exports
from lockscope.errors import UsageError
from lockscope.reports.compare import compare, render_html, render_text


def test_export_writes_table_figures_and_records(tmp_path):
    r = lockscope("export", str(DATA / "mwrm_mmap_tmpfs"), "--out", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "x"
    rows = list(csv.DictReader(io.StringIO((out / "bottlenecks.csv").read_text())))
    by = {(row["workload"], row["fs"]): row for row in rows}
    one, two = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w1"), load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    mwrm = by[("MWRM", "tmpfs")]
    assert mwrm["collapse_workers"] == "2"
    assert mwrm["root_cause"] == "sb->s_vfs_rename_mutex of tmpfs at <scratch>"
    assert mwrm["tier"] == "verified" and mwrm["kind"] == "mutex"
    assert float(mwrm["speedup"]) == pytest.approx(two.ops_per_sec / one.ops_per_sec, abs=1e-4)
    assert float(mwrm["wait_share"]) == pytest.approx(two.locks[0].wait_share, abs=1e-4)
    assert by[("mmap", "none")]["root_cause"].startswith("mm->mmap_lock of ")
    tex = (out / "bottlenecks.tex").read_text()
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert (r"MWRM & tmpfs & 2 & " + f"{two.ops_per_sec / one.ops_per_sec:.2f}" +
            r" & \raggedright sb-\textgreater{}s\_vfs\_rename\_mutex of tmpfs at \textless{}scratch\textgreater{} (mutex, verified) & "
            in tex)
    assert f"{float(mwrm['explained_share']):.0%}".replace("%", r"\%") + r" & -- \\" in tex   # not confirmed by experiment
    figs = sorted(p.name for p in (out / "figures").iterdir())
    assert figs == sorted(f"{w}-{fs}-{k}.{ext}" for w, fs in (("MWRM", "tmpfs"), ("mmap", "none"))
                          for k in ("throughput", "lockshare") for ext in ("pdf", "svg"))
    for f in (out / "figures").iterdir():
        data = f.read_bytes()
        assert len(data) > 2000
        if f.suffix == ".pdf":
            assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
        else:
            assert b"<svg" in data[:600] and data.rstrip().endswith(b"</svg>")
    svg = (out / "figures" / "MWRM-tmpfs-lockshare.svg").read_text()
    assert "sb-&gt;s_vfs_rename_mutex of tmpfs at &lt;scratch&gt;" in svg     # the legend names the lock
    for f in (DATA / "mwrm_mmap_tmpfs" / "runs").iterdir():
        assert (out / "runs" / f.name).read_bytes() == f.read_bytes()
    assert json.loads((out / "analysis.json").read_text())["schema"] == "lockscope.analysis/2"


def test_latex_escapes_every_special_character():
    assert exports.latex_escape(r"a_b&c%d$e#f{g}h~i^j\k<l>m|") == (
        r"a\_b\&c\%d\$e\#f\{g\}h\textasciitilde{}i\textasciicircum{}j\textbackslash{}k\textless{}l"
        r"\textgreater{}m\textbar{}")
    tex = exports.to_latex([exports.BottleneckRow("my_bench", "ext4")])
    assert r"my\_bench & ext4 & -- & -- & -- & -- & -- \\" in tex


def test_compare_matches_by_workload_and_fs_and_prints_hand_computed_changes():
    out = render_text(compare(DATA / "mwrm_mmap_tmpfs", DATA / "series_mwrm"))
    a1, a2 = load("mwrm_mmap_tmpfs/MWRM-tmpfs-w1"), load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2")
    b1, b2 = load("series_mwrm/MWRM-tmpfs-w1"), load("series_mwrm/MWRM-tmpfs-w2")
    assert "MWRM on tmpfs\n" in out
    for w, a, b in ((1, a1, b1), (2, a2, b2)):
        change = b.ops_per_sec / a.ops_per_sec - 1
        sa = (a.ops_per_sec / a1.ops_per_sec) * 1
        sb = (b.ops_per_sec / b1.ops_per_sec) * 1
        line = (f"  {w:>7}  {a.ops_per_sec:>18,.0f}  {b.ops_per_sec:>18,.0f}  {change:>+8.1%}  "
                f"{sa:.2f} -> {sb:.2f}")
        assert line in out, (line, out)
    ra, rb = a2.locks[0], b2.locks[0]
    assert ra.name == rb.name == "sb->s_vfs_rename_mutex of tmpfs at <scratch>"
    assert (f"    {ra.name}  2: {ra.wait_share:.1%} -> {rb.wait_share:.1%} "
            f"({100 * (rb.wait_share - ra.wait_share):+.1f})") in out
    assert "only in A: mmap on none" in out and "only in B: MWRM on ext4" in out


def test_compare_json_and_two_file_systems():
    doc = json.loads(json.dumps(compare(DATA / "series_mwrm", DATA / "series_mwrm", "tmpfs", "ext4")))
    assert doc["schema"] == "lockscope.compare/1"
    (e,) = doc["experiments"]
    assert (e["workload"], e["fs_a"], e["fs_b"]) == ("MWRM", "tmpfs", "ext4")
    t2, x2 = load("series_mwrm/MWRM-tmpfs-w2"), load("series_mwrm/MWRM-ext4-w2")
    c2 = next(c for c in e["curve"] if c["workers"] == 2)
    assert c2["a"] == t2.ops_per_sec and c2["b"] == x2.ops_per_sec
    assert c2["ratio"] == pytest.approx(x2.ops_per_sec / t2.ops_per_sec)
    # the same lock of two file systems is one row
    row = next(w for w in e["waits"] if w["name"] == "sb->s_vfs_rename_mutex of tmpfs/ext4 at <scratch>")
    p2 = next(p for p in row["points"] if p["workers"] == 2)
    assert p2["a"] == pytest.approx(t2.locks[0].wait_share) and p2["b"] == pytest.approx(x2.locks[0].wait_share)
    assert p2["delta"] == pytest.approx(x2.locks[0].wait_share - t2.locks[0].wait_share)


def test_compare_errors_are_usage_errors():
    r = lockscope("compare", str(DATA / "shared_tmpfs"), str(DATA / "series_mwrm"))
    assert r.returncode == 2 and "no experiment of" in r.stderr and "--fs-a" in r.stderr
    with pytest.raises(UsageError, match="--fs-a and --fs-b go together"):
        compare(DATA / "shared_tmpfs", DATA / "series_mwrm", "tmpfs", None)


def test_compare_html_is_offline_and_escaped(tmp_path):
    doc = compare(DATA / "mwrm_mmap_tmpfs", DATA / "series_mwrm")
    doc["experiments"][0]["waits"][0]["name"] = "<script>alert(1)</script>"
    html = render_html(doc)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)      # nothing loaded from the network
    assert "<script" not in html
    assert "<svg" in html and "sb-&gt;s_vfs_rename_mutex of tmpfs at &lt;scratch&gt;" in html
    r = lockscope("compare", str(DATA / "mwrm_mmap_tmpfs"), str(DATA / "series_mwrm"), "--html",
                  str(tmp_path / "c.html"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c.html").read_text().startswith("<!DOCTYPE html>")
    assert r.stdout == render_text(compare(DATA / "mwrm_mmap_tmpfs", DATA / "series_mwrm")) + \
        f"page: {tmp_path / 'c.html'}\n"


def test_figures_leave_the_global_matplotlib_settings_alone():
    import matplotlib
    from lockscope.analyzer.analyze import analyze, load_records
    from lockscope.reports import figures
    before = dict(matplotlib.rcParams)
    e = analyze(load_records(DATA / "mwrm_mmap_tmpfs"))[0]
    assert "<svg" in figures.throughput(e) and "<svg" in figures.cpu_breakdown(e)
    assert set(figures.paper_throughput(e)) == {"pdf", "svg"}
    assert dict(matplotlib.rcParams) == before
