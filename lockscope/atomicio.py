"""Writing files atomically: a reader sees the old file or the whole new one,
never a part (temp file in the same directory, fsync, rename, fsync of the
directory). Every file lockscope writes goes through here."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: Path, data: Any) -> None:
    """JSON as every lockscope file has it: indent 1, keys in order, a final
    newline. Serialized before the file is touched, so a value that cannot be
    encoded leaves the old file."""
    write_text(path, json.dumps(data, indent=1, sort_keys=False) + "\n")
