"""The comparing and checking commands attacked as a new user would: `overhead`'s options at their edges,
`roofline` of huge sizes and of a stored run with options it would not use."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.experiments import overhead

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--ci-target", "nan"], "error: --ci-target must be a positive percentage, got nan"),
        (["--ci-target", "inf"], "error: --ci-target must be a positive percentage, got inf"),
        (
            ["--ci-target", "5", "--max-time", "nan"],
            "error: --max-time must be a positive number of seconds, got nan",
        ),
        (
            ["--ci-target", "5", "--max-time", "inf"],
            "error: --max-time must be a positive number of seconds, got inf",
        ),
    ],
    ids=["ci-nan", "ci-inf", "max-time-nan", "max-time-inf"],
)
def test_overhead_refuses_a_target_or_time_bound_that_is_not_a_number(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """nan passed `<= 0`: a nan --ci-target is never reached and a nan --max-time never passed, so the
    rounds went on without end."""
    db = tmp_path / "results.sqlite"
    result = runner.invoke(app, ["overhead", "tiny", "--device", "cpu", *args, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == said
    assert not db.exists()


def test_overhead_runs_each_nsys_mode_once_a_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nsys_bin: str
) -> None:
    """`--nsys-mode light,light` ran nsys light twice a round, both pooled as one mode's steps, while the
    title counted one run a round."""
    asked: list[list[str]] = []

    def measure(*args: object, modes: list[str], **kwargs: object) -> None:
        asked.append(modes)
        raise SystemExit(0)  # what was asked is all this test reads: nothing is run

    monkeypatch.setattr(overhead, "measure_overhead", measure)
    args = [
        "overhead",
        "tiny",
        "--device",
        "cpu",
        "--nsys-mode",
        "light,full,light",
        "--db",
        str(tmp_path / "r.db"),
    ]
    runner.invoke(app, [*args, "--nsys-path", nsys_bin])
    assert asked == [["light", "full"]]
