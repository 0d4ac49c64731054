"""The `harness` command line: thin Typer commands over library functions.

Help is click's plain layout (rich_markup_mode=None): at 80 columns it leaves descriptions ~46 columns, where
Typer's rich panels leave ~17 and cut long flags; and help text is never read as markup.

Start-up time counts (`harness kernels` on a small export is mostly imports): `main()` imports and registers
only the command module of the command named on the command line (all of them for help, --version or a
name it does not know). `app` is the whole CLI, built on first use (tests drive it with CliRunner).
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from harness import __version__
from harness.cli import streams

if TYPE_CHECKING:
    app: typer.Typer

GROUPS = (
    "run", "profiling", "program", "attention", "blocks", "roofline", "doctor", "analysis", "ranks",
    "dashboard", "diff", "compile", "advise", "timeline",
)  # fmt: skip
# command -> the module in harness/cli that registers it (tests/test_cli_lazy.py keeps this true)
COMMANDS = {
    **dict.fromkeys(("run", "sweep", "runs", "show", "import"), "run"),
    "overhead": "profiling",
    "profile": "program",
    "attention": "attention",
    "blocks": "blocks",
    "roofline": "roofline",
    "doctor": "doctor",
    **dict.fromkeys(
        (
            "kernels",
            "nvtx",
            "nvtx-gpu",
            "api",
            "memops",
            "launch",
            "osrt",
            "operators",
            "summary",
            "cache",
            "breakdown",
        ),
        "analysis",
    ),
    "ranks": "ranks",
    "dashboard": "dashboard",
    **dict.fromkeys(("diff", "baseline"), "diff"),
    "compare-compile": "compile",
    **dict.fromkeys(("advise", "health"), "advise"),
    "timeline": "timeline",
}


def _version(value: bool) -> None:
    if value:
        print(f"harness {__version__}")
        raise typer.Exit()


def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Run LLM workloads under Nsight Systems and turn what it records into numbers you can trust."""


def build(groups: Sequence[str] = GROUPS, only: str | None = None) -> typer.Typer:
    """The CLI with the commands of `groups` (modules of harness/cli) registered; with `only`, that
    command alone of theirs (Typer reads every registered command's signature when it starts: ~20 ms for
    the ten analysis commands)."""
    cli = typer.Typer(
        name="harness",
        help="Run LLM workloads under Nsight Systems and turn what it records into numbers you can trust.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    cli.callback()(_main)
    for group in groups:
        importlib.import_module(f"harness.cli.{group}").register(cli)
    if only is not None:
        cli.registered_commands = [c for c in cli.registered_commands if c.name == only]
    return cli


def command_of(args: Sequence[str]) -> str | None:
    """The command a command line names, when harness has it."""
    command = next((a for a in args if not a.startswith("-")), None)
    return command if command in COMMANDS else None


def groups_for(args: Sequence[str]) -> tuple[str, ...]:
    """The command modules a command line needs: the named command's alone, or all of them."""
    command = command_of(args)
    return (COMMANDS[command],) if command is not None else GROUPS


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        whole = build()
        globals()["app"] = whole
        return whole
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The `harness` command: its streams guarded first (harness.cli.streams: closed or full standard
    output, encodings without the harness's characters), standard output flushed last, where a full disk
    shows."""
    args = sys.argv[1:]
    streams.prepare()
    try:
        build(groups_for(args), only=command_of(args))(prog_name="harness")
        code: int | str | None = 0
    except SystemExit as e:
        code = e.code
    except streams.StreamError as e:  # raised where no command catches it (click's own help and usage)
        streams.say_error(str(e))
        code = 1
    code = streams.finish(code)
    gc.collect()  # what is garbage now is finalised now (files in reference cycles flushed and closed)
    gc.freeze()  # so the interpreter's exit, which collects once per module it clears, skips the rest
    sys.exit(code)


if __name__ == "__main__":
    main()
