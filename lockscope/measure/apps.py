"""Application workloads: real programs from Debian packages (RocksDB's
db_bench, dbench, ...), one entry each in apps.toml, run as command
experiments on the chosen file system with their throughput read from their
own output. This module reads and checks the table, says whether a program
is installed, and turns an entry, the window and its parameters into what
the runner runs (point_fields). Adding an application is one table entry."""
from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockscope import tables
from lockscope.errors import EnvironmentProblem, TableError, UsageError

TABLE = Path(__file__).resolve().with_name("apps.toml")
KIND = "application"
DEFAULT_MAX_WORKERS = 1024
# placeholders every command may use besides its parameters; {python} (only
# as a command's first word) is lockscope's own interpreter, running a load
# generator of lockscope's (python -m lockscope.measure....)
BUILTIN_PLACEHOLDERS = ("n", "dir", "duration", "python")
PYTHON = "{python}"
APPFILES = TABLE.with_name("appfiles")     # [app.server] write: the files a server's configuration is made from
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PARAM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

_PARAM_KEYS = ("name", "default", "min", "max", "help")
_CHOICE_KEYS = ("name", "default", "choices", "help")     # a parameter that is one of some words
# [app.server]: a server the command is a client of, started for each point
_SERVER_KEYS = ("user", "init", "start", "ready")
_SERVER_OPTIONAL = ("stop", "write")
SERVER_PLACEHOLDERS = ("port",)           # a free port lockscope picks for each point


@dataclass(frozen=True)
class App:
    name: str
    package: str                       # the Debian package that installs it
    binary: str                        # the program, found on PATH
    operation: str
    sharing: str
    component: str                     # what it stresses
    model: str                         # process | thread
    command: tuple[str, ...]           # with placeholders
    throughput_regex: str
    unit: str
    prepare: tuple[str, ...] = ()      # run before the window, not measured
    files: tuple[str, ...] = ()        # other files the package installs that it needs
    params: tuple[dict, ...] = ()
    max_workers: int = DEFAULT_MAX_WORKERS
    server: dict | None = None         # [app.server]: user, init (argvs), start, ready, stop
    target: str | None = None          # "server": the server's tasks are the work, the command drives the load

    @property
    def needs_dir(self) -> bool:
        return any("{dir}" in a for a in self.command + self.prepare + self._server_args())

    def _server_args(self) -> tuple[str, ...]:
        s = self.server or {}
        return tuple(a for argv in [*s.get("init", []), s.get("start", []), s.get("ready", []), s.get("stop", []),
                                    *s.get("write", [])] for a in argv)

    @property
    def install_command(self) -> str:
        return f"apt-get install {self.package}"

    def missing(self) -> str | None:
        """Why it cannot run here (its program or a file is missing), or None."""
        if not shutil.which(self.binary):
            return f"{self.binary} is not installed"
        for f in self.files:
            if not Path(f).exists():
                return f"{f} is missing"
        return None

    def require_installed(self) -> None:
        why = self.missing()
        if why:
            raise EnvironmentProblem(
                f"workload {self.name} needs {self.binary} from the Debian package {self.package}: {why} "
                f"(install it with `{self.install_command}`)",
                f"{self.install_command} (or `make deps`, which installs every package lockscope uses)")

    def check_duration(self, duration: float) -> int:
        """The window in whole seconds, as the program takes it."""
        if duration != int(duration) or duration < 1:
            raise UsageError(f"--duration {duration:g}: {self.name} ({self.binary}) takes whole seconds, at least 1")
        return int(duration)

    def values(self, params: dict[str, int | str]) -> dict[str, int | str]:
        """Its parameters, the defaults filled in for those not given."""
        return {p["name"]: params.get(p["name"], p["default"]) for p in self.params}

    def point_fields(self, duration: float, params: dict[str, int]) -> dict:
        """What the runner's PointSpec needs to run it: the command and its
        preparation ({n} and {dir} left for each point), the throughput
        regex and unit, the parameters and the application's identity."""
        values = {"duration": self.check_duration(duration), "python": sys.executable, **self.values(params)}

        def fill(argv: tuple[str, ...]) -> list[str]:
            return [_PLACEHOLDER.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], a) for a in argv]

        server = None
        if self.server:
            server = {"user": self.server["user"], "init": [fill(a) for a in self.server["init"]],
                      **{k: fill(self.server[k]) for k in ("start", "ready")},
                      "stop": fill(self.server["stop"]) if self.server.get("stop") else None,
                      # [path, text]: the text is the shipped file, its parameters filled in
                      "write": [[fill((path,))[0], fill_text((APPFILES / source).read_text(), values)]
                                for path, source in self.server.get("write", ())]}
        return {"command": fill(self.command), "prepare": fill(self.prepare) or None,
                "throughput_regex": self.throughput_regex, "throughput_unit": self.unit, "self_timed": True,
                "params": self.values(params), "application": self.identity(), "server": server,
                "target": self.target}

    def identity(self) -> dict[str, str]:
        """What the record says about the application."""
        out = {"name": self.name, "package": self.package, "binary": self.binary}
        version = package_version(self.package)
        if version:
            out["version"] = version
        return out

    def throughput(self, output: str) -> float | None:
        return parse_throughput(self.throughput_regex, output)

    def catalog_entry(self) -> dict:
        """The entry `lockscope list` shows, shaped like a built-in
        workload's, with what makes it an application."""
        why = self.missing()
        return {"name": self.name, "operation": self.operation, "sharing": self.sharing,
                "component": self.component, "model": self.model, "needs_dir": self.needs_dir,
                "params": [dict(p) for p in self.params], "max_workers": self.max_workers, "many_tasks": False,
                "kind": KIND, "package": self.package, "binary": self.binary, "installed": why is None,
                "missing": why, "install": self.install_command, "unit": self.unit,
                "command": list(self.command), "prepare": list(self.prepare) or None}


def fill_text(text: str, values: dict) -> str:
    """A shipped configuration file with the placeholders in `values`
    filled in; any other brace (the server's own syntax, e.g. Exim's
    ${...}) is left as it is."""
    for k, v in values.items():
        text = text.replace("{" + k + "}", str(v))
    return text


def parse_throughput(regex: str, output: str) -> float | None:
    """The first group of the last match of `regex` in a program's output."""
    matches = re.findall(regex, output)
    if not matches:
        return None
    last = matches[-1]
    return float(last if isinstance(last, str) else last[0])


@functools.lru_cache(maxsize=None)
def package_version(package: str) -> str | None:
    try:
        p = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() or None if p.returncode == 0 else None


# ---- the table ------------------------------------------------------------

@dataclass(frozen=True)
class _Entry:
    """[[app]] as the table writes it; _entry checks it and makes the App."""
    name: str
    package: str
    binary: str
    operation: str
    sharing: str
    component: str
    model: str
    command: Any                     # command, prepare, files: lists of non-empty strings (_strings)
    throughput_regex: str
    unit: str
    prepare: Any = field(default_factory=list)
    files: Any = field(default_factory=list)
    params: list[dict] = field(default_factory=list)      # [[app.params]] (_param)
    max_workers: int = DEFAULT_MAX_WORKERS
    server: dict | None = None                             # [app.server] (_server)
    target: str | None = None


def _bad(where: str, what: str) -> TableError:
    return tables.error(TABLE, where, what)


def _strings(value, where: str, key: str, allow_empty: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value) or \
            (not value and not allow_empty):
        raise _bad(where, f"{key} must be a list of non-empty strings")
    return tuple(value)


def _param(p, where: str) -> dict:
    if set(p) not in (set(_PARAM_KEYS), set(_CHOICE_KEYS)):
        raise _bad(where, f"each [[app.params]] has exactly {', '.join(_PARAM_KEYS)} "
                          f"(or {', '.join(_CHOICE_KEYS)})")
    name = p["name"]
    if not isinstance(name, str) or not _PARAM_NAME.match(name) or name in BUILTIN_PLACEHOLDERS:
        raise _bad(where, f"parameter name {name!r}: lower-case letters, digits and _, not "
                          f"{', '.join(BUILTIN_PLACEHOLDERS)}")
    if "choices" in p:
        choices = p["choices"]
        if not isinstance(choices, list) or not choices or \
                not all(isinstance(c, str) and _PARAM_NAME.match(c) for c in choices) or p["default"] not in choices:
            raise _bad(where, f"parameter {name}: choices are words (lower-case letters, digits, _), "
                              "the default one of them")
    else:
        nums = [p[k] for k in ("min", "default", "max")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in nums) or not nums[0] <= nums[1] <= nums[2]:
            raise _bad(where, f"parameter {name}: min <= default <= max, integers")
    if not isinstance(p["help"], str) or not p["help"]:
        raise _bad(where, f"parameter {name}: help is required")
    return dict(p)


def _entry(e: _Entry, i: int) -> App:
    where = tables.where("app", i, e.name)
    for k in ("name", "package", "binary", "operation", "sharing", "component", "model", "throughput_regex", "unit"):
        if not getattr(e, k).strip():
            raise _bad(where, f"{k} must be a non-empty string")
    if not _NAME.match(e.name):
        raise _bad(where, "name: letters, digits and ._- only")
    if e.model not in ("process", "thread"):
        raise _bad(where, "model is process or thread")
    command = _strings(e.command, where, "command")
    prepare = _strings(e.prepare, where, "prepare", allow_empty=True)
    files = _strings(e.files, where, "files", allow_empty=True)
    if any(not f.startswith("/") for f in files):
        raise _bad(where, "files are absolute paths")
    for key, argv in (("command", command), ("prepare", prepare)):
        if argv and argv[0] not in (e.binary, PYTHON):
            raise _bad(where, f"{key} must run its binary {e.binary!r} (or {PYTHON}, a load generator of "
                              f"lockscope's), not {argv[0]!r}")
        if PYTHON in argv[1:]:
            raise _bad(where, f"{key}: {PYTHON} is only a command's first word")
    params = tuple(_param(p, where) for p in e.params)
    names = [p["name"] for p in params]
    if len(set(names)) != len(names):
        raise _bad(where, "a parameter is declared twice")
    known = set(BUILTIN_PLACEHOLDERS) | set(names)
    server = _server(e.server, where, known | set(SERVER_PLACEHOLDERS)) if e.server is not None else None
    if server:
        known |= set(SERVER_PLACEHOLDERS)
    if e.target is not None and (e.target != "server" or server is None):
        raise _bad(where, 'target is "server", with an [app.server] table')
    for key, argv in (("command", command), ("prepare", prepare)):
        used = {m for a in argv for m in _PLACEHOLDER.findall(a)}
        if used - known:
            raise _bad(where, f"{key} uses unknown placeholders {', '.join('{' + u + '}' for u in sorted(used - known))}")
    joined = " ".join(command)
    for needed, why in (("{n}", "the worker count"), ("{duration}", "the window (the program stops itself)")):
        if needed not in joined:
            raise _bad(where, f"command must pass {needed}, {why}")
    try:
        groups = re.compile(e.throughput_regex).groups
    except re.error as err:
        raise _bad(where, f"throughput_regex does not compile: {err}") from None
    if groups != 1:
        raise _bad(where, f"throughput_regex needs exactly one group (the throughput), it has {groups}")
    if e.max_workers < 1:
        raise _bad(where, "max_workers is a positive integer")
    return App(**{**vars(e), "command": command, "prepare": prepare, "files": files, "params": params,
                  "server": server})


def _server(s, where: str, known: set[str]) -> dict:
    """[app.server]: the server's user, its init commands (run once on the
    fresh file system), and its start, ready (polled until it exits 0) and
    stop (optional: else SIGTERM to its process group) commands; write:
    [path, file] pairs, each file of appfiles/ written to path, its
    placeholders filled in, before init."""
    if not set(_SERVER_KEYS) <= set(s) <= set(_SERVER_KEYS + _SERVER_OPTIONAL):
        raise _bad(where, f"[app.server] has {', '.join(_SERVER_KEYS)} and may have {', '.join(_SERVER_OPTIONAL)}")
    if not isinstance(s["user"], str) or not s["user"]:
        raise _bad(where, "server.user is a user name")
    if not isinstance(s["init"], list) or not isinstance(s.get("write", []), list):
        raise _bad(where, "server.init is a list of commands, server.write a list of [path, file] pairs")
    out = {"user": s["user"], "init": tuple(_strings(a, where, "server.init") for a in s["init"]),
           **{k: _strings(s[k], where, f"server.{k}") for k in ("start", "ready") + (("stop",) if "stop" in s else ())},
           "write": tuple(_strings(w, where, "server.write") for w in s.get("write", []))}
    for path, *source in out["write"]:
        if len(source) != 1 or "/" in source[0] or not (APPFILES / source[0]).is_file():
            raise _bad(where, f"server.write [{path!r}, ...]: the second is a file of {APPFILES}")
        if not path.startswith("{dir}/") or "/../" in path + "/":
            raise _bad(where, f"server.write {path!r}: a path on the point's file system, {{dir}}/...")
    for argv in (*out["init"], out["start"], out["ready"], out.get("stop", ()), *out["write"]):
        used = {m for a in argv for m in _PLACEHOLDER.findall(a)}
        if used - known:
            raise _bad(where, f"server uses unknown placeholders {', '.join('{' + u + '}' for u in sorted(used - known))}")
    return out


def parse(doc: dict) -> dict[str, App]:
    """The [[app]] entries of a parsed apps.toml, checked, by name."""
    out: dict[str, App] = {}
    for i, e in enumerate(tables.parse(doc, _Entry, "app", TABLE)):
        app = _entry(e, i)
        if app.name in out:
            raise _bad(tables.where("app", i, app.name), "the name is used twice")
        out[app.name] = app
    return out


@functools.lru_cache(maxsize=1)
def table() -> dict[str, App]:
    """The application workloads, by name, in the table's order."""
    return parse(tables.read(TABLE))


def get(name: str) -> App | None:
    return table().get(name)


def names() -> list[str]:
    return list(table())
