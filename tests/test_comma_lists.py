"""Comma-separated options: an empty item (`16,,32`, `a,`) is a slip, refused in one line with exit 2 by
every command that takes such a list, not read as if it were not there."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import A100_DIR, need
from typer.testing import CliRunner

from analysis.tables.nvtx_gpu import TABLE as NVTX_GPU
from harness.cli import app

runner = CliRunner()
SMALL = ["--warmup", "0", "--trials", "1", "--device", "cpu"]


@pytest.mark.parametrize(
    ("args", "option", "given"),
    [
        (["attention", "--head-dims", "16,,32", "--seq-lens", "8", *SMALL], "--head-dims", "16,,32"),
        (["attention", "--seq-lens", "8,", "--head-dims", "8", *SMALL], "--seq-lens", "8,"),
        (["attention", "--impl", "math,,sdpa", "--head-dims", "8", "--seq-lens", "8", *SMALL], "--impl",
         "math,,sdpa"),
        (["sweep", "--batch-sizes", "1,,2"], "--batch-sizes", "1,,2"),
        (["sweep", "--models", "tiny,"], "--models", "tiny,"),
        (["sweep", "--context-length", ",16"], "--context-length", ",16"),
        (["overhead", "tiny", "--nsys-mode", "light,,full"], "--nsys-mode", "light,,full"),
        (["dashboard", "--runs", "a,"], "--runs", "a,"),
        (["dashboard", "--compare", "a,,b"], "--compare", "a,,b"),
    ],
)  # fmt: skip
def test_an_empty_item_in_a_comma_list_is_refused(
    tmp_path: Path, args: list[str], option: str, given: str
) -> None:
    db = f"sqlite:///{tmp_path / 'results.sqlite'}"
    result = runner.invoke(app, [*args, "--db", db])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"error: {option} {given!r} has an empty item: give a comma-separated list, none empty"]


@pytest.mark.parametrize("given", ["saxpy,,MPI_Init", "saxpy,", ",saxpy"])
def test_nvtx_gpu_refuses_an_empty_phase_name(given: str) -> None:
    """analysis's table takes the CLI's rule, in its words: the list is not read as if the empty item were
    not there."""
    export = need(A100_DIR / "report.sqlite")
    result = runner.invoke(app, ["nvtx-gpu", str(export), "--phases", given])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: --phases {given!r} has an empty item: give a comma-separated list, none empty"
    ]


@pytest.mark.parametrize(
    ("given", "phases"), [("", ()), (",", ()), (" step , step,forward", ("step", "forward"))]
)
def test_nvtx_gpu_phases_that_name_nothing_are_the_exports_own(given: str, phases: tuple[str, ...]) -> None:
    assert NVTX_GPU.prepare(phases=given)["phases"] == phases
