"""What every command shares: one-line errors, the --format and --db options."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from harness.errors import user_errors
from harness.output import Format

F = TypeVar("F", bound=Callable[..., Any])

FormatOpt = Annotated[
    Format, typer.Option("--format", "-f", help="table for people; csv or json for scripts (times in ns).")
]
DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="HARNESS_DB", help="Results database: a path or any SQLAlchemy URL."),
]


def err(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(
        f"[bold red]error:[/bold red] {message}", highlight=False, markup=True
    )


def warn(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(f"[yellow]warning:[/yellow] {message}", highlight=False)


def note(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(f"note: {message}", highlight=False, markup=False)


def cli_errors(fn: F) -> F:
    """Turn a HarnessError into one line on stderr and its exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except user_errors as e:
            from rich.markup import escape

            err(escape(str(e)))
            raise typer.Exit(e.exit_code) from None

    return wrapper  # type: ignore[return-value]
