"""What the header generators of probes/ share: a module of the source
tree loaded by its path (the package need not be installed when the probes
are built)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent


def tree_module(relpath: str):
    """The module at TREE/relpath (e.g. "analyzer/kernel/lockfields.py"), loaded by path."""
    path = TREE / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
