"""A number option below its bound is refused as the command's own errors are: one `error:` line naming
the option, exit 2, before any work; click's `min=` printed a usage block and a capitalised `Error:`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harness.cli import app

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
        (["diff", "-1", "-2", "--top", "0"], "--top must be 1 or more, got 0"),
    ],
)
def test_a_number_below_its_bound_is_one_line(tmp_db: str, args: list[str], said: str) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr == f"error: {said}\n"
