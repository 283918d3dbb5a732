"""The figures for papers and the report on recorded real runs: worker axes
with integer ticks only, throughput ticks with unit prefixes (never an offset
such as `1e5`), fonts embedded in the PDFs; and `bottlenecks.tex` compiled
by a real TeX engine (pdflatex from Debian's texlive-latex-recommended)."""
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import DATA
from lockscope.analyzer.analyze import analyze, load_records
from lockscope.reports import exports, figures

RECORDED = ["mwrm_mmap_tmpfs", "dbench_ext4", "rocksdb_tmpfs", "pmutex"]
COUNT = re.compile(r"^\d+$")
PREFIXED = re.compile(r"^\d+(\.\d+)?[kMG]?$")
OFFSET = re.compile(r"1e|\d[eE][+-−]?\d|×|\\times")


def _experiments():
    return [e for d in RECORDED for e in analyze(load_records(DATA / d))]


def _ticks(svg: str) -> dict[str, list[str]]:
    """The texts of an SVG saved by matplotlib with svg.fonttype none: the
    x and y tick labels (groups xtick_N / ytick_N) and every other text."""
    root = ET.fromstring(svg[svg.index("<svg"):])
    out: dict[str, list[str]] = {"x": [], "y": [], "other": []}

    def walk(el, axis):
        gid = el.get("id", "")
        if gid.startswith("xtick_"):
            axis = "x"
        elif gid.startswith("ytick_"):
            axis = "y"
        if el.tag.endswith("}text") and (el.text or "").strip():
            out[axis or "other"].append(el.text.strip())
        for child in el:
            walk(child, axis)

    walk(root, None)
    return out


def _check(svg: str, worker_x: bool, prefixed_y: bool, name: str) -> dict[str, list[str]]:
    t = _ticks(svg)
    if worker_x:
        assert t["x"] and all(COUNT.match(s) for s in t["x"]), (name, t["x"])
    if prefixed_y:
        assert t["y"] and all(PREFIXED.match(s) for s in t["y"]), (name, t["y"])
    for s in t["x"] + t["y"]:
        assert not OFFSET.search(s), (name, s)
    # an offset or multiplier label is a text outside the ticks: only 1e-free texts there
    assert not [s for s in t["other"] if re.fullmatch(r"[−+-]?\s*(1e[+-−]?\d+|×\s*10.*)", s)], (name, t["other"])
    return t


def test_paper_figures_have_integer_worker_ticks_and_prefixed_throughput():
    exps = _experiments()
    assert exps
    for e in exps:
        thr = _check(figures.paper_throughput(e)["svg"].decode(), True, True, e.title)
        assert not any("1e" in s for s in thr["other"]), thr["other"]
        assert f"throughput ({e.unit})" in thr["other"] or f"throughput, {e.unit}" in thr["other"], thr["other"]
        assert sorted(int(s) for s in thr["x"]) == sorted({p.workers for p in e.points})
        _check(figures.paper_lock_share(e)["svg"].decode(), True, False, e.title)
    units = {e.unit for e in exps}
    assert {"ops/s", "MB/s (dbench)"} <= units
    mwrm = next(e for e in exps if e.workload == "MWRM")
    # 0 .. 600k ops/s: the ticks say k, not "1e5" next to 0 .. 6
    assert any(s.endswith("k") for s in _ticks(figures.paper_throughput(mwrm)["svg"].decode())["y"])


def test_report_figures_have_integer_worker_ticks_and_prefixed_throughput():
    for e in _experiments():
        _check(figures.throughput(e), True, True, e.title)
        _check(figures.throughput(e, small=True), True, True, e.title)
        w = figures.whatif(e)
        if w:
            _check(w, True, True, e.title)
        for svg in (figures.cpu_breakdown(e), figures.lock_share(e), figures.attribution(e)):
            if svg:
                _check(svg, True, False, e.title)


def test_prefixes_and_counts():
    assert [figures._si(x) for x in (0, 850, 12_000, 12_500, 1_500_000, 2e9, 0.5)] == \
        ["0", "850", "12k", "12.5k", "1.5M", "2G", "0.5"]


def test_compare_figure_has_integer_workers_and_the_unit():
    e = {"unit": "ops/s", "unit_b": "ops/s",
         "curve": [{"workers": 1, "a": 150_000.0, "b": 120_000.0}, {"workers": 2, "a": 260_000.0, "b": 90_000.0}]}
    t = _check(figures.compare_curves(e), True, True, "compare")
    assert t["x"] == ["1", "2"] and "throughput (ops/s)" in t["other"]


def test_paper_pdfs_embed_their_fonts(tmp_path):
    e = analyze(load_records(DATA / "mwrm_mmap_tmpfs"))[0]
    for what in (figures.paper_throughput(e), figures.paper_lock_share(e)):
        pdf = what["pdf"]
        # pdf.fonttype 42: TrueType fonts, embedded (FontFile2), never Type 3
        assert b"/FontFile2" in pdf and b"/Type3" not in pdf
        if shutil.which("pdffonts"):
            f = tmp_path / "f.pdf"
            f.write_bytes(pdf)
            rows = subprocess.run(["pdffonts", str(f)], capture_output=True, text=True, check=True,
                                  timeout=60).stdout.splitlines()[2:]
            assert rows and all(" yes " in r.split("Identity-H", 1)[-1] and "Type 3" not in r for r in rows), rows


PDFLATEX = shutil.which("pdflatex")


def _pdflatex(tmp_path, name: str, body: list[str]) -> tuple[str, str]:
    """Compile a minimal article around `body`; its log and its text."""
    (tmp_path / f"{name}.tex").write_text("\n".join([
        r"\documentclass{article}", r"\usepackage{booktabs}", r"\begin{document}", *body, r"\end{document}", ""]))
    r = subprocess.run([PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", f"{name}.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:]
    pdf = (tmp_path / f"{name}.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and b"%%EOF" in pdf[-64:]
    log = (tmp_path / f"{name}.log").read_text(errors="replace")
    assert "Undefined control sequence" not in log and "Missing character" not in log
    text = ""
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(tmp_path / f"{name}.pdf"), "-"], capture_output=True,
                              text=True, check=True, timeout=60).stdout
    return log, text


def _squeeze(s: str) -> str:
    # pdftotext reads OT1's \_ (a rule, not a glyph) as a space, and its ~ and ^ as the accents
    return re.sub(r"[\s_]", "", s).replace("˜", "~").replace("ˆ", "^")


@pytest.mark.skipif(PDFLATEX is None, reason="pdflatex is missing (Debian: apt-get install "
                    "texlive-latex-recommended; `make test` installs it)")
def test_bottlenecks_tex_compiles_with_pdflatex(tmp_path):
    exports.write_exports(DATA / "mwrm_mmap_tmpfs", tmp_path / "x")
    shutil.copy(tmp_path / "x" / "bottlenecks.tex", tmp_path / "bottlenecks.tex")
    log, text = _pdflatex(tmp_path, "paper", [r"\input{bottlenecks.tex}",
                                              r"Table~\ref{tab:lockscope-bottlenecks}."])
    assert "Overfull \\hbox" not in log                  # the table fits the text width
    if text:
        assert "Explained" in text and "81%" in text
        assert _squeeze("sb->s_vfs_rename_mutex of tmpfs at <scratch> (mutex, verified)") in _squeeze(text)
    # every LaTeX special character in the names, the way the exporter writes them
    odd = exports.to_latex([exports.BottleneckRow("my_bench#1", "ext4&%", 2, 1.5, 0.7,
                                                  r"a_b&c%d$e#f{g}h~i^j\k<l>m|", "mutex", "verified", 0.5,
                                                  0.25), exports.BottleneckRow("w", "fs")],
                           caption="Odd_names & 50% #1", label="tab:odd")
    (tmp_path / "odd-table.tex").write_text(odd)
    _, text = _pdflatex(tmp_path, "odd", [r"\input{odd-table.tex}"])
    if text:
        assert _squeeze(r"a_b&c%d$e#f{g}h~i^j\k<l>m|") in _squeeze(text)
        assert _squeeze("my_bench#1") in _squeeze(text) and "ext4&%" in text and "50% #1" in text
