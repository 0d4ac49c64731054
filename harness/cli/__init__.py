"""The `harness` command line: thin Typer commands over library functions.

Commands are loaded lazily, as pip loads its own: `COMMANDS` names each command's module, its panel in
`harness --help` and its one-line summary, so the help lists every command, grouped by task, without
importing any command module; a command line imports the one module of the command it names (click's
lazily loading group: `LazyGroup`). A command module imports what it uses at its top. The table commands
come from the registry of tables (analysis.tables), whose declarations load no pandas.

Help is click's plain layout (rich_markup_mode=None): at 80 columns it leaves descriptions ~46 columns, where
Typer's rich panels leave ~17 and cut long flags; and help text is never read as markup.
"""

from __future__ import annotations

import gc
import importlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from typer.core import TyperGroup

from analysis import tables
from harness import __version__
from harness.cli.terminal import streams

if TYPE_CHECKING:
    app: typer.Typer


@dataclass(frozen=True)
class Command:
    """Where a command lives (its module in harness/cli registers it), its panel and its one-line summary."""

    module: str
    panel: str
    summary: str


RUN, READ, COMPARE, CHECK, MANAGE = "Run", "Read an export", "Compare", "Check", "Manage"
PANELS = (RUN, READ, COMPARE, CHECK, MANAGE)
TABLES_MODULE = "analysis"  # the module that makes a command of each table (harness.cli.analysis)


def table_commands() -> dict[str, Command]:
    """A command per table of the registry (analysis.tables: its declarations only, no pandas), its
    summary the table's own."""
    return {t.name: Command(TABLES_MODULE, READ, t.summary) for t in tables.all()}


# short help: one line each in `harness -h` at 80 columns (a table's: its declaration's summary)
COMMANDS: dict[str, Command] = {
    "run": Command("run", RUN, "Run one workload, time its phases, save and print the result."),
    "sweep": Command("run", RUN, "Run a grid of models × precisions × compile, a process each."),
    "overhead": Command("profiling", RUN, "How much a profiler slows each phase: runs with and without it."),
    "profile": Command("program", RUN, "Any program under nsys, stored as a run: -- CMD ARGS…."),
    "attention": Command(
        "attention", RUN, "Attention forward/backward time and memory per head dim, seq len."
    ),
    **table_commands(),
    "breakdown": Command("analysis", READ, "GPU idle, compute and non-compute time per rank (HTA)."),
    "timeline": Command("timeline", READ, "An export or trace as a Chrome trace for Perfetto UI."),
    "diff": Command("diff", COMPARE, "Compare two runs, exports or traces: verdicts, --gate for CI."),
    "baseline": Command("diff", COMPARE, "Name runs as baselines for `harness diff`."),
    "ranks": Command("ranks", COMPARE, "Per-rank phase times, GPU busy, NCCL time and the straggler."),
    "compare-compile": Command("compile", COMPARE, "Eager vs torch.compile per phase, from stored runs."),
    "dashboard": Command(
        "dashboard", COMPARE, "Write an HTML page of plotly panels: saved runs or one export."
    ),
    "advise": Command("advise", CHECK, "Findings by time at stake; nsys analyze's rules (--rule)."),
    "health": Command("advise", CHECK, "Capture health: ok / warn / fail per check, --strict for CI."),
    "doctor": Command("doctor", CHECK, "Is this machine ready? nsys, self-tests, torch, CUDA."),
    "blocks": Command("blocks", CHECK, "Per-block time of an --nvtx-detail run: attention vs MLP and parts."),
    "roofline": Command(
        "roofline", CHECK, "FLOPs, bytes and intensity per sub-block, on the device roofline."
    ),
    "runs": Command("runs", MANAGE, "List saved runs (newest last)."),
    "show": Command("runs", MANAGE, "Show one run: configuration, phases, agreement, files."),
    "import": Command("run", MANAGE, "Store runs saved to a file when the database would not take them."),
    "cache": Command("analysis", MANAGE, "List, clear or limit the Parquet cache of exports read before."),
}


def commands() -> dict[str, Command]:
    """COMMANDS, and a command for each table registered since (a table module put on the registry's path
    after this module was loaded)."""
    return {**COMMANDS, **{n: c for n, c in table_commands().items() if n not in COMMANDS}}


def load(name: str) -> click.Command:
    """The click command `name` (a command of harness), its module imported and registered now."""
    entry = commands()[name]
    registered = typer.Typer(rich_markup_mode=None)
    importlib.import_module(f"harness.cli.{entry.module}").register(registered)
    group = typer.main.get_group(registered)
    command = group.commands[name]
    command.short_help = entry.summary
    return command


class LazyGroup(TyperGroup):
    """The commands of COMMANDS, each imported when it is asked for; the help lists them by panel from
    COMMANDS alone."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(commands())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in commands():
            self.commands[cmd_name] = load(cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listed = commands()
        for panel in PANELS:
            rows = [(name, c.summary) for name, c in listed.items() if c.panel == panel]
            with formatter.section(panel):
                formatter.write_dl(rows)


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


def build() -> typer.Typer:
    """The CLI: every command of COMMANDS, each loaded when a command line names it."""
    cli = typer.Typer(
        name="harness",
        cls=LazyGroup,
        help="Run LLM workloads under Nsight Systems and turn what it records into numbers you can trust.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    cli.callback()(_main)
    return cli


def __getattr__(name: str) -> Any:
    if name == "app":
        whole = build()
        globals()["app"] = whole
        return whole
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The `harness` command: its streams guarded first (harness.cli.terminal.streams: closed or full standard
    output, encodings without the harness's characters), standard output flushed last, where a full disk
    shows."""
    streams.prepare()
    try:
        build()(prog_name="harness")
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
