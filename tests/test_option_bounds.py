"""A number option below its bound is refused as the command's own errors are: one `error:` line naming
the option, exit 2, before any work; click's `min=` printed a usage block and a capitalised `Error:`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.cli.common import at_least
from harness.core.bounds import MAX_REPEATS

runner = CliRunner()
EXPORT = "report.sqlite"  # never looked for: the option is refused while the options are read


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["kernels", EXPORT, "--jobs", "0"], "--jobs must be 1 or more, got 0"),
        (["kernels", EXPORT, "--top", "-1"], "--top must be 1 or more, got -1"),
        (["nvtx", EXPORT, "--limit", "-1"], "--limit must be 0 or more, got -1"),
        (["runs", "--last", "0"], "--last must be 1 or more, got 0"),
        (["run", "tiny", "--repeats", "0"], "--repeats must be 1 or more, got 0"),
        (["optimize", "tiny", "--repeats", "0"], "--repeats must be 1 or more, got 0"),
        (["overhead", "tiny", "--repeats", "0"], "--repeats must be 1 or more, got 0"),
        (["diff", "-1", "-2", "--top", "0"], "--top must be 1 or more, got 0"),
    ],
)
def test_a_number_below_its_bound_is_one_line(tmp_db: str, args: list[str], said: str) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr == f"error: {said}\n"


@pytest.mark.parametrize("command", ["run", "overhead", "optimize"])
@pytest.mark.parametrize("given", [str(10**9), str(10**18), str(10**20)])
def test_repeats_past_the_most_one_command_starts_is_one_line(
    tmp_path: Path, tmp_db: str, command: str, given: str
) -> None:
    """Each repeat is a fresh process: `run tiny --repeats 1000000000` was taken and started runs until
    stopped. Refused before any run, in one line, exit 2 (the whole number said, not 1e+18)."""
    r = runner.invoke(app, [command, "tiny", "--repeats", given])
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr == f"error: --repeats must be {MAX_REPEATS} or less, got {given}\n"
    assert not (tmp_path / "results.sqlite").exists()


def test_a_bound_itself_is_taken() -> None:
    check = at_least("--repeats", 1, MAX_REPEATS)
    assert [check(n) for n in (1, MAX_REPEATS, None)] == [1, MAX_REPEATS, None]
