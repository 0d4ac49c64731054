"""Opening exports: metadata and tables of both fixtures, newer-schema exports, every kind of bad input."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from export_data import newer_schema

from analysis.export import KERNEL, NVTX, open_export
from harness.errors import ExportError


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a100_fixture_metadata(a100_export: Path) -> None:
    export = open_export(a100_export)
    assert export.schema_version == "2.9.1"
    assert export.producer == "2022.2.1.31"
    assert export.meta["EXPORT_SCHEMA_VERSION_MAJOR"] == "2"
    assert export.has(KERNEL) and export.count(KERNEL) == 5
    assert "mangledName" in export.columns(KERNEL)
    assert export.count("CUPTI_ACTIVITY_KIND_RUNTIME") == 95
    assert export.columns("NO_SUCH_TABLE") == set()


def test_cpu_fixture_metadata(cpu_export: Path) -> None:
    export = open_export(cpu_export)
    assert export.schema_version == "3.0.0"
    assert not export.has(KERNEL)
    assert export.count(NVTX) == 33  # 32 ranges and one domain-destroy event


def test_newer_schema_is_read_by_columns_not_version(a100_export: Path, tmp_path: Path) -> None:
    export = open_export(newer_schema(a100_export, tmp_path / "new.sqlite"))
    assert export.schema_version == "3.11.0"  # from META_DATA_EXPORT
    assert "greenContextId" in export.columns(KERNEL)
    assert "mangledName" not in export.columns(KERNEL)
    assert not export.has("CUPTI_ACTIVITY_KIND_MEMSET")  # empty tables are left out


def test_reading_creates_and_changes_nothing(a100_export: Path, cpu_export: Path) -> None:
    from analysis.summary import summary

    before = {p: sha(p) for p in (a100_export, cpu_export)}
    listing = {p: sorted(x.name for x in p.parent.iterdir()) for p in before}
    for path in before:
        assert summary(open_export(path)).tables
    assert {p: sha(p) for p in before} == before
    assert {p: sorted(x.name for x in p.parent.iterdir()) for p in before} == listing


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"^no such export: .*nope\.sqlite$"):
        open_export(tmp_path / "nope.sqlite")


def test_folder(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="is a folder"):
        open_export(tmp_path)


def test_not_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "report.sqlite"
    bad.write_text("Time (%),Total Time (ns)\n")
    with pytest.raises(ExportError, match="is not an SQLite file"):
        open_export(bad)
    assert bad.read_text() == "Time (%),Total Time (ns)\n"


def test_truncated(a100_export: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.sqlite"
    data = a100_export.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    before = sha(cut)
    with pytest.raises(ExportError, match=r"is truncated \(806,912 of 1,613,824 bytes\)"):
        open_export(cut)
    assert sha(cut) == before


def test_corrupt_pages(a100_export: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    data = bytearray(a100_export.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page
    bad.write_bytes(bytes(data))
    before = sha(bad)
    with pytest.raises(ExportError, match="is corrupt or truncated"):
        export = open_export(bad)
        export.count(KERNEL)
    assert sha(bad) == before


def test_sqlite_but_not_an_export(tmp_path: Path) -> None:
    other = tmp_path / "results.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE runs (id INTEGER)")
    con.close()
    with pytest.raises(ExportError, match="not an Nsight Systems export"):
        open_export(other)


def test_nsys_rep_is_not_opened_here(tmp_path: Path) -> None:
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 64)
    with pytest.raises(ExportError, match="nsys report, not an export"):
        open_export(rep)


def test_empty_tables_name_the_missing_data(a100_export: Path, tmp_path: Path) -> None:
    from export_data import derive

    emptied = derive(a100_export, tmp_path / "e.sqlite", f"DELETE FROM {KERNEL}")
    with pytest.raises(
        ExportError, match=r"no CUDA kernel data in .*e\.sqlite: profile on a GPU with --trace=cuda"
    ):
        open_export(emptied).require(KERNEL, "CUDA kernel data")


def test_scan_reads_in_chunks(a100_export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import analysis.export as ex

    whole = open_export(a100_export).runtime_rows()
    monkeypatch.setattr(ex, "CHUNK_ROWIDS", 7)
    chunked = open_export(a100_export).runtime_rows()
    assert len(chunked) == 95
    assert chunked.equals(whole)
