"""The `harness` command line: thin Typer commands over library functions.

Help is click's plain layout (rich_markup_mode=None): at 80 columns it leaves descriptions ~46 columns, where
Typer's rich panels leave ~17 and cut long flags; and help text is never read as markup.
"""

from __future__ import annotations

from typing import Annotated

import typer

from harness import __version__
from harness.commands import (
    analysis,
    attention,
    blocks,
    dashboard,
    diff,
    doctor,
    profiling,
    program,
    ranks,
    roofline,
    run,
)
from harness.commands import compile as compile_cmds

app = typer.Typer(
    name="harness",
    help="Run LLM workloads under Nsight Systems and turn what it records into numbers you can trust.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"harness {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Run LLM workloads under Nsight Systems and turn what it records into numbers you can trust."""


for group in (
    run,
    profiling,
    program,
    attention,
    blocks,
    roofline,
    doctor,
    analysis,
    ranks,
    dashboard,
    diff,
    compile_cmds,
):
    group.register(app)


def main() -> None:
    app(prog_name="harness")


if __name__ == "__main__":
    main()
