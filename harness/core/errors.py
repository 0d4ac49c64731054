"""Errors a user can cause. The CLI prints their message as one line and exits nonzero."""

from __future__ import annotations

from analysis.errors import AnalysisError, ExportError, first_line

__all__ = [
    "AnalysisError",
    "ExportError",
    "HarnessError",
    "NsysError",
    "UsageError",
    "first_line",
    "user_errors",
]


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


class NsysError(HarnessError):
    """nsys missing, failing, or killed part way."""

    exit_code = 1


# What the CLI turns into one line and an exit code: the harness's errors and the analysis layer's.
user_errors = (HarnessError, AnalysisError)
