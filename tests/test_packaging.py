"""What `pip install .` ships: every data file the code reads from its
package directories (tables, templates) is in setup.py's package_data, so
that the installed lockscope (what `make report` runs) finds it, not only
the source tree the tests run from."""
import fnmatch

from conftest import REPO, setup_keyword

def _package_folders() -> dict[str, str]:
    """Each package setup.py installs -> its folder in the source tree (by
    the longest package_dir entry above it)."""
    dirs = setup_keyword("package_dir")
    out = {}
    for pkg in setup_keyword("packages"):
        base = max((k for k in dirs if pkg == k or pkg.startswith(k + ".")), key=len)
        out[pkg] = "/".join([dirs[base], *pkg[len(base):].split(".")[1:]])
    return out


def test_every_package_folder_is_installed():
    """A folder of Python modules under a package's folder is a package setup.py names."""
    folders = set(_package_folders().values())
    for top in ("lockscope", "analyzer", "reports"):
        for init in (REPO / top).rglob("__init__.py"):
            folder = str(init.parent.relative_to(REPO))
            assert folder in folders, f"{folder} is not in setup.py's packages"


def test_every_data_file_is_installed():
    data = setup_keyword("package_data")
    missing = []
    for pkg, folder in _package_folders().items():
        for f in sorted((REPO / folder).iterdir()):
            if f.suffix in (".toml", ".j2", ".json", ".txt") and \
                    not any(fnmatch.fnmatch(f.name, g) for g in data.get(pkg, [])):
                missing.append(f"{folder}/{f.name}")
    assert not missing, f"not in setup.py's package_data (the installed lockscope would not find them): {missing}"
