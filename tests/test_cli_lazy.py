"""`harness X` imports only the command module of X, and `harness --help` none: the table that says which
module holds each command (and its panel and summary) stays true."""

from __future__ import annotations

import importlib
import os
import shlex
import subprocess
import sys
from typing import Any

import typer

from harness.cli import COMMANDS, PANELS, app, commands, load


def _names(typer_app: typer.Typer) -> set[str]:
    return {c.name for c in typer_app.registered_commands} | {g.name for g in typer_app.registered_groups}


def test_every_command_is_listed_with_its_module() -> None:
    listed: dict[str, str] = {}
    for module in sorted({c.module for c in COMMANDS.values()}):
        one = typer.Typer()
        importlib.import_module(f"harness.cli.{module}").register(one)
        listed |= dict.fromkeys(_names(one), module)
    assert listed == {name: c.module for name, c in COMMANDS.items()}
    assert {c.panel for c in COMMANDS.values()} == set(PANELS)


def test_a_loaded_command_carries_the_summary_the_help_lists() -> None:
    for name, entry in COMMANDS.items():
        command = load(name)
        assert command.name == name
        assert command.get_short_help_str(limit=200) == entry.summary


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    code = (
        f"import sys\nfrom harness.cli import main\nsys.argv = {argv!r}\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('harness.cli.')), file=sys.stderr)\n"
        "print('HEAVY', [m for m in ('pandas', 'numpy', 'pyarrow', 'sqlalchemy', 'torch', 'plotly')"
        " if m in sys.modules], file=sys.stderr)"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))


def test_analysis_command_imports_no_other_command_module() -> None:
    done = _run(["harness", "kernels", "-h"])
    assert "harness.cli.analysis" in done.stderr
    for module in {c.module for c in COMMANDS.values()} - {"analysis"}:
        assert f"harness.cli.{module}'" not in done.stderr, done.stderr


def test_help_imports_no_command_module_and_no_pandas() -> None:
    """`harness --help` lists every command from COMMANDS alone: no command module, and none of the
    libraries the commands compute with."""
    done = _run(["harness", "--help"])
    assert "Usage" in done.stdout and "kernels" in done.stdout, done.stderr
    for panel in PANELS:
        assert f"\n{panel}:\n" in done.stdout
    assert "HEAVY []" in done.stderr, done.stderr
    for module in {c.module for c in COMMANDS.values()}:
        assert f"harness.cli.{module}'" not in done.stderr, done.stderr


def test_every_command_runs_through_the_whole_app() -> None:
    from typer.testing import CliRunner

    for name in ("kernels", "baseline", "doctor"):
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert f"harness {name}" in result.output or "Usage" in result.output


def _commands_and_subcommands() -> list[tuple[list[str], Any]]:
    out = []
    for name in commands():
        command = load(name)
        out.append(([name], command))
        out += [([name, sub], c) for sub, c in getattr(command, "commands", {}).items()]
    return out


def test_every_command_help_ends_with_one_example_that_parses() -> None:
    """Each command's help (and each sub-command's) ends with `Example: harness NAME …`, and the example's
    arguments are ones the command takes."""
    from typer.testing import CliRunner

    for words, command in _commands_and_subcommands():
        result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        last = " ".join(result.output.strip().split("\n\n")[-1].split())
        assert last == f"Example: harness {' '.join(words)}" or last.startswith(
            f"Example: harness {' '.join(words)} "
        ), (words, last)
        args = shlex.split(last.removeprefix("Example: "))[1 + len(words) :]
        if hasattr(command, "commands"):  # a group: its example names one of its sub-commands
            assert args[0] in command.commands, (words, args)
            continue
        # arguments the command does not take raise click's UsageError here
        with command.make_context(" ".join(words), args) as ctx:
            assert ctx.params, words
