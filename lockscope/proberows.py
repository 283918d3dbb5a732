"""The probe's records declared once (proberows.toml): the C structs the BPF
side fills and the loader reads, the JSON rows the loader emits from them,
each checked against the dataclass of lockscope/model/probedata.py that reads it,
and the numbers both sides share (`constant`). probes/gen_proberows.py writes probes/build/proberows.h from the
table (the structs, and an emit macro per row that the loader's loop calls)
and runs `check`, so that a field added in one place and not the others
fails the build, not a run (tests/test_proberows.py checks it too).

Loaded by path by the generator before the package is installed: it imports
only the standard library and lockscope.tables (and, to check, probedata)."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import re
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):     # loaded by path (probes/gen_proberows.py): this source tree's lockscope
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lockscope import tables  # noqa: E402
from lockscope.model.jsondata import KernelObject, json_name  # noqa: E402

TABLE_FILE = Path(__file__).with_name("proberows.toml")
# a row field's writer: the loader's jsonw call and the Python type it reads as
# (str: text the loader made, escaped as JSON; utf8: text read from a program, any bytes made
# valid; bytes: "pointer, length" written as hex text; call: a C statement that writes the value
# after its key, of no type the check can tell)
WRITERS = {"u64": ("jw_ku64", int), "i64": ("jw_ki64", int), "utf8": ("jw_kutf8", str), "str": ("jw_kstr", str),
           "bool": ("jw_kbool", bool), "hex": ("jw_khex", int), "bytes": ("jw_kbytes", str), "call": (None, None)}
C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
C_TYPE = re.compile(r"(__[us](8|16|32|64)|char|struct [A-Za-z_][A-Za-z0-9_]*)(\[[0-9]+\])?")


@dataclass(frozen=True)
class Member:
    name: str
    type: str             # a C type; "char[16]": an array
    doc: str = ""

    def c(self) -> str:
        base, _, n = self.type.partition("[")
        decl = f"{base} {self.name}" + (f"[{n}" if n else "") + ";"
        return f"\t{decl:<32}/* {self.doc} */" if self.doc else f"\t{decl}"


@dataclass(frozen=True)
class Struct:
    """[[struct]]: a C struct of the probe's data."""
    name: str
    members: list[list[str]]
    doc: str = ""

    def __post_init__(self):
        if not C_NAME.fullmatch(self.name):
            raise ValueError(f"name {self.name!r} is not a C identifier")
        for m in self.members:
            if len(m) not in (2, 3) or not C_NAME.fullmatch(m[0]) or not C_TYPE.fullmatch(m[1]):
                raise ValueError(f"member {m!r} is not [name, C type (__u64, char[16], struct x), comment]")

    def member_list(self) -> list[Member]:
        return [Member(*m) for m in self.members]


@dataclass(frozen=True)
class Field:
    name: str             # its JSON key, the dataclass attribute
    write: str            # a key of WRITERS
    c: str                # C expression of the row pointer r
    when: str = ""        # C condition of r: written only where it holds ("": always)


@dataclass(frozen=True)
class Row:
    """[[row]]: a JSON array of the data event, one object per loader row."""
    json: str
    dataclass: str        # in lockscope/model/probedata.py, or "module.Class" of another lockscope module
    c_type: str
    fields: list[list[str]]
    derived: list[str] = dataclasses.field(default_factory=list)   # the dataclass's own (set by lockscope)
    raw: list[str] = dataclasses.field(default_factory=list)       # keys read from the row itself, no field
    tail: str = ""        # C statements (of w and r) after the fields: keys the table does not list

    def __post_init__(self):
        for f in self.fields:
            if len(f) not in (3, 4) or f[1] not in WRITERS:
                raise ValueError(f"field {f!r} is not [key, writer ({', '.join(WRITERS)}), C expression, condition]")

    def field_list(self) -> list[Field]:
        return [Field(*f) for f in self.fields]

    @property
    def macro(self) -> str:
        return "EMIT_ROW_" + re.sub(r"\W", "_", self.json).upper()


@dataclass(frozen=True)
class Constant:
    """[[constant]]: a number the C and Python sides share."""
    name: str
    doc: str = ""
    value: int | None = None
    bit: int | None = None     # 1 << bit: an unsigned 64-bit mask

    def __post_init__(self):
        if not C_NAME.fullmatch(self.name):
            raise ValueError(f"name {self.name!r} is not a C identifier")
        if (self.value is None) == (self.bit is None) or self.bit is not None and not 0 <= self.bit < 64:
            raise ValueError("needs one of value = N or bit = N (0-63)")

    @property
    def number(self) -> int:
        return self.value if self.bit is None else 1 << self.bit

    def c(self) -> str:
        v = f"(1ULL << {self.bit})" if self.bit is not None else f"({self.value})" if self.value < 0 else str(self.value)
        return f"#define {self.name} {v}" + (f"\t/* {self.doc} */" if self.doc else "")


@dataclass
class File:
    struct: list[Struct] = dataclasses.field(default_factory=list)
    row: list[Row] = dataclasses.field(default_factory=list)
    constant: list[Constant] = dataclasses.field(default_factory=list)


def load(path: Path | str = TABLE_FILE) -> File:
    f = tables.load(path, File)
    for table, items in (("struct", f.struct), ("constant", f.constant)):
        names = [s.name for s in items]
        for i, s in enumerate(items):
            if s.name in names[:i]:
                raise tables.error(path, tables.where(table, i, s.name), f"{table} {s.name} is declared already")
    return f


@functools.lru_cache(maxsize=1)
def _constants() -> dict[str, int]:
    return {c.name: c.number for c in load().constant}


def constant(name: str) -> int:
    """A [[constant]] of the table, as the C side sees it (JVM_METHOD_FRAME)."""
    try:
        return _constants()[name]
    except KeyError:
        raise KeyError(f"{TABLE_FILE.name} has no [[constant]] {name}") from None


_R = re.compile(r"(?<![\w.>])r\b")     # the row r, not a member .r or ->r


def c_header(f: File) -> str:
    """probes/build/proberows.h: the structs, then an emit macro per row
    (expanded in the loader only: the BPF side sees the structs)."""
    out = ["/* Generated by probes/gen_proberows.py from lockscope/proberows.toml: do not edit. */",
           "#ifndef LOCKSCOPE_PROBEROWS_H", "#define LOCKSCOPE_PROBEROWS_H", ""]
    out += [c.c() for c in f.constant] + ([""] if f.constant else [])
    for s in f.struct:
        if s.doc:
            out.append(f"/* {s.doc} */")
        out += [f"struct {s.name} {{", *[m.c() for m in s.member_list()], "};", ""]
    for r in f.row:
        body = ["const " + r.c_type + " *row__ = (row_);", "jw_obj(w);"]
        for fl in r.field_list():
            expr = _R.sub("row__", fl.c)
            call = (f'{{ jw_key(w, "{fl.name}"); {expr}; }}' if fl.write == "call" else
                    f'{WRITERS[fl.write][0]}(w, "{fl.name}", {expr});')
            body.append(f"if ({_R.sub('row__', fl.when)}) {call}" if fl.when else call)
        if r.tail:
            body.append(_R.sub("row__", r.tail).rstrip(";") + ";")
        body.append("jw_obj_end(w);")
        out.append(f'/* one object of the "{r.json}" rows (lockscope/model/probedata.py {r.dataclass}) */')
        lines = [f"#define {r.macro}(w, row_) do {{"] + [f"\t{b}" for b in body] + ["} while (0)"]
        width = max(len(ln.expandtabs(8)) for ln in lines) + 1
        out += [ln + " " * (width - len(ln.expandtabs(8))) + "\\" for ln in lines[:-1]] + [lines[-1], ""]
    out.append("#endif")
    return "\n".join(out) + "\n"


def dataclass_of(r: Row, module):
    """The class a row names: `module`'s (lockscope.model.probedata), or, for
    "holddata.Release", lockscope.model.holddata's; None when there is none."""
    mod, _, name = r.dataclass.rpartition(".")
    if mod:
        try:
            module = importlib.import_module(f"lockscope.model.{mod}")
        except ImportError:
            return None
    cls = getattr(module, name, None)
    return cls if cls is not None and dataclasses.is_dataclass(cls) else None


def check(f: File, module) -> list[str]:
    """Each row against its dataclass (dataclass_of): the same keys (but
    `derived`), each of the writer's type, a default where the loader may
    leave the key out, HEX on addresses. The mismatches, in words ([] when
    none)."""
    bad = []
    for r in f.row:
        cls = dataclass_of(r, module)
        if cls is None:
            bad.append(f"[[row]] {r.json}: no dataclass {r.dataclass} in {module.__name__}")
            continue
        hints = typing.get_type_hints(cls)
        # a kernel object keeps the keys it has no field for (its addresses, the rest as it came)
        kobj = issubclass(cls, KernelObject)
        derived = set(r.derived) | ({"addresses", "extra"} if kobj else set())
        attrs = {json_name(fd): fd for fd in dataclasses.fields(cls) if fd.name not in derived}
        keys = {fl.name: fl for fl in r.field_list() if fl.name not in r.raw and (fl.name in attrs or not kobj)}
        for name in sorted(set(keys) - set(attrs)):
            bad.append(f"[[row]] {r.json}: the loader writes {name!r}, {r.dataclass} has no such field")
        for name in sorted(set(attrs) - set(keys)):
            bad.append(f"[[row]] {r.json}: {r.dataclass}.{name} is never written by the loader")
        for name in sorted(set(keys) & set(attrs)):
            fl, fd = keys[name], attrs[name]
            want = WRITERS[fl.write][1]
            got = hints[fd.name]
            if typing.get_origin(got) is typing.Union:
                got = next((a for a in typing.get_args(got) if a is not type(None)), got)
            if want is not None and got is not want:
                bad.append(f"[[row]] {r.json}: {name} is written as {fl.write}, {r.dataclass}.{name} is "
                           f"{getattr(got, '__name__', got)}")
            if fl.when and fd.default is dataclasses.MISSING and fd.default_factory is dataclasses.MISSING:
                bad.append(f"[[row]] {r.json}: {name} may be left out, {r.dataclass}.{name} has no default")
            if (fl.write == "hex") != bool(fd.metadata.get("hex")):
                bad.append(f"[[row]] {r.json}: {name} is {'' if fl.write == 'hex' else 'not '}an address "
                           f"(hex) in the loader, {'not ' if fl.write == 'hex' else ''}in {r.dataclass}")
    return bad
