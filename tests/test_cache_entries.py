"""The trace cache's entries under attack: a cache that cannot be cleared (a read-only folder, a link in an
entry's place) is not said to be cleared; an entry edited (a kept table with a short row) or filled from
another export's entry (its Parquet files, its kept tables, all of it) is found out by the source's digest
each file holds, deleted with a note and read again from the export; an entry's folder that is a link or
another user's is not used: nothing there followed, written or removed."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from export_data import derive
from reading import flat
from typer.testing import CliRunner

from analysis import readers
from analysis.tables.kernels import kernel_summary
from analysis.trace import cache_files
from analysis.trace.cache import Cache
from analysis.trace.opening import open_trace
from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()
A100_TOTAL = 88_573_480  # the A100 fixture's kernel time (its `nsys stats` oracle)
LONGER = "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1000"  # 5 kernels, 1 µs longer each


def entry_of(export: Path) -> Path:
    return Cache().entry(export, readers.NSYS_VERSION).folder


def kernels_json(export: Path) -> tuple[list[dict], str]:
    result = runner.invoke(app, ["kernels", str(export), "-f", "json"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    return json.loads(result.stdout), flat(result.stderr)


def total(rows: list[dict]) -> int:
    return sum(r["Total Time (ns)"] for r in rows)


# --- harness cache --clear: what it removed, and what it did not ---------------------------------------


def test_clear_on_a_read_only_cache_says_what_it_did_not_remove(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "removed 1 cache entries (38,680 bytes)" and exited 0 having removed nothing."""
    kernels_json(a100_export)
    entry = entry_of(a100_export)
    files = sorted(p.name for p in entry.iterdir())
    cache_dir.chmod(0o500)
    entry.chmod(0o500)
    if os.access(entry, os.W_OK):  # root: permissions are not enforced, so removing fails as it would

        def denied(*args: object, **kwargs: object) -> None:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(os, "unlink", denied)
        monkeypatch.setattr(os, "rmdir", denied)
    try:
        result = runner.invoke(app, ["cache", "--clear"])
    finally:
        monkeypatch.undo()
        cache_dir.chmod(0o700)
        entry.chmod(0o700)
    said = flat(result.stderr)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"removed 0 cache entries (0 bytes) from {cache_dir}" in said
    assert f"error: could not remove {entry}:" in said and "Permission denied" in said
    assert sorted(p.name for p in entry.iterdir()) == files


def test_clear_leaves_a_link_in_an_entrys_place_and_says_so(
    a100_export: Path, cache_dir: Path, tmp_path: Path
) -> None:
    """A link named as an entry, to a folder that looks like one: it was counted as removed."""
    kernels_json(a100_export)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "meta.json").write_text(json.dumps({"source": "/data/x.sqlite", "size": 1}))
    link = cache_dir / ("ab" * 16)
    link.symlink_to(elsewhere)
    result = runner.invoke(app, ["cache", "--clear"])
    said = flat(result.stderr)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "removed 1 cache entry (" in said and "removed 2" not in said
    assert f"could not remove {link}: is a symbolic link, not a folder the cache made: left as it is" in said
    assert link.is_symlink() and sorted(p.name for p in elsewhere.iterdir()) == ["meta.json"]
    assert not entry_of(a100_export).exists()


# --- an entry edited, or filled from another export's ---------------------------------------------------


def test_a_kept_table_with_a_short_row_is_computed_again(a100_export: Path, cache_dir: Path) -> None:
    """An IndexError traceback."""
    first, _ = kernels_json(a100_export)
    (kept,) = entry_of(a100_export).glob("result.kernels.*.json")
    data = json.loads(kept.read_text())
    data["tables"][0]["rows"][0].pop()
    kept.write_text(json.dumps(data))
    shown = runner.invoke(app, ["kernels", str(a100_export)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "Traceback" not in shown.output, shown.output
    assert "saxpy" in shown.stdout and "88.573" in shown.stdout  # ms
    said = flat(shown.output)
    assert "the kernels table kept in the cache for" in said
    assert "is damaged (table" in said and "a row is not as long as its" in said
    assert "deleted, and computed again" in said
    again, said = kernels_json(a100_export)  # kept again, whole
    assert again == first and total(again) == A100_TOTAL and "kept in the cache" not in said


@pytest.fixture
def other(a100_export: Path, tmp_path: Path) -> Path:
    """Another export of the same name: the A100 fixture with its 5 kernels 1 µs longer each."""
    (tmp_path / "other").mkdir()
    return derive(a100_export, tmp_path / "other" / "report.sqlite", LONGER)


def test_parquet_files_copied_from_another_exports_entry_are_not_served(
    a100_export: Path, other: Path, cache_dir: Path
) -> None:
    """They were served as this export's numbers."""
    for export in (a100_export, other):
        with open_trace(export) as t:
            kernel_summary(t)
    copied = sorted(entry_of(other).glob("*.parquet"))
    assert len(copied) > 3
    for f in copied:
        shutil.copy(f, entry_of(a100_export) / f.name)
    with open_trace(a100_export) as t:
        assert kernel_summary(t)["Total Time (ns)"].sum() == A100_TOTAL
        assert t.source_reads.get("CUPTI_ACTIVITY_KIND_KERNEL") == 1
        notes = flat(" ".join(t.notes))
    assert f"the cache entry of {a100_export.resolve()} held {len(copied)} files not written for it" in notes
    with open_trace(other) as t:  # the other's own entry is as it was
        assert kernel_summary(t)["Total Time (ns)"].sum() == A100_TOTAL + 5000 and t.source_reads == {}


def test_an_entry_copied_whole_from_another_export_is_removed(
    a100_export: Path, other: Path, cache_dir: Path
) -> None:
    for export in (a100_export, other):
        kernels_json(export)
    mine = entry_of(a100_export)
    shutil.rmtree(mine)
    shutil.copytree(entry_of(other), mine)
    rows, said = kernels_json(a100_export)
    assert total(rows) == A100_TOTAL
    held = f"the cache entry of {a100_export.resolve()} held data not written for it (its meta.json names"
    assert f"{held} {other.resolve()}): it was removed, and the source is read again" in said
    assert total(kernels_json(a100_export)[0]) == A100_TOTAL


def test_a_kept_table_copied_from_another_exports_entry_is_not_served(
    a100_export: Path, other: Path, cache_dir: Path
) -> None:
    """Both exports are named report.sqlite: their kept tables have one name."""
    mine, _ = kernels_json(a100_export)
    assert total(kernels_json(other)[0]) == A100_TOTAL + 5000
    (theirs,) = entry_of(other).glob("result.kernels.*.json")
    shutil.copy(theirs, entry_of(a100_export) / theirs.name)
    rows, said = kernels_json(a100_export)
    assert rows == mine
    assert "the kernels table kept in the cache for" in said
    assert "was not written for it (another export's, or edited)" in said


# --- an entry's folder that is not the cache's ----------------------------------------------------------


def test_a_link_in_an_entrys_place_is_not_followed(
    a100_export: Path, cache_dir: Path, tmp_path: Path
) -> None:
    """`nvtx` wrote meta.json and Parquet files into the folder the link named, and deleted a `.tmp-` file
    older than an hour there."""
    runner.invoke(app, ["cache", "--max-size", "5GB"])  # the cache folder, tagged
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "mine.txt").write_text("keep me")
    old = victim / ".tmp-123-abcdef01-draft"
    old.write_text("mine too")
    hours_ago = time.time() - 7200
    os.utime(old, (hours_ago, hours_ago))
    link = entry_of(a100_export)
    link.symlink_to(victim)
    for _ in range(2):
        result = runner.invoke(app, ["nvtx", str(a100_export), "-f", "csv"])
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        assert "saxpy" in result.stdout
        said = flat(result.stderr)
        assert (
            f"the cache entry {link} is a symbolic link, not a folder the cache made: it is not used" in said
        )
        assert sorted(p.name for p in victim.iterdir()) == [".tmp-123-abcdef01-draft", "mine.txt"]
    assert link.is_symlink() and Cache().entries() == []


def test_another_users_entry_is_neither_used_nor_changed(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_trace(a100_export) as t:
        kernel_summary(t)
    entry = entry_of(a100_export)
    (entry / "kernels.duration.parquet").unlink()
    if os.geteuid() == 0:  # the folder another user's
        os.chown(entry, 65534, 65534)
    else:  # (only root can give it away): this process another user
        monkeypatch.setattr(cache_files, "_user", lambda: os.geteuid() + 1)
    owner = entry.stat().st_uid
    before = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    with open_trace(a100_export) as t:
        assert kernel_summary(t)["Total Time (ns)"].sum() == A100_TOTAL
        assert t.source_reads.get("CUPTI_ACTIVITY_KIND_KERNEL") == 1 and t.cache_entry is None
        notes = flat(" ".join(t.notes))
    assert f"the cache entry {entry} belongs to another user (uid {owner})" in notes
    assert {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == before
    cleared = runner.invoke(app, ["cache", "--clear"])
    assert cleared.exit_code == 1 and entry.is_dir()
    assert f"could not remove {entry}: belongs to another user" in flat(cleared.stderr)


def test_a_kineto_traces_tables_are_computed_each_time_and_not_kept(cache_dir: Path) -> None:
    """A Kineto trace's tables are served from its columns in the cache, never from kept tables (only an
    export's are): none is written to its entry, and every reading gives the same table."""
    from kineto_data import trace_path

    trace = trace_path("alexnet")
    first, _ = kernels_json(trace)
    entry = Cache().entry(trace, readers.KINETO_VERSION).folder
    assert entry.is_dir() and list(entry.glob("*.parquet"))  # its columns are kept
    assert not list(entry.glob("result.kernels.*.json"))
    again, _ = kernels_json(trace)
    assert again == first and len(first) > 0
