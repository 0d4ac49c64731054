"""`harness X` imports only the command module of X: the table that says which module that is stays true."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import typer

from harness.cli import COMMANDS, GROUPS, app, groups_for


def _names(typer_app: typer.Typer) -> set[str]:
    return {c.name for c in typer_app.registered_commands} | {g.name for g in typer_app.registered_groups}


def test_every_command_is_listed_with_its_module() -> None:
    listed: dict[str, str] = {}
    for group in GROUPS:
        one = typer.Typer()
        importlib.import_module(f"harness.cli.{group}").register(one)
        listed |= dict.fromkeys(_names(one), group)
    assert listed == COMMANDS
    assert _names(app) == set(COMMANDS)


def test_groups_for_a_command_line() -> None:
    assert groups_for(["kernels", "x.sqlite", "--format", "csv"]) == ("analysis",)
    assert groups_for(["baseline", "list"]) == ("diff",)
    assert groups_for(["-h"]) == GROUPS
    assert groups_for(["--version"]) == GROUPS
    assert groups_for(["kernel"]) == GROUPS  # unknown: the whole CLI says so, with its suggestions
    assert groups_for([]) == GROUPS


def test_analysis_command_imports_no_other_command_module() -> None:
    code = (
        "import sys\nfrom harness.cli import main\nsys.argv = ['harness', 'kernels', '-h']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('harness.cli.')), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert "harness.cli.analysis" in done.stderr
    for group in set(GROUPS) - {"analysis"}:
        assert f"harness.cli.{group}'" not in done.stderr, done.stderr


def test_a_command_line_registers_its_command_alone() -> None:
    from harness.cli import build, command_of

    assert command_of(["kernels", "x.sqlite"]) == "kernels" and command_of(["kernel"]) is None
    only = build(groups_for(["nvtx-gpu"]), only="nvtx-gpu")
    assert _names(only) == {"nvtx-gpu"}
    # sub-apps (baseline) are kept whole: only the module's plain commands are left out
    assert _names(build(("diff",), only="baseline")) == {"baseline"}
    assert _names(build(("diff",), only="diff")) == {"diff", "baseline"}


def test_help_imports_no_pandas() -> None:
    """`harness --help` builds every command and loads none of the libraries the commands compute with:
    pandas (once ~1 s of its start, through `run`'s rank options → the runner → energy), numpy, pyarrow."""
    code = (
        "import sys\nfrom harness.cli import main\nsys.argv = ['harness', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('HEAVY', [m for m in ('pandas', 'numpy', 'pyarrow') if m in sys.modules], file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert "Usage" in done.stdout and "kernels" in done.stdout, done.stderr
    assert "HEAVY []" in done.stderr, done.stderr
