"""Dataclasses to and from JSON-ready dicts: the one conversion behind the
run record (record.py) and the probe's raw data (probedata.py), and the one
place where addresses are parsed from and written as hex text.

Field metadata says how a field is written:
- `json`: the JSON key, where it differs from the Python name (`class`);
- `omit_empty`: left out while empty (optional additions of a later
  version, so that older records round-trip unchanged);
- `omit_none`: left out while None (keys the probe writes only sometimes);
- `hex`: an address, an int here and `"0x..."` in JSON;
- `empty_is_none`: None here, `{}` in JSON (a section that was not measured).
A class may define `to_json(self)` and `from_json(cls, data)` instead.

A bad value is a ValueError naming its path: `field locks[3].stacks:
expected a list, got an object` (list items counted from 0).
"""
from __future__ import annotations

import dataclasses
from dataclasses import fields
import functools
import types
import typing
from typing import Any

HEX = {"hex": True}


def optional(**metadata: Any) -> Any:
    """A dataclass field that is None, and left out of the JSON, unless set."""
    return dataclasses.field(default=None, metadata={"omit_none": True, **metadata})


def parse_addr(v: Any) -> int:
    """An address as the probe writes it ("0xffff...") or as a number."""
    return int(v, 16) if isinstance(v, str) else int(v or 0)


def format_addr(a: int) -> str:
    return f"0x{a:x}"


def json_name(f: dataclasses.Field) -> str:
    return f.metadata.get("json", f.name)


def _omitted(f: dataclasses.Field, value: Any) -> bool:
    return bool((f.metadata.get("omit_empty") and not value) or (f.metadata.get("omit_none") and value is None))


def _field_to_json(f: dataclasses.Field, value: Any) -> Any:
    if value is None:
        return {} if f.metadata.get("empty_is_none") else None
    if f.metadata.get("hex"):
        return format_addr(value)
    return to_dict(value)


def to_dict(obj: Any) -> Any:
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if dataclasses.is_dataclass(obj):
        return {json_name(f): _field_to_json(f, getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not _omitted(f, getattr(obj, f.name))}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def _expect(ok: bool, want: str, value: Any) -> None:
    if not ok:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"expected {want}, got {_kind(value)} {shown}")


def _at(step: str, e: Exception) -> ValueError:
    """Error `e` with `step` (a field or key name, or "[i]" for a list's
    item) put in front of the path it names: "field locks[3].stacks: ..."."""
    msg = str(e)
    path, sep, rest = msg[6:].partition(": ") if msg.startswith("field ") else ("", "", "")
    if not sep:
        return ValueError(f"field {step}: {msg}")
    return ValueError(f"field {step}{'' if path.startswith('[') else '.'}{path}: {rest}")


def convert(tp: Any, value: Any, strict: bool = False) -> Any:
    """`value` as read from JSON or TOML, as type `tp` (a dataclass, list,
    tuple[X, ...], dict or plain type): checked, or a ValueError naming
    the path to what is wrong; `strict` as for from_dict."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return convert(inner[0], value, strict) if len(inner) == 1 else value
    if origin is list or (origin is tuple and typing.get_args(tp)[1:] == (...,)):
        _expect(isinstance(value, list), "a list", value)
        item = (typing.get_args(tp) or (Any,))[0]
        out = []
        for i, v in enumerate(value):
            try:
                out.append(convert(item, v, strict))
            except (ValueError, TypeError, AttributeError, KeyError) as e:
                raise _at(f"[{i}]", e) from None
        return out if origin is list else tuple(out)      # tuple[X, ...]: a JSON list too
    if origin is dict and len(typing.get_args(tp)) == 2:
        _expect(isinstance(value, dict), "an object", value)
        key, item = typing.get_args(tp)
        out_d = {}
        for k, v in value.items():
            try:
                k2 = int(k) if key is int else k
            except (TypeError, ValueError) as e:
                raise ValueError(f"bad key: {e}") from None
            try:
                out_d[k2] = convert(item, v, strict)
            except (ValueError, TypeError, AttributeError, KeyError) as e:
                raise _at(str(k), e) from None
        return out_d
    if tp is bool:
        _expect(isinstance(value, bool), "true or false", value)
    elif tp is int:
        _expect(isinstance(value, int) and not isinstance(value, bool), "an integer", value)
    elif tp is float:
        _expect(isinstance(value, (int, float)) and not isinstance(value, bool), "a number", value)
    elif tp is str:
        _expect(isinstance(value, str), "a string", value)
    elif tp in (dict, list):
        _expect(isinstance(value, tp), "an object" if tp is dict else "a list", value)
    if hasattr(tp, "from_json"):
        return tp.from_json(value)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, strict)
    return value


def _field_from_json(f: dataclasses.Field, tp: Any, value: Any, strict: bool) -> Any:
    if f.metadata.get("empty_is_none") and value == {}:
        return None
    if f.metadata.get("hex") and value is not None:
        return parse_addr(value)
    return convert(tp, value, strict)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types, resolved once per class: get_type_hints
    compiles every string annotation at each call (104,000 compiles, 1.6 s
    of CPU, to read one Exim record)."""
    return typing.get_type_hints(cls)


def from_dict(cls: type, data: dict, strict: bool = False) -> Any:
    """Build dataclass `cls` from a dict, using defaults for missing optional
    keys and ignoring unknown ones (newer minor additions), or, `strict`
    (a table lockscope ships), refusing them."""
    if not isinstance(data, dict):
        raise ValueError(f"expected an object for {cls.__name__}, got {type(data).__name__}")
    if hasattr(cls, "from_json"):
        return cls.from_json(data)
    hints = _hints(cls)
    if strict:
        unknown = set(data) - {json_name(f) for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown keys {', '.join(sorted(map(str, unknown)))}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = json_name(f)
        if key in data:
            try:
                kwargs[f.name] = _field_from_json(f, hints[f.name], data[key], strict)
            except (ValueError, TypeError, AttributeError, KeyError) as e:
                raise _at(key, e) from None     # "field locks.stacks.count: expected an integer ..."
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"missing field '{key}'")
    return cls(**kwargs)


def from_list(cls: type, rows: list[dict]) -> list:
    return [from_dict(cls, r) for r in rows]


def _split(cls: type, data: dict) -> dict:
    """The typed identity fields of an object, and its other keys: hex text
    is a lock (or object) address, anything else is kept as it came."""
    typed = {f.name for f in fields(cls)} - {"addresses", "extra"}
    kwargs: dict[str, Any] = {k: v for k, v in data.items() if k in typed}
    rest = {k: v for k, v in data.items() if k not in typed}
    kwargs["addresses"] = {k: parse_addr(v) for k, v in rest.items() if isinstance(v, str) and v.startswith("0x")}
    kwargs["extra"] = {k: v for k, v in rest.items() if k not in kwargs["addresses"]}
    return kwargs


def _join(obj: Any) -> dict:
    out = {f.name: getattr(obj, f.name) for f in fields(obj)
           if f.name not in ("addresses", "extra") and getattr(obj, f.name) is not None}
    return {**out, **{k: format_addr(a) for k, a in obj.addresses.items()}, **obj.extra}


class KernelObject:
    """An object with typed identity fields, its lock-field addresses by the
    probe's key (`addresses`) and any other key as it came (`extra`)."""
    addresses: dict[str, int]
    extra: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict) -> Any:
        return cls(**_split(cls, data))

    def to_json(self) -> dict:
        return _join(self)
