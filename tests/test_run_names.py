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
        ("-x", "it starts with '-'"),  # stored as -x-…, which `harness show -x-…` read as an option
    ],
    ids=["300-chars", "dotdot", "absolute", "parent", "empty", "newline", "comma", "dash"],
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


@pytest.mark.parametrize(
    ("program", "name"),
    [
        ("ev\x1b[31mil.sh", "ev_[31mil.sh"),
        ("new\nline.sh", "new_line.sh"),
        ("a\\b.sh", "a_b.sh"),
        ("bidi\u202emark.sh", "bidi_mark.sh"),
        (" ", "program"),
        ("-x.sh", "_x.sh"),  # `harness show -x.sh-…` read the run id as an option
    ],
    ids=["escape", "newline", "backslash", "bidi", "blank", "dash"],
)
def test_a_program_file_name_gives_a_run_id_that_import_takes(program: str, name: str) -> None:
    """A file may be named with what `--name` refuses: its run was stored under an id holding it, and
    `harness import` refused that id, so such a run left unsaved (a locked database) was lost."""
    from harness.core.bounds import check_run_name
    from harness.core.records import new_id
    from harness.store.fields import run_id

    assert default_run_name(program) == name
    check_run_name(name)  # what --name takes
    stored = new_id(name)
    assert run_id(stored) == stored  # what `harness import` takes
