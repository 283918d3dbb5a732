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


class Interrupted(BaseException):
    """Raised from a SIGTERM/SIGHUP handler so that cleanup runs as for Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
