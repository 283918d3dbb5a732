"""CPython's layouts by minor version (pylayouts.toml): where each
interpreter keeps its GIL and how its frames are walked, read by the probe's
loader (probes/pyframes.c, through probes/build/pylayouts.h, which
probes/gen_pylayouts.py writes from this table). Loaded by path by the
generator before the package is installed: it imports only the standard
library and lockscope.tables (which imports only the standard library)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):     # loaded by path (probes/gen_pylayouts.py): this source tree's lockscope
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from lockscope import tables  # noqa: E402

TABLE_FILE = Path(__file__).with_name("pylayouts.toml")
FLAGS = {"pthread_id": "PY_PTHREAD_ID", "no_owner": "PY_NO_OWNER"}    # lockscope/proberows.toml's [[constant]]
# struct py_layout's members after `minor`, in its order (probes/pyframes.c)
OFFSETS = ("gil_off", "gil_size", "last_holder_off", "tid_off", "frame_off", "cframe_off", "code_off", "prev_off",
           "owner_off", "qualname_off", "filename_off", "firstlineno_off", "ascii_size", "compact_size")


@dataclass(frozen=True)
class Layout:
    """[[layout]]: one CPython 3.minor (the table's header says what each offset is)."""
    minor: int
    gil_off: int
    gil_size: int
    last_holder_off: int
    tid_off: int
    frame_off: int
    code_off: int
    prev_off: int
    owner_off: int
    qualname_off: int
    filename_off: int
    firstlineno_off: int
    ascii_size: int
    compact_size: int
    cframe_off: int | None = None        # None: no cframe (PY_NO_CFRAME)
    flags: tuple[str, ...] = field(default=())

    def __post_init__(self):
        bad = [f for f in self.flags if f not in FLAGS]
        if bad:
            raise ValueError(f"flags {bad} are not among {list(FLAGS)}")
        if any(getattr(self, k) is not None and not 0 <= getattr(self, k) < 1 << 32 for k in OFFSETS):
            raise ValueError("an offset is outside 0..2^32-1")


def load(path: Path | str = TABLE_FILE) -> list[Layout]:
    rows = tables.load(path, Layout, table="layout")
    seen: set[int] = set()
    for i, r in enumerate(rows):
        if r.minor in seen:
            raise tables.error(path, tables.where("layout", i), f"minor {r.minor} has a layout already")
        seen.add(r.minor)
    return rows


def c_initializers(rows: list[Layout]) -> str:
    """The rows as designated initializers of struct py_layout."""
    out = []
    for r in rows:
        members = [f".minor = {r.minor}"]
        for k in OFFSETS:
            v = getattr(r, k)
            members.append(f".{k} = {'PY_NO_CFRAME' if v is None else v}")
        members.append(f".flags = {' | '.join(FLAGS[f] for f in r.flags) or 0}")
        out.append("\t{ " + ", ".join(members) + " },\n")
    return "".join(out)
