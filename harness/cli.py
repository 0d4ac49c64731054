"""The `harness` command line: thin Typer commands over library functions."""

from __future__ import annotations

import typer

from harness.commands import analysis, attention, dashboard, doctor, profiling, run

app = typer.Typer(
    name="harness",
    help="Run LLM workloads under Nsight Systems and turn what it records into numbers you can trust.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

for group in (run, profiling, attention, doctor, analysis, dashboard):
    group.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
