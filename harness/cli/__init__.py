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
from harness.cli.common import refuse_empty_paths, usage_in_one_line
from harness.cli.numbers import refuse_odd_numbers
from harness.cli.terminal import streams

if TYPE_CHECKING:
    app: typer.Typer


@dataclass(frozen=True)
class Command:
    """Where a command lives (its module in harness/cli registers it), its panel, its one-line summary and
    the example its help ends with (a table's is its declaration's, put there by harness.cli.analysis)."""

    module: str
    panel: str
    summary: str
    example: str = ""


RUN, READ, COMPARE, CHECK, MANAGE = "Run", "Read an export", "Compare", "Check", "Manage"
PANELS = (RUN, READ, COMPARE, CHECK, MANAGE)
TABLES_MODULE = "analysis"  # the module that makes a command of each table (harness.cli.analysis)


def table_commands() -> dict[str, Command]:
    """A command per table of the registry (analysis.tables: its declarations only, no pandas), its
    summary the table's own."""
    return {t.name: Command(TABLES_MODULE, READ, t.summary) for t in tables.all()}


# short help: one line each in `harness -h` at 80 columns (a table's: its declaration's summary)
COMMANDS: dict[str, Command] = {
    "run": Command(
        "run", RUN, "Run one workload, time its phases, save and print the result.", "harness run tiny --nsys"
    ),
    "sweep": Command(
        "run",
        RUN,
        "Run a grid of models × precisions × compile, a process each.",
        "harness sweep --models tiny,small --precision fp32,bf16 --device cuda",
    ),
    "overhead": Command(
        "profiling",
        RUN,
        "How much a profiler slows each phase: runs with and without it.",
        "harness overhead tiny --device cpu --repeats 3",
    ),
    "profile": Command(
        "program",
        RUN,
        "Any program under nsys, stored as a run: -- CMD ARGS….",
        "harness profile --name train -- python train.py --epochs 1",
    ),
    "optimize": Command(
        "optimize",
        RUN,
        "Try the fixes for a run's findings, each measured: faster or not.",
        "harness optimize tiny --device cpu --budget 600",
    ),
    "attention": Command(
        "attention",
        RUN,
        "Attention forward/backward time and memory per head dim, seq len.",
        "harness attention --device cuda --head-dims 64,128 --seq-lens 512,1024",
    ),
    **table_commands(),
    "breakdown": Command(
        "analysis",
        READ,
        "GPU idle, compute and non-compute time per rank (HTA).",
        "harness breakdown rank0.json.gz rank1.json.gz --hta",
    ),
    "timeline": Command(
        "timeline",
        READ,
        "An export or trace as a Chrome trace for Perfetto UI.",
        "harness timeline report.sqlite --step 3 --out step3.json.gz",
    ),
    "diff": Command(
        "diff",
        COMPARE,
        "Compare two runs, exports or traces: verdicts, --gate for CI.",
        "harness diff baseline:main latest --gate 5",
    ),
    "baseline": Command(
        "diff", COMPARE, "Name runs as baselines for `harness diff`.", "harness baseline tag main latest"
    ),
    "ranks": Command(
        "ranks",
        COMPARE,
        "Per-rank phase times, GPU busy, NCCL time and the straggler.",
        "harness ranks 'rank*.sqlite' --html ranks.html",
    ),
    "compare-compile": Command(
        "compile",
        COMPARE,
        "Eager vs torch.compile per phase, from stored runs.",
        "harness compare-compile --format csv",
    ),
    "dashboard": Command(
        "dashboard",
        COMPARE,
        "Write an HTML page of plotly panels: saved runs or one export.",
        "harness dashboard --last 20 --out dashboard.html",
    ),
    "advise": Command(
        "advise",
        CHECK,
        "Findings by time at stake; nsys analyze's rules (--rule).",
        "harness advise report.sqlite",
    ),
    "health": Command(
        "advise",
        CHECK,
        "Capture health: ok / warn / fail per check, --strict for CI.",
        "harness health report.sqlite --strict",
    ),
    "doctor": Command(
        "doctor", CHECK, "Is this machine ready? nsys, self-tests, torch, CUDA.", "harness doctor"
    ),
    "blocks": Command(
        "blocks",
        CHECK,
        "Per-block time of an --nvtx-detail run: attention vs MLP and parts.",
        "harness blocks latest --by-layer",
    ),
    "roofline": Command(
        "roofline",
        CHECK,
        "FLOPs, bytes and intensity per sub-block, on the device roofline.",
        "harness roofline --model tiny --batch-size 8 --context-length 256",
    ),
    "runs": Command("runs", MANAGE, "List saved runs (newest last).", "harness runs --model tiny --last 5"),
    "show": Command(
        "runs", MANAGE, "Show one run: configuration, phases, agreement, files.", "harness show latest"
    ),
    "import": Command(
        "run",
        MANAGE,
        "Store runs saved to a file when the database would not take them.",
        "harness import harness-unsaved-*.json",
    ),
    "cache": Command(
        "analysis",
        MANAGE,
        "List, clear or limit the Parquet cache of exports read before.",
        "harness cache --max-size 5GB",
    ),
}
# the sub-commands of a group of commands: their examples, by "group sub-command"
SUB_EXAMPLES = {
    "baseline tag": "harness baseline tag main latest",
    "baseline list": "harness baseline list --format json",
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
    refuse_empty_paths(command)
    refuse_odd_numbers(command)
    command.short_help = entry.summary
    with_example(command, entry.example)
    for sub_name, sub in getattr(command, "commands", {}).items():
        with_example(sub, SUB_EXAMPLES.get(f"{name} {sub_name}", ""))
    return command


def with_example(command: click.Command, example: str) -> None:
    """The command's help ends with its example, after what its epilog already says."""
    if example:
        line = f"Example: {example}"
        command.epilog = f"{command.epilog}\n\n{line}" if command.epilog else line


class LazyGroup(TyperGroup):
    """The commands of COMMANDS, each imported when it is asked for; the help lists them by panel from
    COMMANDS alone. Click's refusals of a command line are one line (usage_in_one_line)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(commands())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in commands():
            self.commands[cmd_name] = load(cmd_name)
        return self.commands.get(cmd_name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with usage_in_one_line():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        with usage_in_one_line():  # a command's own command line, parsed as the command is invoked
            return super().invoke(ctx)

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
