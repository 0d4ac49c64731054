"""`harness cache --clear` while another command fills the cache at the same moment: an entry (or the
reports' exports folder) that command writes into as it is removed is emptied of all it held, and its
folder is left holding only what that command wrote since. That is said as such, with exit 0 (nothing the
user asked to remove is left); a file of the entry that would not go is still an error, exit 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from reading import flat
from typer.testing import CliRunner

from analysis import readers
from analysis.trace.cache import Cache
from analysis.trace.exports import clear_exports, exports_dir
from harness.cli import app

runner = CliRunner()
WRITTEN = "was being written by another command as it was removed: all it held is gone"
AGAIN = ", and what that command wrote since is left (run `harness cache --clear` again once it ends)"


def filled(export: Path) -> Path:
    """The cache entry of `export`, made by reading it."""
    result = runner.invoke(app, ["kernels", str(export), "-f", "csv"])
    assert result.exit_code == 0, result.output
    entry = Cache().entry(export, readers.NSYS_VERSION).folder
    assert entry.is_dir()
    return entry


def write_beside(folder: Path, name: str) -> None:
    """What a command filling `folder` does: a file written under a temporary name, renamed into place."""
    tmp = folder / f".tmp-{name}"
    tmp.write_bytes(b"PAR1" + b"\0" * 60)
    os.rename(tmp, folder / name)


def test_clear_as_another_command_writes_into_an_entry_says_what_went_and_what_is_left(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file written into the entry while it was removed: it said "removed 0 cache entries" beside "could
    not remove ENTRY: Directory not empty", exit 1, though every file it was asked to remove was gone."""
    entry = filled(a100_export)
    held = {p.name for p in entry.iterdir()}
    unlink = os.unlink

    def racing(path: object, *args: object, **kwargs: object) -> None:
        unlink(path, *args, **kwargs)  # type: ignore[arg-type]
        if not (entry / "memcpy.start.parquet").exists():
            write_beside(entry, "memcpy.start.parquet")

    monkeypatch.setattr(os, "unlink", racing)
    result = runner.invoke(app, ["cache", "--clear"])
    monkeypatch.undo()
    said = flat(result.stderr)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "removed 1 cache entry (" in said and f"from {cache_dir}" in said
    assert f"warning: {entry} {WRITTEN}{AGAIN}" in said
    assert "could not remove" not in said
    assert "memcpy.start.parquet" not in held  # what is left is what was written since
    assert [p.name for p in entry.iterdir()] == ["memcpy.start.parquet"]


def test_clear_as_another_command_makes_the_entry_again_says_so(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry removed whole, then made again by a command reading the export at that moment: it was
    "could not remove ENTRY: still there", exit 1."""
    entry = filled(a100_export)
    rmdir = os.rmdir

    def racing(path: object, *args: object, **kwargs: object) -> None:
        rmdir(path, *args, **kwargs)  # type: ignore[arg-type]
        if Path(str(path)) == entry:
            entry.mkdir()
            write_beside(entry, "meta.json")

    monkeypatch.setattr(os, "rmdir", racing)
    result = runner.invoke(app, ["cache", "--clear"])
    monkeypatch.undo()
    said = flat(result.stderr)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "removed 1 cache entry (" in said and f"warning: {entry} {WRITTEN}{AGAIN}" in said
    assert [p.name for p in entry.iterdir()] == ["meta.json"]


def test_a_file_that_would_not_go_is_still_an_error_though_another_was_written(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something asked for is left: not said as written by another command, exit 1."""
    entry = filled(a100_export)
    unlink = os.unlink

    def stuck(path: object, *args: object, **kwargs: object) -> None:
        if str(path) == "meta.json" or Path(str(path)) == entry / "meta.json":
            if not (entry / "memcpy.start.parquet").exists():
                write_beside(entry, "memcpy.start.parquet")
            raise PermissionError(13, "Permission denied")
        unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", stuck)
    result = runner.invoke(app, ["cache", "--clear"])
    monkeypatch.undo()
    said = flat(result.stderr)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "removed 0 cache entries (" in said
    assert f"error: could not remove {entry}:" in said and "Permission denied" in said
    assert WRITTEN not in said
    assert {"meta.json", "memcpy.start.parquet"} <= {p.name for p in entry.iterdir()}


def test_the_exports_folder_written_into_as_it_is_removed(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report exported into the cache as `cache --clear` removes the folder of such exports."""
    exports = exports_dir()
    exports.mkdir(parents=True)
    (exports / "old.sqlite").write_bytes(b"SQLite format 3\0")
    unlink = os.unlink

    def racing(path: object, *args: object, **kwargs: object) -> None:
        unlink(path, *args, **kwargs)  # type: ignore[arg-type]
        if not (exports / "new.sqlite").exists():
            write_beside(exports, "new.sqlite")

    monkeypatch.setattr(os, "unlink", racing)
    cleared = clear_exports()
    monkeypatch.undo()
    assert cleared.filled == [exports] and cleared.kept == []
    assert [p.name for p in exports.iterdir()] == ["new.sqlite"]
