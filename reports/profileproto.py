"""A minimal writer of pprof's profile.proto (the format `go tool pprof`,
Pyroscope, Parca and Cloud Profiler read), for reports/pprof.py.

The `protobuf` package is not a lockscope dependency, and the message is
small and fixed, so this module writes its wire format itself: varints
(wire type 0) and length-delimited fields (wire type 2; packed repeated
integers, strings, embedded messages). Field numbers are those of
github.com/google/pprof proto/profile.proto (package perftools.profiles):

- Profile: sample_type 1, sample 2, mapping 3, location 4, function 5,
  string_table 6, time_nanos 9, duration_nanos 10, period_type 11,
  period 12, comment 13, default_sample_type 14
- ValueType: type 1, unit 2
- Sample: location_id 1 (packed, leaf first), value 2 (packed), label 3
- Label: key 1, str 2, num 3
- Mapping: id 1, filename 5, has_functions 7
- Location: id 1, mapping_id 2, line 4
- Line: function_id 1
- Function: id 1, name 2, filename 4

The string table starts with "" (index 0, as the format requires);
mapping, location and function ids start at 1. Frames are symbolic (a
function name and the object it is in), so a location has no address and
every mapping says has_functions, so that readers do not try to symbolize
it. Names are written as they are shown (demangled, or a lock's name)
and system_name is left empty: pprof then takes them as demangled already
and does not cut a `(...)` or `<...>` out of them as from a C++ name. The result is the uncompressed message; on disk it is gzipped
(`Profile.gzipped`)."""
from __future__ import annotations

import gzip


# ---- wire format -------------------------------------------------------------

def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1            # int64: negative numbers as ten-byte two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, n: int) -> bytes:
    """A varint field; zero (the proto3 default) is left out."""
    return _key(field, 0) + _varint(n) if n else b""


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _packed(field: int, nums: list[int]) -> bytes:
    return _bytes(field, b"".join(_varint(n) for n in nums)) if nums else b""


# ---- the profile ---------------------------------------------------------------

class Profile:
    """A profile built frame by frame: `sample(frames, values, labels)` with
    frames leaf first, each a (function, object file) pair; functions,
    locations and mappings are made once each."""

    def __init__(self, sample_types: list[tuple[str, str]], period_type: tuple[str, str], period: int,
                 time_nanos: int = 0, duration_nanos: int = 0, comments: list[str] | None = None,
                 default_sample_type: str | None = None, main_file: str | None = None):
        self.strings: dict[str, int] = {"": 0}
        self.sample_types = [(self.s(t), self.s(u)) for t, u in sample_types]
        self.period_type = (self.s(period_type[0]), self.s(period_type[1]))
        self.period, self.time_nanos, self.duration_nanos = period, time_nanos, duration_nanos
        self.comments = [self.s(c) for c in comments or []]
        self.default_sample_type = self.s(default_sample_type) if default_sample_type else 0
        self.mappings: dict[str, int] = {}
        if main_file:                          # mapping[0], the main binary: what readers show as "File"
            self.mappings[main_file] = 1
            self.s(main_file)
        self.functions: dict[tuple[str, str], int] = {}
        self.locations: dict[tuple[str, str], int] = {}
        self.samples: dict[tuple, list[int]] = {}

    def s(self, text: str) -> int:
        """The string's index in the string table."""
        return self.strings.setdefault(text, len(self.strings))

    def location(self, function: str, file: str) -> int:
        key = (function, file)
        loc = self.locations.get(key)
        if loc is None:
            self.mappings.setdefault(file, len(self.mappings) + 1)
            self.functions[key] = len(self.functions) + 1
            loc = self.locations[key] = len(self.locations) + 1
            self.s(function), self.s(file)
        return loc

    def sample(self, frames: list[tuple[str, str]], values: list[int],
               labels: dict[str, str] | None = None) -> None:
        """Add values to the sample of this stack (leaf first) and labels."""
        if len(values) != len(self.sample_types):
            raise ValueError(f"{len(values)} values for {len(self.sample_types)} sample types")
        key = (tuple(self.location(f, o) for f, o in frames),
               tuple(sorted((self.s(k), self.s(v)) for k, v in (labels or {}).items())))
        have = self.samples.setdefault(key, [0] * len(values))
        for i, v in enumerate(values):
            have[i] += int(v)

    @property
    def total(self) -> list[int]:
        return [sum(v[i] for v in self.samples.values()) for i in range(len(self.sample_types))]

    def serialize(self) -> bytes:
        out = bytearray()
        for t, u in self.sample_types:
            out += _bytes(1, _int(1, t) + _int(2, u))
        for (locs, labels), values in self.samples.items():
            msg = _packed(1, list(locs)) + _packed(2, values)
            msg += b"".join(_bytes(3, _int(1, k) + _int(2, v)) for k, v in labels)
            out += _bytes(2, msg)
        for file, mid in self.mappings.items():
            out += _bytes(3, _int(1, mid) + _int(5, self.strings[file]) + _int(7, 1))
        for (fn, file), lid in self.locations.items():
            line = _bytes(4, _int(1, self.functions[(fn, file)]))
            out += _bytes(4, _int(1, lid) + _int(2, self.mappings[file]) + line)
        for (fn, file), fid in self.functions.items():
            out += _bytes(5, _int(1, fid) + _int(2, self.strings[fn]) + _int(4, self.strings[file]))
        for text in self.strings:              # insertion order is index order, "" first
            out += _bytes(6, text.encode())
        out += _int(9, self.time_nanos) + _int(10, self.duration_nanos)
        out += _bytes(11, _int(1, self.period_type[0]) + _int(2, self.period_type[1]))
        out += _int(12, self.period)
        out += b"".join(_int(13, c) for c in self.comments)
        out += _int(14, self.default_sample_type)
        return bytes(out)

    def gzipped(self) -> bytes:
        return gzip.compress(self.serialize(), mtime=0)
