"""Errors a user can cause. The CLI prints their message as one line and exits nonzero."""

from __future__ import annotations


class HarnessError(Exception):
    """A problem the user can fix: the message says what is wrong and what to do."""

    exit_code: int = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(HarnessError):
    """Bad arguments (unknown model, non-positive sizes, a device that is not there)."""

    exit_code = 2


class ExportError(HarnessError):
    """An Nsight Systems export that is missing, corrupt, or lacks the data a table needs."""

    exit_code = 1


class NsysError(HarnessError):
    """nsys missing, failing, or killed part way."""

    exit_code = 1


def first_line(error: BaseException) -> str:
    """An exception as one line: its message's first line, or its type when it has no message."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__
