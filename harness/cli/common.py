"""What every command shares: one-line errors and warnings, the --format, --wide, --limit and --db options."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from harness.cli.output import Format, visible
from harness.core.errors import user_errors

F = TypeVar("F", bound=Callable[..., Any])

FormatOpt = Annotated[
    Format, typer.Option("--format", "-f", help="table for people; csv or json for scripts (times in ns).")
]
WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide", help="Show every column and whole names, however wide (default: fit the terminal)."
    ),
]
LimitOpt = Annotated[
    int | None,
    typer.Option(
        "--limit",
        min=0,
        metavar="<n>",
        help="Tables: show the first N rows (0: all; default: as many as fit the terminal). csv and json "
        "keep every row.",
    ),
]
DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db", envvar="HARNESS_DB", metavar="<url>", help="Results database: a path or any SQLAlchemy URL."
    ),
]


def _say(label: str, style: str, message: str) -> None:
    """`label: message` on stderr; the message is plain text (never markup) with control characters
    escaped, and stays one line however long (tests and scripts look for it)."""
    from rich.console import Console
    from rich.text import Text

    line = Text(label, style=style) + Text(" " + visible(message, keep="\n\t"))
    Console(stderr=True, soft_wrap=True, highlight=False).print(line)


def err(message: str) -> None:
    _say("error:", "bold red", message)


def warn(message: str) -> None:
    _say("warning:", "yellow", message)


def note(message: str) -> None:
    _say("note:", "", message)


def say_ending(outcome: Any) -> None:
    """How a profiled run ended, after its tables: its notes as warnings, then its error and the runs the
    database would not take (harness.profilers.base.Outcome, with `notes`)."""
    for line in outcome.notes:
        warn(line)
    if outcome.error:
        err(outcome.error)
    for line in outcome.unsaved:
        err(line)


def cli_errors(fn: F) -> F:
    """Turn a HarnessError into one line on stderr and its exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except user_errors as e:
            err(str(e))
            raise typer.Exit(e.exit_code) from None

    return wrapper  # type: ignore[return-value]
