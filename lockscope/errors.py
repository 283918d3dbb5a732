"""Errors a user can act on: each carries the fix and an exit code."""
from __future__ import annotations

# exit codes (README, "Exit codes")
EXIT_FAILURE = 1      # a run failed while running
EXIT_USAGE = 2        # bad input: unknown workload, bad numbers, bad paths
EXIT_ENVIRONMENT = 3  # this machine lacks something: root, BTF, a tool
EXIT_INTERRUPTED = 130


class LockscopeError(Exception):
    """An error with a message for the user, an optional fix, and an exit code."""

    def __init__(self, message: str, fix: str | None = None, exit_code: int = EXIT_FAILURE):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


class UsageError(LockscopeError):
    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message, fix, EXIT_USAGE)


class EnvironmentProblem(LockscopeError):
    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message, fix, EXIT_ENVIRONMENT)


class TableError(LockscopeError, ValueError):
    """A bad entry in a TOML table lockscope reads (lockscope/tables.py): a
    mistake in lockscope itself, or in a table someone edited. The message
    names the file, the table and the entry (`sleepkinds.toml: [[spin]] #7
    (pthread_spinlock): field functions: expected a list, ...`): `file` the
    file's name, `where` the table or entry ("" for the whole file), `what`
    is wrong; the fix, the file to edit (`shown`: its path). A ValueError
    too, as the loaders raised before."""

    def __init__(self, file: str, where: str, what: str, shown: str | None = None):
        super().__init__(f"{file}: {where}: {what}" if where else f"{file}: {what}",
                         f"fix the entry in {shown or file}")
        self.file, self.where, self.what = file, where, what


class Interrupted(BaseException):
    """Raised from a SIGTERM/SIGHUP handler so that cleanup runs as for Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
