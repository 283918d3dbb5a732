"""The HTML report of recorded runs: the diagnosis and lock names are in it,
it needs no network, and system strings are escaped."""
import json
import re
import shutil

from conftest import DATA, lockscope


def copy(tmp_path, name):
    dest = tmp_path / name
    shutil.copytree(DATA / name, dest)
    return dest


def test_report_shows_diagnosis_locks_and_figures(tmp_path):
    d = copy(tmp_path, "mwrm_mmap_tmpfs")
    p = lockscope("report", str(d))
    assert p.returncode == 0, p.stderr
    html = (d / "report" / "index.html").read_text()
    assert p.stdout.strip() == f"report: {d / 'report' / 'index.html'}"
    assert "MWRM on tmpfs stops scaling at 2 workers" in html
    assert "sb-&gt;s_vfs_rename_mutex of tmpfs at &lt;scratch&gt;" in html      # escaped, not raw
    assert "mm-&gt;mmap_lock of lockscope-workl" in html
    assert html.count("<svg") >= 8            # 2 experiments x (small + 3 figures)
    assert "do_renameat2" in html             # stacks
    assert "unavailable" in html              # CPI stated, not faked


def test_report_works_offline(tmp_path):
    d = copy(tmp_path, "shared_tmpfs")
    assert lockscope("report", str(d)).returncode == 0
    html = (d / "report" / "index.html").read_text()
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html), "the report must not load anything"
    assert "<script" not in html


def test_system_strings_are_escaped(tmp_path):
    d = copy(tmp_path, "shared_tmpfs")
    f = d / "runs" / "DWOM-tmpfs-w2.json"
    rec = json.loads(f.read_text())
    rec["locks"][0]["name"] = "<script>alert(1)</script> & <b>x</b>"
    rec["locks"][0]["stacks"][0]["frames"][0] = "<img src=x onerror=alert(2)>"
    rec["warnings"].append("<iframe>")
    f.write_text(json.dumps(rec))
    assert lockscope("report", str(d)).returncode == 0
    html = (d / "report" / "index.html").read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;x&lt;/b&gt;" in html
    assert "<img src=x" not in html and "<iframe>" not in html


def test_report_of_a_missing_directory_fails_cleanly(tmp_path):
    p = lockscope("report", str(tmp_path / "nothing"))
    assert p.returncode == 2
    assert "does not exist" in p.stderr and "Traceback" not in p.stderr
