"""A report's SQLite export kept in the cache folder is an item of the cache: counted under its limit and
evicted with it, none kept where the limit is 0, replaced when the report changes, listed by its report.
`cache --clear --report` of a folder or a glob pattern clears what the table commands read of it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SHARED_NSYS, need
from export_data import distinct_copy
from reading import flat
from typer.testing import CliRunner

from analysis.front.reading import read_tables
from analysis.trace import cache as trace_cache
from analysis.trace.cache import Cache
from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()


@pytest.fixture
def export() -> Path:
    return need(SHARED_NSYS / "a100-saxpy-mpi" / "report.sqlite")


@pytest.fixture(autouse=True)
def _own_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test is a process of its own: the exports an earlier test read through are not pinned here."""
    monkeypatch.setattr(trace_cache, "_PINNED", set(), raising=False)


def unpin() -> None:
    """As a later command sees it: no export is read through by it."""
    getattr(trace_cache, "_PINNED", set()).clear()


def copying(export: Path, asked: list[Path]) -> Callable[[Path, Path], Path]:
    """An exporter standing for nsys: `export` copied to the target, each report asked for noted."""

    def exported(path: Path, target: Path) -> Path:
        asked.append(path)
        shutil.copyfile(export, target)
        return target

    return exported


def kept_exports(cache_dir: Path) -> list[Path]:
    folder = cache_dir / "exports"
    return sorted(folder.glob("*.sqlite")) if folder.is_dir() else []


def test_max_size_0_removes_the_exports_of_reports_too(export: Path, tmp_path: Path, cache_dir: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    read_tables("kernels", [report], export=copying(export, []))
    assert len(kept_exports(cache_dir)) == 1
    unpin()  # `harness cache` is a process of its own: it read no report
    result = runner.invoke(app, ["cache", "--max-size", "0"])
    assert result.exit_code == 0, result.output
    assert "the cache is empty" in flat(result.output)
    assert kept_exports(cache_dir) == [] and Cache().entries() == []


def test_a_limit_of_0_keeps_no_export(
    export: Path, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_LIMIT", "0")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    asked: list[Path] = []
    tables = read_tables("kernels", [report], export=copying(export, asked))
    assert asked == [report] and tables.tables
    assert kept_exports(cache_dir) == []


def test_an_export_counts_under_the_limit_and_goes_least_recently_used(
    export: Path, tmp_path: Path, cache_dir: Path
) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    read_tables("kernels", [report], export=copying(export, []))
    (kept,) = Cache().exports() if hasattr(Cache, "exports") else [None]
    assert kept is not None
    assert kept.source == str(report.resolve()) and kept.size_bytes >= export.stat().st_size
    unpin()
    Cache().set_limit(kept.size_bytes // 2)  # room for the export's entry, not for the export
    Cache().evict()
    assert kept_exports(cache_dir) == [] and Cache().exports() == []
    # its entries went with it: nothing is left of a source that is gone
    assert [e for e in Cache().entries() if "exports" in e.source] == []


def test_an_export_read_through_by_this_command_is_not_evicted_under_it(
    export: Path, tmp_path: Path, cache_dir: Path
) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    read_tables("kernels", [report], export=copying(export, []))
    Cache().set_limit(1)
    Cache().evict()
    assert len(kept_exports(cache_dir)) == 1


def test_a_changed_report_replaces_its_export(export: Path, tmp_path: Path, cache_dir: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    asked: list[Path] = []
    read_tables("kernels", [report], export=copying(export, asked))
    first = kept_exports(cache_dir)
    report.write_bytes(b"the export callable stands for nsys, again")
    read_tables("kernels", [report], export=copying(export, asked))
    assert asked == [report, report]
    now = kept_exports(cache_dir)
    assert len(now) == 1 and now != first  # the export of the report as it was is gone
    assert not any(e.source == str(first[0].resolve()) for e in Cache().entries())


def test_the_cache_lists_an_export_by_its_report(export: Path, tmp_path: Path, cache_dir: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    read_tables("kernels", [report], export=copying(export, []))
    result = runner.invoke(app, ["cache", "--format", "csv"])
    assert result.exit_code == 0, result.output
    sources = [line.split(",")[0] for line in result.output.splitlines()[1:]]
    assert sorted(sources) == sorted([str(report.resolve()), f"{report.resolve()} (its export)"])
    assert not any("exports/" in s for s in sources)


@pytest.mark.parametrize("named", ["{folder}", "{folder}/run.rank*.sqlite"])
def test_clear_of_a_folder_or_pattern_clears_the_exports_in_it(
    export: Path, tmp_path: Path, cache_dir: Path, named: str
) -> None:
    """`kernels FOLDER` reads the exports in it; `cache --clear --report FOLDER` said `removed 0 cache
    entries` and kept them all (no entry's source is the folder itself)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    for rank in (0, 1):
        distinct_copy(export, folder / f"run.rank{rank}.sqlite")
    other = distinct_copy(export, tmp_path / "other.sqlite")
    read_tables("kernels", [folder])
    read_tables("kernels", [other])
    assert len(Cache().entries()) == 3
    cleared = runner.invoke(app, ["cache", "--clear", "--report", named.format(folder=folder)])
    assert cleared.exit_code == 0 and "removed 2 cache entries (" in cleared.stderr, cleared.output
    assert [e.source for e in Cache().entries()] == [str(other.resolve())]


@pytest.mark.parametrize("report_only", [False, True], ids=["all", "--report"])
def test_clear_says_the_bytes_of_the_exports_it_removes(
    export: Path, tmp_path: Path, cache_dir: Path, report_only: bool
) -> None:
    """`cache --clear` removes the reports' exports with the entries, but said only the entries' bytes
    (41,684 of 1,655,595). The bytes freed are those `harness cache` lists, the export's with them (as
    `--report` says them); the count is of entries, as it is with `--report`."""
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"the export callable stands for nsys")
    read_tables("kernels", [report], export=copying(export, []))
    unpin()
    listed = runner.invoke(app, ["cache", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert len(rows) == 2  # the report's entry and its export
    held = sum(r["Size (bytes)"] for r in rows)
    assert held > export.stat().st_size  # the export's own bytes are among them
    args = ["--report", str(report)] if report_only else []
    cleared = runner.invoke(app, ["cache", "--clear", *args])
    assert cleared.exit_code == 0, cleared.output
    assert f"removed 1 cache entry ({held:,} bytes) from {cache_dir}" in flat(cleared.stderr)
    assert kept_exports(cache_dir) == [] and Cache().entries() == []
