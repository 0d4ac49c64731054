"""Errors a user can cause in the analysis layer. The CLI prints their message as one line and exits 1.

analysis/ imports nothing from harness/, so it has its own error type; the CLI's error handler catches both
families (harness.cli.common.cli_errors).
"""

from __future__ import annotations

import re

# a number as a user types it: ASCII digits (int() and float() take any script's, '٣' as 3, and '1_0'), a
# sign, a fraction or exponent; inf and nan are numbers too, each option's own check takes or refuses them.
# The rule of every number option, the CLI's (harness.cli.numbers) and a table's or rule's.
WHOLE = re.compile(r"[+-]?[0-9]+")
DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.I)


class AnalysisError(Exception):
    """A problem with an input the user gave: the message says what is wrong and what to do."""

    exit_code: int = 1


class OptionsError(AnalysisError):
    """Options a table cannot take together: a usage error, as the command line's are (exit 2)."""

    exit_code = 2


class ExportError(AnalysisError):
    """An export or trace that is missing, corrupt, or lacks the data a table needs."""


class NoData(ExportError):
    """A trace read whole that recorded none of what a table reads (a CPU-only capture's kernels): among
    several exports, that one adds no rows (analysis.trace.multi_run); alone, the table is refused."""

    def __init__(self, what: str, path: object, hint: str) -> None:
        super().__init__(f"no {what} in {path}: {hint}")
        self.what, self.hint = what, hint


def comma_list(option: str, text: str | None) -> list[str]:
    """The items of comma-separated option `option` given as `text`, stripped; none for a value that names
    nothing (``, `,`: the command says what an empty list means). An empty item beside others (`16,,32`,
    `a,`) is refused (OptionsError, exit 2): it is a slip, not a value. The rule of every such option, the
    CLI's and a table's."""
    items = [t.strip() for t in (text or "").split(",")]
    if not any(items):
        return []
    if not all(items):
        raise OptionsError(f"{option} {text!r} has an empty item: give a comma-separated list, none empty")
    return items


def first_line(error: BaseException) -> str:
    """An exception as one line: its message's first line, or its type when it has no message."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__
