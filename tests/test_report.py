"""The HTML report of recorded runs: an index and one page per experiment,
the diagnosis and lock names in them, flame graphs (or why not), no
network, and system strings escaped."""
import json
import re
import shutil

import pytest

from conftest import DATA, lockscope
from lockscope.reports import flamegraph


def copy(tmp_path, name):
    dest = tmp_path / name
    shutil.copytree(DATA / name, dest)
    return dest


def no_renderer_env(tmp_path):
    """An environment in which inferno-flamegraph cannot be found."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path), "CARGO_HOME": str(tmp_path / "cargo"),
            "SUDO_USER": ""}


@pytest.fixture(scope="module")
def mwrm(tmp_path_factory):
    """The report of the recorded MWRM and mmap sweep, made once: (dir, process)."""
    d = copy(tmp_path_factory.mktemp("report"), "mwrm_mmap_tmpfs")
    return d, lockscope("report", str(d))


def test_report_has_index_and_a_page_per_experiment(mwrm):
    d, p = mwrm
    assert p.returncode == 0, p.stderr
    rep = d / "report"
    assert p.stdout.strip() == f"report: {rep / 'index.html'}"
    index = (rep / "index.html").read_text()
    assert "MWRM on tmpfs stops scaling at 2 workers" in index
    assert 'href="MWRM-tmpfs.html"' in index and 'href="mmap-none.html"' in index
    assert index.count("<svg") == 2                         # a small scaling plot each
    assert "efficiency (speedup over ideal) below 75%" in index   # the collapse rule, stated
    page = (rep / "MWRM-tmpfs.html").read_text()
    assert "MWRM on tmpfs stops scaling at 2 workers" in page
    assert "sb-&gt;s_vfs_rename_mutex of tmpfs at &lt;scratch&gt;" in page      # escaped, not raw
    assert page.count("<svg") >= 3                          # throughput, CPU, lock share
    for fig in ("fig-throughput", "fig-cpu", "fig-locks"):
        assert re.search(rf'<figure id="{fig}"><svg', page), fig
    assert "do_renameat2" in page                           # stacks
    assert "CPI unavailable: perf_event_open(cycles) failed" in page   # stated, not faked
    assert "mm-&gt;mmap_lock of lockscope-workl" in (rep / "mmap-none.html").read_text()


def test_analysis_keys_not_computed_are_stated(mwrm):
    d, p = mwrm
    assert p.returncode == 0, p.stderr
    page = (d / "report" / "MWRM-tmpfs.html").read_text()
    # each optional part is either drawn or says why not
    for part, drawn in (("USL fit", "USL fit X(N)"), ("What-if", 'id="fig-whatif"><svg'),
                        ("Attribution", 'id="fig-attribution"'), ("Time view", 'id="fig-timeview"')):
        assert drawn in page or re.search(rf"{part}: not available: \w", page), part


def test_flame_graphs_for_the_collapse_and_one_worker(mwrm):
    if flamegraph.renderer() is None:
        pytest.skip(f"{flamegraph.MISSING}: the renderer is installed by `make tools`")
    d, p = mwrm
    assert p.returncode == 0, p.stderr
    flame = d / "report" / "flame"
    page = (d / "report" / "MWRM-tmpfs.html").read_text()
    for w in (2, 1):                                        # the collapse point and the 1-worker point
        for kind in ("cpu", "offcpu", "lockwait"):
            base = f"MWRM-tmpfs-w{w}-{kind}"
            assert (flame / f"{base}.folded").stat().st_size > 0
            svg = (flame / f"{base}.svg").read_text()
            assert "<svg" in svg and "<script" in svg           # interactive: zoom and search
            assert f'data="flame/{base}.svg"' in page and f'href="flame/{base}.folded"' in page
    svg = (flame / "MWRM-tmpfs-w2-lockwait.svg").read_text()
    assert "sb-&gt;s_vfs_rename_mutex of tmpfs at &lt;scratch&gt;" in svg
    assert not (flame / "MWRM-tmpfs-w3-cpu.folded").exists()


def test_without_the_renderer_the_report_says_so_and_keeps_folded_stacks(tmp_path):
    d = copy(tmp_path, "mwrm_mmap_tmpfs")
    p = lockscope("report", str(d), env=no_renderer_env(tmp_path))
    assert p.returncode == 0, p.stderr
    page = (d / "report" / "MWRM-tmpfs.html").read_text()
    assert ("flame graph not available: inferno-flamegraph not found "
            "(run make deps / cargo install inferno)") in page
    assert "<object" not in page
    # the CPU graph says at what rate it was sampled (this record: 199 Hz)
    assert re.search(r"CPU samples</b>, [\d,]+ samples \(at 199 per second per CPU\) in", page)
    folded = (d / "report" / "flame" / "MWRM-tmpfs-w2-lockwait.folded").read_text()
    assert "do_renameat2;__mutex_lock;sb->s_vfs_rename_mutex of tmpfs at <scratch> " in folded
    assert not list((d / "report" / "flame").glob("*.svg"))


def test_report_works_offline(mwrm):
    d, p = mwrm
    assert p.returncode == 0, p.stderr
    pages = list((d / "report").glob("*.html"))
    assert len(pages) == 3                                  # index + 2 experiments
    for page in pages:
        html = page.read_text()
        assert not re.search(r'(src|href|data)\s*=\s*"(https?:)?//', html), f"{page.name} loads something"
        assert "<script" not in html and "@import" not in html
        assert not re.search(r"url\((?!#)", html), f"{page.name} loads something from CSS"
    for svg in (d / "report" / "flame").glob("*.svg"):
        # inferno's own script and styles; only XML namespaces and comments name web addresses
        assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', svg.read_text()), svg.name


def test_system_strings_are_escaped(tmp_path):
    d = copy(tmp_path, "shared_tmpfs")
    f = d / "runs" / "DWOM-tmpfs-w2.json"
    rec = json.loads(f.read_text())
    rec["locks"][0]["name"] = "<script>alert(1)</script> & <b>x</b> $x$"
    rec["locks"][0]["stacks"][0]["frames"][0] = "<img src=x onerror=alert(2)>"
    rec["warnings"].append("<iframe>")
    rec["workload"] = "DWOM<i>"
    f.write_text(json.dumps(rec))
    assert lockscope("report", str(d)).returncode == 0
    rep = d / "report"
    page = next(rep.glob("DWOM*.html"))
    assert page.name == "DWOM_i-tmpfs.html"                 # a safe file name
    for html in (page.read_text(), (rep / "index.html").read_text()):
        assert "<script>alert(1)" not in html and "<img src=x" not in html and "<iframe>" not in html
        assert "DWOM<i>" not in html and "DWOM&lt;i&gt;" in html
    html = page.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;x&lt;/b&gt; $x$" in html   # table and legend
    svgs = [f.read_text() for f in (rep / "flame").glob("DWOM*.svg")]
    assert len(svgs) == (3 if flamegraph.renderer() else 0)
    for svg in svgs:                                        # inferno escapes titles and frames
        assert "<script>alert(1)" not in svg and "DWOM<i>" not in svg and "DWOM&lt;i&gt;" in svg


def test_report_of_a_missing_directory_fails_cleanly(tmp_path):
    p = lockscope("report", str(tmp_path / "nothing"))
    assert p.returncode == 2
    assert "does not exist" in p.stderr and "Traceback" not in p.stderr


def with_every_part(exp):
    """The experiment with each optional part of the analysis (usl,
    attribution, whatif, timeview, cpi, named share) made from the recorded
    points: a USL curve of known parameters, the waits of each point."""
    from lockscope.analyzer import attribution, usl
    from lockscope.analyzer.results import TimeSeries, TimeView, Unavailable
    a, b, lam = 0.3, 0.05, exp.points[0].ops_per_sec
    last = exp.points[-1].workers
    exp.usl = usl.UslFit(a, b, lam, 0.987, len(exp.points), float(last), 4.0, usl.usl(4.0, lam, a, b))
    for p, rec in zip(exp.points, exp.records):
        p.attribution = attribution.attribute(rec, p.lost_capacity)
        p.cpi = Unavailable("no hardware counters (test)")
        p.named_share = 0.97
    name = exp.records[-1].locks[0].name
    exp.whatif = attribution.WhatIf(name, [
        attribution.WhatIfPoint(p.workers, p.ops_per_sec * (1 + p.lost_capacity / p.ideal), False)
        for p in exp.points])
    exp.timeview = TimeView(last, 0.1, [(i + 1) / 10 for i in range(20)],
                            [TimeSeries(name, attribution.LOCK, [0.2 + 0.1 * (i % 5 == 0) for i in range(20)]),
                             TimeSeries("<b>other</b>", attribution.NONLOCK, [0.01] * 20)], False)
    return exp


def test_every_part_of_the_analysis_is_drawn(tmp_path, monkeypatch):
    from lockscope.reports import html
    plain = html.analyze
    monkeypatch.setattr(html, "analyze", lambda recs, *confirmed: [with_every_part(e) for e in plain(recs, *confirmed)])
    index = html.write_report(DATA / "mwrm_mmap_tmpfs", tmp_path / "report")
    page = (index.parent / "MWRM-tmpfs.html").read_text()
    for fig in ("fig-throughput", "fig-whatif", "fig-attribution", "fig-timeview"):
        assert re.search(rf'<figure id="{fig}"><svg', page), fig
    for part in ("USL fit", "What-if", "Attribution", "Time view"):
        assert f"{part}: not available" not in page, part
    assert "Named share: the share of lock wait" in page
    assert "USL extrapolated" in page and "R² 0.987" in page          # legend of the fit
    assert "(extrapolated: beyond the largest measured worker count)" in page
    assert "upper bound: sb-&gt;s_vfs_rename_mutex of tmpfs at &lt;scratch&gt; removed" in page
    assert "&lt;b&gt;other&lt;/b&gt;" in page and "<b>other</b>" not in page
    assert "CPI unavailable: no hardware counters (test)" in page
    assert page.count(">97%<") == 2                                  # named share per point


def test_flame_graph_points_are_the_collapse_and_one_worker_or_the_last(tmp_path):
    from lockscope.analyzer.analyze import analyze, load_records
    mwrm, mmap = analyze(load_records(DATA / "mwrm_mmap_tmpfs"))
    assert [(role, r.workers) for role, r in flamegraph.points_for(mwrm)] == [("collapse point", 2), ("1 worker", 1)]
    dwom = analyze(load_records(DATA / "shared_tmpfs"))[0]
    assert dwom.collapse is None
    assert [(role, r.workers) for role, r in flamegraph.points_for(dwom)] == [("last point", 2)]
    graphs = flamegraph.write(dwom, tmp_path, "DWOM-tmpfs", find=False)
    assert [g.reason for g in graphs[0].graphs] == [flamegraph.MISSING] * 3
    assert sorted(p.name for p in (tmp_path / "flame").iterdir()) == [
        "DWOM-tmpfs-w2-cpu.folded", "DWOM-tmpfs-w2-lockwait.folded", "DWOM-tmpfs-w2-offcpu.folded"]


ODD_NAMES = ["DWOM<i>", "._hidden_", "my bench!", "wéird", "a" * 70 + "$x$", "--", "", "_", "x.y-z_1",
             "<>"]


def test_one_slug_keeps_the_file_names_of_pages_and_exports():
    """The two rules the page (and flame graph) and export file names were
    made with before they shared one function."""
    import re
    from lockscope.measure import workloads
    from lockscope.machine import scratch
    from lockscope.reports import filenames

    def page_before(s):
        return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("._") or "x"

    def export_before(s):
        return re.sub(r"[^A-Za-z0-9._-]+", "_", s)[:60] or "x"

    try:
        catalog = list(workloads.catalog())
    except Exception:                      # the workload driver is not built
        catalog = ["MWRM", "DRBL_DIO", "mdtest_shared", "mmap", "PMUTEX"]
    for name in catalog + list(scratch.FS_SETUPS) + ["none"]:
        assert filenames.slug(name, filenames.PAGE) == filenames.slug(name, filenames.EXPORT) == name
    for name in ODD_NAMES:
        assert filenames.slug(name, filenames.PAGE) == page_before(name), name
        assert filenames.slug(name, filenames.EXPORT) == export_before(name), name
    assert filenames.experiment("DWOM<i>", "tmpfs", filenames.PAGE) == "DWOM_i-tmpfs"
    assert filenames.experiment("DWOM<i>", "tmpfs", filenames.EXPORT) == "DWOM_i_-tmpfs"


def test_a_command_experiment_shows_its_command_line_escaped(tmp_path):
    d = copy(tmp_path, "shared_tmpfs")
    f = d / "runs" / "DWOM-tmpfs-w2.json"
    rec = json.loads(f.read_text())
    rec["kind"], rec["command"] = "command", ["./bench", "--threads", "2", "--tag", "<b>&x</b>"]
    f.write_text(json.dumps(rec))
    assert lockscope("report", str(d)).returncode == 0
    shown = "./bench --threads 2 --tag &#39;&lt;b&gt;&amp;x&lt;/b&gt;&#39;  (at 2 workers)"
    for html in ((d / "report" / "DWOM-tmpfs.html").read_text(), (d / "report" / "index.html").read_text()):
        assert f"<code>{shown}</code>" in html or f'<code class="meta">{shown}</code>' in html
        assert "<b>&x</b>" not in html
