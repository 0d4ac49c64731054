"""The export-reading commands as a new user meets them: options that contradict each other refused in one
line, numbers from a damaged capture said to be so, outside text kept as data."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()


def run(*args: str | Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--projection", "--kernels"], "--projection and --kernels exclude each other"),
        (["--projection", "--mode", "phase"], "--mode does not apply"),
        (["--projection", "--phases", "forward"], "--phases does not apply"),
        (["--projection", "--exclusive"], "--exclusive does not apply"),
        (["--projection", "--by", "shape"], "--by shape does not apply"),
        (["--mode", "thread", "--phases", "forward"], "--phases names the phase ranges of phase mode"),
        (["--mode", "phase", "--exclusive"], "--exclusive is thread mode's"),
    ],
)
def test_nvtx_gpu_refuses_options_it_would_pass_over(
    h100_export: Path, options: list[str], said: str
) -> None:
    result = run("nvtx-gpu", h100_export, *options)
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output
