"""An empty path (`harness kernels "$REPORT"` with REPORT unset) is a mistake, never the current folder:
every path argument and path option refuses it in one line, exit 2, before anything is read or written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis import tables
from harness.cli import app, commands, load
from harness.cli.common import PATH_METAVARS

runner = CliRunner()
EXPORT = "report.sqlite"
# (the command line, "" where the path goes; the line it is refused with)
EMPTY_PATHS = [
    *((([t.name, ""], "REPORT is empty: give a path")) for t in tables.all()),
    (["nvtx", EXPORT, ""], "REPORT is empty: give a path"),
    (["breakdown", ""], "REPORTS is empty: give a path"),
    (["ranks", ""], "EXPORT is empty: give a path"),
    (["timeline", "", "-o", "out.json"], "REPORT is empty: give a path"),
    (["dashboard", "", "-o", "out.html"], "REPORT is empty: give a path"),
    (["import", ""], "FILES is empty: give a path"),
    (["cache", "--clear", "--report", ""], "--report is empty: give a path"),
    (["timeline", EXPORT, "-o", ""], "--out is empty: give a file name"),
    (["timeline", EXPORT, "--output", ""], "--output is empty: give a file name"),
    (["dashboard", EXPORT, "--out", ""], "--out is empty: give a file name"),
    (["dashboard", EXPORT, "--output", ""], "--output is empty: give a file name"),
    (["diff", EXPORT, EXPORT, "-f", "csv", "-o", ""], "--out is empty: give a folder"),
    (["diff", EXPORT, EXPORT, "-f", "csv", "--output", ""], "--output is empty: give a folder"),
    (["diff", EXPORT, EXPORT, "--html", ""], "--html is empty: give a file name"),
    (["ranks", EXPORT, "--html", ""], "--html is empty: give a file name"),
    (["roofline", "--model", "tiny", "--html", ""], "--html is empty: give a file name"),
    (["run", "tiny", "--device", "cpu", "--profile-dir", ""], "--profile-dir is empty: give a folder"),
    (["overhead", "tiny", "--device", "cpu", "--profile-dir", ""], "--profile-dir is empty: give a folder"),
    (["optimize", "tiny", "--device", "cpu", "--profile-dir", ""], "--profile-dir is empty: give a folder"),
    (["profile", "--profile-dir", "", "--", "true"], "--profile-dir is empty: give a folder"),
    (["run", "tiny", "--nsys", "--nsys-path", ""], "--nsys-path is empty: give a path"),
    (["overhead", "tiny", "--nsys-path", ""], "--nsys-path is empty: give a path"),
    (["optimize", "tiny", "--nsys-path", ""], "--nsys-path is empty: give a path"),
    (["profile", "--nsys-path", "", "--", "true"], "--nsys-path is empty: give a path"),
    (["doctor", "--nsys-path", ""], "--nsys-path is empty: give a path"),
]


@pytest.mark.parametrize(
    ("args", "said"), EMPTY_PATHS, ids=[" ".join(a or "''" for a in args) for args, _ in EMPTY_PATHS]
)
def test_an_empty_path_is_refused_not_read_as_the_current_folder(
    cpu_export: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cache_dir: Path,
    tmp_db: str,
    args: list[str],
    said: str,
) -> None:
    """The current folder holds an export: an empty path, read as `.`, read it, wrote beside it or cleared
    its cache entries. Refused instead, and nothing there or in the cache changes."""
    here = tmp_path / "here"
    here.mkdir()
    shutil.copy(cpu_export, here / EXPORT)
    if args[0] == "cache":
        assert runner.invoke(app, ["nvtx", str(here / EXPORT), "-f", "csv"]).exit_code == 0  # an entry
    cached = sorted(cache_dir.rglob("*"))
    monkeypatch.chdir(here)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {said}\n"
    assert result.stdout == ""
    assert [p.name for p in here.iterdir()] == [EXPORT]
    assert sorted(cache_dir.rglob("*")) == cached


def test_every_path_parameter_is_among_those_tried() -> None:
    """Each path argument and path option of every command (of click's Path type or a path's metavar) has
    its case above, so a new one is tried too."""
    tried = {(args[0], said.split(" is empty")[0]) for args, said in EMPTY_PATHS}
    found = set()
    for name in commands():
        for param in load(name).params:
            if param.type.name == "path" or param.metavar in PATH_METAVARS:
                option = param.param_type_name == "option"
                found.add((name, param.opts[0] if option else param.metavar or param.name.upper()))
    assert found == tried
