"""Errors a user can cause in the harness. The CLI prints their message as one line and exits nonzero.

The analysis layer has errors of its own (analysis.errors: it imports nothing from harness/); the CLI's
error handler catches both families (harness.cli.common.cli_errors).
"""

from __future__ import annotations

import errno
from pathlib import Path

# what an empty or blank run reference (`harness show "$UNSET"`) is told, by the CLI and the results store
EMPTY_RUN_ID = "the run id is empty: give an id, a unique prefix, `latest`, or -1, -2, …"


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


def first_line(error: BaseException) -> str:
    """An exception as one line: its message's first line, or its type when it has no message."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def os_reason(path: Path, error: OSError) -> str:
    """Why `path` (or a folder for it) could not be made, in words: "File exists" or "Not a directory"
    from mkdir mean a file stands where a folder must be, so name it."""
    if error.errno in (errno.EEXIST, errno.ENOTDIR):
        for part in (path, *path.parents):
            if part.exists() and not part.is_dir():
                return f"{part} is a file, not a folder"
    return error.strerror or str(error)
