"""What `pip install .` ships: every data file the code reads from its
package directories (tables, templates) is in setup.py's package_data, so
that the installed lockscope (what `make report` runs) finds it, not only
the source tree the tests run from."""
import ast
import fnmatch

from conftest import REPO

DIRS = {"lockscope": "lockscope", "lockscope.analyzer": "analyzer", "lockscope.templates": "templates",
        "lockscope.reports": "reports"}


def _package_data() -> dict:
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "package_data":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no package_data")


def test_every_data_file_is_installed():
    data = _package_data()
    missing = []
    for pkg, folder in DIRS.items():
        for f in sorted((REPO / folder).iterdir()):
            if f.suffix in (".toml", ".j2", ".json", ".txt") and \
                    not any(fnmatch.fnmatch(f.name, g) for g in data.get(pkg, [])):
                missing.append(f"{folder}/{f.name}")
    assert not missing, f"not in setup.py's package_data (the installed lockscope would not find them): {missing}"
