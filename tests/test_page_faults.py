"""The dashboard and diff pages are written whole or not at all: a full disk while writing
leaves the old page as it was, and no temporary file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from reading import flat
from typer.testing import CliRunner

from analysis.dashboard.page import write_page
from harness.cli import app

pytestmark = pytest.mark.attack
CPU_TRAIN = (
    Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nsys" / "cpu-train" / "report.sqlite"
)


def disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)


def test_a_full_disk_keeps_the_old_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "dashboard.html"
    page.write_text("<html>old</html>")
    disk_full(monkeypatch)
    with pytest.raises(OSError):
        write_page(page, "<html>new</html>" * 1000)
    assert page.read_text() == "<html>old</html>"
    assert [p.name for p in tmp_path.iterdir()] == ["dashboard.html"]


def test_the_page_replaces_the_old_one_when_written(tmp_path: Path) -> None:
    page = tmp_path / "dashboard.html"
    page.write_text("<html>old</html>")
    write_page(page, "<html>new</html>")
    assert page.read_text() == "<html>new</html>"
    assert [p.name for p in tmp_path.iterdir()] == ["dashboard.html"]
    assert page.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("command", ["dashboard", "diff"])
def test_the_commands_say_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    page = tmp_path / "page.html"
    page.write_text("old")
    disk_full(monkeypatch)
    if command == "dashboard":
        args = ["dashboard", str(CPU_TRAIN), "--out", str(page)]
    else:
        args = ["diff", str(CPU_TRAIN), str(CPU_TRAIN), "--html", str(page)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"cannot write {page}: No space left on device" in flat(result.output)
    assert page.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["page.html"]
