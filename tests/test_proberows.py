"""The probe's records declared once (lockscope/proberows.toml): the build's
header is what the table says, every row agrees with the dataclass that
reads it, and a disagreement stops the generator with what differs."""
import dataclasses
import subprocess
import sys
import types
from typing import Optional

import pytest

from conftest import REPO
from lockscope import proberows
from lockscope.model import probedata
from lockscope.model.jsondata import HEX, optional

GEN = REPO / "probes" / "gen_proberows.py"


def test_every_row_agrees_with_its_dataclass():
    f = proberows.load()
    assert {r.json for r in f.row} >= {"tasks", "wakeups", "holds", "hold_activity", "contention", "offcpu",
                                       "waiters", "owners", "futex", "futex_kernel", "go_waits"}
    assert proberows.check(f, probedata) == []


def test_the_built_header_is_the_tables():
    built = REPO / "probes" / "build" / "proberows.h"
    if not built.exists():
        pytest.skip("probes/build/proberows.h not built (make -C probes)")
    assert built.read_text() == proberows.c_header(proberows.load())


def test_the_header_declares_each_struct_and_an_emit_macro_per_row():
    h = proberows.c_header(proberows.load())
    assert "struct task_times {" in h and "\tchar comm[16];" in h
    assert "#define EMIT_ROW_TASKS(w, row_) do {" in h
    # a key written only where its condition holds: the wakee's futex, an address
    assert 'if (row__->k.uaddr) jw_khex(w, "uaddr", row__->k.uaddr);' in h


@dataclasses.dataclass
class Good:
    tid: int
    comm: str = ""
    uaddr: Optional[int] = optional(hex=True)


@dataclasses.dataclass
class Bad:
    tid: str                                   # written as u64
    comm: str                                  # may be left out, no default
    uaddr: int = dataclasses.field(default=0)  # an address in the loader, not here
    extra: int = 0                             # never written


ROW = """
[[struct]]
name = "r"
members = [["tid", "__u32"], ["comm", "char[16]"], ["uaddr", "__u64"]]

[[row]]
json = "rows"
dataclass = "{cls}"
c_type = "struct r"
fields = [["tid", "u64", "r->tid"], ["comm", "utf8", "r->comm", "r->comm[0]"],
          ["uaddr", "hex", "r->uaddr", "r->uaddr"]]
"""


def _table(tmp_path, cls: str):
    path = tmp_path / "rows.toml"
    path.write_text(ROW.format(cls=cls))
    return proberows.load(path)


def test_each_kind_of_disagreement_is_named(tmp_path):
    mod = types.SimpleNamespace(__name__="m", Good=Good, Bad=Bad)
    assert proberows.check(_table(tmp_path, "Good"), mod) == []
    bad = proberows.check(_table(tmp_path, "Bad"), mod)
    assert "[[row]] rows: Bad.extra is never written by the loader" in bad
    assert "[[row]] rows: tid is written as u64, Bad.tid is str" in bad
    assert "[[row]] rows: comm may be left out, Bad.comm has no default" in bad
    assert "[[row]] rows: uaddr is an address (hex) in the loader, not in Bad" in bad
    assert proberows.check(_table(tmp_path, "Nope"), mod) == ["[[row]] rows: no dataclass Nope in m"]
    # a field lockscope sets itself (at record time) is declared so, not written by the loader
    path = tmp_path / "derived.toml"
    path.write_text(ROW.format(cls="Good").replace('c_type = "struct r"', 'c_type = "struct r"\nderived = ["extra"]'))
    mod.Good2 = dataclasses.make_dataclass("Good2", [("extra", int, dataclasses.field(default=0))], bases=(Good,))
    t = proberows.load(path)
    assert proberows.check(t, types.SimpleNamespace(__name__="m", Good=mod.Good2)) == []


def test_a_disagreement_stops_the_build(tmp_path):
    path = tmp_path / "rows.toml"
    # probedata.TaskTimes is read from a row that lacks most of its fields
    path.write_text(ROW.format(cls="TaskTimes"))
    p = subprocess.run([sys.executable, str(GEN), str(path)], capture_output=True, text=True, cwd=GEN.parent)
    assert p.returncode == 1 and p.stdout == ""
    assert "gen_proberows.py: [[row]] rows: TaskTimes.on_cpu_ns is never written by the loader" in p.stderr
    assert "uaddr" in p.stderr and "TaskTimes has no such field" in p.stderr


def test_a_bad_member_names_the_entry(tmp_path):
    path = tmp_path / "rows.toml"
    path.write_text('[[struct]]\nname = "s"\nmembers = [["x", "int"]]\n\n[[row]]\njson = "a"\ndataclass = "A"\n'
                    'c_type = "struct s"\nfields = []\n')
    from lockscope.errors import TableError
    with pytest.raises(TableError, match=r"\[\[struct\]\] #1 \(s\).*member \['x', 'int'\]"):
        proberows.load(path)


def test_hex_metadata_is_what_the_check_reads():
    # the dataclass convention the check relies on: an address field carries HEX
    uaddr = next(f for f in dataclasses.fields(probedata.Wakeup) if f.name == "uaddr")
    assert uaddr.metadata.get("hex") is True and HEX == {"hex": True}


def test_shared_constants_are_the_tables_on_both_sides():
    """A number both sides use is a [[constant]]: a #define in the header and
    the same value where Python reads it."""
    from lockscope.model import holddata
    from lockscope.analyzer import folded
    from lockscope.analyzer.kernel import ktext
    from lockscope.analyzer.user import jvmframes, unwind, usdt
    h = proberows.c_header(proberows.load())
    assert "#define JVM_METHOD_FRAME (1ULL << 63)" in h and "#define STACK_USER (-3)" in h
    assert "#define USDT_NAME_LEN 104" in h
    assert jvmframes.METHOD_FRAME == 1 << 63 and holddata.USDT_LOCK == 1 << 62 and folded.STACK_USER == -3
    assert ktext.KTEXT_BYTES == 32 and unwind.MAX_UNWIND_DEPTH == 64 and usdt.MAX_NAME == 103
    # the attach cookie usdt.bpf.c decodes: entry, name argument, flags, mode argument, value mask
    specs = [q for p in usdt.default().programs for q in p.probes]
    hotspot = next(q for q in specs if q.name_from == "hotspot_monitor")
    assert hotspot.cookie & (1 << 13) and not hotspot.cookie & (1 << 14)
    for q in specs:
        c = q.cookie
        assert (c & 0xFF, (c >> 8) & 0xF, (c >> 16) & 0xF, (c >> 20) & 0xF, c >> 32) == \
            (q.entry, q.name_arg, q.mode_arg, q.name_len_arg, sum(1 << v for v in q.only)), q
        assert bool(c & (1 << 12)) == q.name_string and bool(c & (1 << 15)) == bool(q.name_suffixes)
    with pytest.raises(KeyError, match="no \\[\\[constant\\]\\] NOPE"):
        proberows.constant("NOPE")


def test_a_constant_declared_twice_or_without_a_value_names_the_entry(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[constant]]\nname = "A"\nvalue = 1\n\n[[constant]]\nname = "A"\nvalue = 2\n')
    with pytest.raises(Exception, match="constant A is declared already"):
        proberows.load(path)
    path.write_text('[[constant]]\nname = "B"\n')
    with pytest.raises(Exception, match="value = N or bit = N"):
        proberows.load(path)
