"""The report in a real headless browser (Chromium): the index and an
experiment page render their plots, diagnosis, top-locks table and flame
graph, and loading them makes no network request (Chromium's net log of the
page's requests, with every host name unresolvable as a second guard)."""
import json
import re
import shutil
import subprocess

import pytest

from conftest import DATA, lockscope
from lockscope.reports import flamegraph

CHROMIUM = next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)


def load_page(url: str, tmp_path) -> tuple[str, list[str]]:
    """(the DOM after load, the URLs of network requests the page made)."""
    netlog = tmp_path / f"net-{abs(hash(url))}.json"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
           "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-default-apps", "--host-resolver-rules=MAP * ~NOTFOUND", f"--log-net-log={netlog}",
           "--virtual-time-budget=5000", "--dump-dom", url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    # requests of the page (and the documents it embeds) carry the file:// isolation key;
    # the browser's own background requests do not
    urls = [e["params"]["url"] for e in log["events"]
            if e["type"] == start and str(e.get("params", {}).get("network_isolation_key", "")).startswith("file://")]
    return p.stdout, urls


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("headless browser test needs Chromium: no chromium on PATH (apt-get install chromium; make deps)")
    d = tmp_path_factory.mktemp("browser") / "mwrm_mmap_tmpfs"
    shutil.copytree(DATA / "mwrm_mmap_tmpfs", d)
    p = lockscope("report", str(d))
    assert p.returncode == 0, p.stderr
    return d / "report"


def test_index_renders_plots_and_diagnoses(report, tmp_path):
    dom, requests = load_page((report / "index.html").as_uri(), tmp_path)
    assert requests == []
    rows = re.findall(r"<tr>\s*<td><a href=\"([^\"]+)\">(.*?)</a>.*?<td class=\"small\"><svg.*?</svg>\s*</td>.*?"
                      r"<td class=\"diag\">(.*?)</td>", dom, re.S)
    assert [(href, name) for href, name, _ in rows] == [("MWRM-tmpfs.html", "MWRM on tmpfs"), ("mmap-none.html", "mmap")]
    assert rows[0][2].startswith("MWRM on tmpfs stops scaling at 2 workers")
    assert "sb-&gt;s_vfs_rename_mutex of tmpfs at &lt;scratch&gt;" in rows[0][2]


def test_experiment_page_renders_figures_locks_and_flame_graph(report, tmp_path):
    dom, requests = load_page((report / "MWRM-tmpfs.html").as_uri(), tmp_path)
    assert requests == [], f"the page fetched {requests}"
    for fig in ("fig-throughput", "fig-cpu", "fig-locks"):
        m = re.search(rf'<figure id="{fig}"><svg .*?</svg>', dom, re.S)
        assert m and "<path" in m.group(0), f"{fig} has no drawn SVG"
    assert re.search(r'<p class="diagnosis">MWRM on tmpfs stops scaling at 2 workers', dom)
    # the collapse point's locks are shown open
    opened = re.search(r'<details class="point" open="">\s*<summary><strong>2 workers</strong>[^<]*</summary>\s*'
                       r'(<table class="locks">.*?</table>)', dom, re.S)
    assert opened, "the collapse point's top locks are not open"
    table = opened.group(1)
    first = re.search(r'<td class="lock-name">(.*?)<', table, re.S).group(1).strip()
    assert first == "sb-&gt;s_vfs_rename_mutex of tmpfs at &lt;scratch&gt;"
    assert '<span class="tier tier-verified"' in table
    if flamegraph.renderer() is None:
        assert "flame graph not available: inferno-flamegraph not found" in dom
    else:
        assert re.search(r'<object class="flame" type="image/svg\+xml" data="flame/MWRM-tmpfs-w2-cpu.svg"', dom)


def test_a_page_that_fetches_is_caught(tmp_path):
    """The request check itself: a page with a remote image and an embedded
    SVG that fetches is reported with both URLs."""
    if CHROMIUM is None:
        pytest.skip("headless browser test needs Chromium: no chromium on PATH (apt-get install chromium; make deps)")
    (tmp_path / "s.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"><image href="https://b.invalid/y.png" '
                                    'width="5" height="5"/></svg>')
    (tmp_path / "i.html").write_text('<html><body><img src="http://a.invalid/x.png">'
                                     '<object data="s.svg" type="image/svg+xml"></object></body></html>')
    _, requests = load_page((tmp_path / "i.html").as_uri(), tmp_path)
    assert set(requests) == {"http://a.invalid/x.png", "https://b.invalid/y.png"}
