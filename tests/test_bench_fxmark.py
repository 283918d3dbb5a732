"""bench/fxmark_compare.py: the FxMark driver is the user's own build, so
without it the script says how to get it and exits 2; workload names map to
FxMark's CLI."""
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import fxmark_compare  # noqa: E402


def _run(*args):
    return subprocess.run([sys.executable, str(REPO / "bench" / "fxmark_compare.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_without_fxmark_it_says_where_to_get_it(tmp_path):
    p = _run()
    assert p.returncode == 2 and "no FxMark driver given" in p.stderr
    assert "github.com/sslab-gatech/fxmark" in p.stderr and "--fxmark PATH" in p.stderr
    p = _run("--fxmark", str(tmp_path / "nope"))
    assert p.returncode == 2 and "not an executable file" in p.stderr


def test_names_map_to_fxmark_types():
    assert len(fxmark_compare.FXMARK_WORKLOADS) == 23          # 19 + 4 O_DIRECT variants
    assert fxmark_compare.fxmark_args("DWOM_DIO") == ("DWOM", "1")
    assert fxmark_compare.fxmark_args("MWRM") == ("MWRM", "0")
