"""lockscope: lock-contention profiler and scalability analyzer for Linux."""
import os as _os

__version__ = "0.1.0"

# Installed, analyzer/, reports/ and templates/ are subpackages of lockscope
# (setup.py package_dir). In a source checkout they sit beside this directory:
# let lockscope.analyzer & co. resolve there too, so the tree runs uninstalled.
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "analyzer")):
    __path__.append(_os.path.dirname(_here))  # noqa: F821 (package __path__)
