"""`harness profile --name`: a name, not a path, and short enough to be a file name. Refused
before nsys starts or a database is made; nothing is written anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.bounds import NAME_BYTES, default_run_name

pytestmark = pytest.mark.attack


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("x" * 300, "longer than 200 bytes"),
        ("../../x", "folder separator"),
        ("/abs/path", "folder separator"),
        ("..", "it names a folder (the current one or the one above), not a run"),  # it said "empty"
        ("", "empty"),
        ("a\nb", "control characters"),
        ("x,y", "','"),
    ],
    ids=["300-chars", "dotdot", "absolute", "parent", "empty", "newline", "comma"],
)
def test_a_name_that_is_not_a_name_is_refused(tmp_path: Path, monkeypatch, name: str, why: str) -> None:
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    db = work / "results.sqlite"
    args = ["profile", "--name", name, "--profile-dir", str(work / "p"), "--db", str(db), "--", "true"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is not a run name" in result.output and why in result.output
    assert list(tmp_path.rglob("*")) == [work]  # nothing written, inside or outside


def test_a_long_program_name_is_cut_to_a_file_name() -> None:
    assert len(default_run_name("é" * 300).encode()) <= NAME_BYTES
    assert default_run_name("python3") == "python3"


def test_a_program_name_with_a_comma_gives_a_run_id_diff_can_name() -> None:
    """`harness diff A1,A2 B` splits at commas: a run id never holds one."""
    assert default_run_name("a,b.sh") == "a_b.sh"
