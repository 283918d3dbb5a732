"""The one loader of lockscope's TOML tables (locks.toml, sleepkinds.toml,
apps.toml, ...): a file read with tomllib and converted, every key checked
(its type, whether it is required, whether it is known), into the
dataclasses its module declares, by jsondata.from_dict. A bad entry is a
TableError naming the file, the table and the entry:

    sleepkinds.toml: [[spin]] #7 (pthread_spinlock): field functions: expected a list, got a string 'x'

- `load(path, Row, table="name")`: a file of one array of tables
  ([[name]] entries), as a list of Row;
- `load(path, File)`: a file of several tables, as dataclass File, one field
  per table: `list[Row]` an array of tables ([[rule]]), `dict[str, Row]`
  tables of named entries ([kind.pipe], the key the entry's name), a
  dataclass one table ([frames]), any other type a table of plain values
  ([slab], as `dict[str, str]`); a field with a default is a table the file
  may leave out, and a table File does not declare is refused;
- `parse(doc, ...)`: the same for a document already parsed.

An entry of an array is named by its number, from 1, and by its first
field where that is a string (`[[app]] #2 (dbench)`); an item of a list
inside it by its index, from 0 (`field probe[1].name_arg`). A check of the
module's own, beyond types (a cross-reference, a regex that must compile),
is a ValueError raised by the row's `__post_init__` (named like a type
error), or `error(path, where(table, i, name), what)` for one that spans
entries.
"""
from __future__ import annotations

import dataclasses
import tomllib
import typing
from pathlib import Path
from typing import Any

from lockscope.errors import TableError
from lockscope.model.jsondata import convert, from_dict, json_name

ROOT = Path(__file__).resolve().parents[1]      # the source tree (or site-packages): paths in fixes


def error(path: Path | str, where: str, what: str) -> TableError:
    """The error for a bad entry of the table file at `path`."""
    p = Path(path).resolve()
    shown = str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
    return TableError(p.name, where, what, shown)


def where(table: str, i: int | None = None, name: Any = None) -> str:
    """How a message names table `table` ([table]), or its entry `i` (from 0)
    of an array of tables ([[table]] #i+1 (name))."""
    if i is None:
        return f"[{table}]"
    return f"[[{table}]] #{i + 1}" + (f" ({name})" if isinstance(name, str) and name else "")


def read(path: Path | str) -> dict:
    """A TOML file, parsed (TableError when it is not TOML)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise error(path, "", f"not valid TOML: {e}") from None


def load(path: Path | str, cls: type, table: str | None = None) -> Any:
    """The table file at `path` as `cls` (see the module's docstring)."""
    return parse(read(path), cls, table, path)


def parse(doc: dict, cls: type, table: str | None, path: Path | str) -> Any:
    """A parsed table file `doc` (read from `path`) as `cls`: with `table`,
    the list of its [[table]] entries as `cls`; else `cls` is the file."""
    if table is not None:
        entries = dataclasses.field(default_factory=list, metadata={"json": table})
        return parse(doc, dataclasses.make_dataclass("File", [("entries", list[cls], entries)]), None, path).entries
    hints = typing.get_type_hints(cls)
    known = {json_name(f): f for f in dataclasses.fields(cls)}
    for key, value in doc.items():
        if key not in known:
            raise error(path, _spelled(key, value), f"unknown table (this file has {', '.join(known)})")
    kwargs = {}
    for key, f in known.items():
        if key in doc:
            kwargs[f.name] = _table(path, key, hints[f.name], doc[key])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise error(path, _spelled(key, [{}] if _is_array(hints[f.name]) else {}), "missing table")
    try:
        return cls(**kwargs)
    except ValueError as e:       # a check across tables (File.__post_init__), its message naming the entry
        raise error(path, "", str(e)) from None


def _is_array(tp: Any) -> bool:
    return typing.get_origin(tp) is list and dataclasses.is_dataclass(typing.get_args(tp)[0])


def _spelled(key: str, value: Any) -> str:
    """A table's name as the file writes it: [[rule]], [frames], or a key."""
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return f"[[{key}]]"
    return f"[{key}]" if isinstance(value, dict) else key


def _table(path: Path | str, key: str, tp: Any, value: Any) -> Any:
    args = typing.get_args(tp)
    if _is_array(tp):
        if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
            raise error(path, _spelled(key, value), f"expected an array of tables ([[{key}]] entries)")
        first = json_name(dataclasses.fields(args[0])[0])
        return [_entry(path, where(key, i, e.get(first)), args[0], e) for i, e in enumerate(value)]
    if typing.get_origin(tp) is dict and dataclasses.is_dataclass(args[1]):
        if not isinstance(value, dict) or not all(isinstance(e, dict) for e in value.values()):
            raise error(path, _spelled(key, value), f"expected tables of named entries ([{key}.NAME])")
        return {name: _entry(path, f"[{key}.{name}]", args[1], e) for name, e in value.items()}
    try:
        return convert(tp, value, strict=True)
    except (ValueError, TypeError) as e:
        raise error(path, _spelled(key, value), str(e)) from None


def _entry(path: Path | str, at: str, cls: type, data: dict) -> Any:
    """One entry: its unknown and missing keys all named at once, then its
    fields converted and its own checks (`__post_init__`) run."""
    keys = {json_name(f): f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise error(path, at, f"unknown keys {', '.join(unknown)}")
    missing = [k for k, f in keys.items() if k not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise error(path, at, f"missing {', '.join(missing)}")
    try:
        return from_dict(cls, data, strict=True)
    except ValueError as e:
        raise error(path, at, str(e)) from None
