"""The nsys reader: metadata and tables of both fixtures, newer-schema exports, every kind of bad input."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from export_data import newer_schema

from analysis.errors import ExportError
from analysis.readers.nsys_columns import KERNEL
from analysis.readers.nsys_open import open_nsys
from analysis.trace.opening import open_trace


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a100_fixture_metadata(a100_export: Path) -> None:
    trace = open_trace(a100_export, cache=False)
    assert trace.meta["schema"] == "2.9.1"
    assert trace.meta["producer_version"] == "2022.2.1.31"
    assert trace.reader.export_meta["EXPORT_SCHEMA_VERSION_MAJOR"] == "2"
    assert trace.has("kernels") and trace.count("kernels") == 5
    assert "mangledName" in trace.reader.columns(KERNEL)
    assert trace.count("runtime") == 95
    assert trace.reader.columns("NO_SUCH_TABLE") == set()


def test_cpu_fixture_metadata(cpu_export: Path) -> None:
    trace = open_trace(cpu_export, cache=False)
    assert trace.meta["schema"] == "3.0.0"
    assert not trace.has("kernels")
    assert trace.count("nvtx") == 32  # 32 ranges (and one domain-destroy event, not counted)


def test_newer_schema_is_read_by_columns_not_version(a100_export: Path, tmp_path: Path) -> None:
    trace = open_trace(newer_schema(a100_export, tmp_path / "new.sqlite"), cache=False)
    assert trace.meta["schema"] == "3.11.0"  # from META_DATA_EXPORT
    assert "greenContextId" in trace.reader.columns(KERNEL)
    assert "mangledName" not in trace.reader.columns(KERNEL)
    assert not trace.has("memset")  # empty tables are left out
    # mangled names fall back to the demangled ones
    kern = trace.frame("kernels", ["name_id", "mangled_name_id"])
    assert (kern["name_id"] == kern["mangled_name_id"]).all()


def test_reading_creates_and_changes_nothing(a100_export: Path, cpu_export: Path) -> None:
    from analysis.tables.summary import summary

    before = {p: sha(p) for p in (a100_export, cpu_export)}
    listing = {p: sorted(x.name for x in p.parent.iterdir()) for p in before}
    for path in before:
        assert summary(open_trace(path)).tables
    assert {p: sha(p) for p in before} == before
    assert {p: sorted(x.name for x in p.parent.iterdir()) for p in before} == listing


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"^no such export: .*nope\.sqlite$"):
        open_trace(tmp_path / "nope.sqlite")


def test_folder(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="is a folder"):
        open_trace(tmp_path)


def test_not_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "report.sqlite"
    bad.write_text("Time (%),Total Time (ns)\n")
    with pytest.raises(ExportError, match="is not an SQLite file"):
        open_trace(bad)
    assert bad.read_text() == "Time (%),Total Time (ns)\n"


def test_truncated(a100_export: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.sqlite"
    data = a100_export.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    before = sha(cut)
    with pytest.raises(ExportError, match=r"is truncated \(806,912 of 1,613,824 bytes\)"):
        open_trace(cut)
    assert sha(cut) == before


def test_corrupt_pages(a100_export: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    data = bytearray(a100_export.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page
    bad.write_bytes(bytes(data))
    before = sha(bad)
    with pytest.raises(ExportError, match="is corrupt or truncated"):
        open_trace(bad)
    assert sha(bad) == before


def test_sqlite_but_not_an_export(tmp_path: Path) -> None:
    other = tmp_path / "results.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE runs (id INTEGER)")
    con.close()
    with pytest.raises(ExportError, match="not an Nsight Systems export"):
        open_trace(other)


def test_nsys_rep_is_not_opened_here(tmp_path: Path) -> None:
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 64)
    with pytest.raises(ExportError, match="nsys report, not an export"):
        open_trace(rep)


def test_empty_tables_name_the_missing_data(a100_export: Path, tmp_path: Path) -> None:
    from export_data import derive

    emptied = derive(a100_export, tmp_path / "e.sqlite", f"DELETE FROM {KERNEL}")
    with pytest.raises(
        ExportError, match=r"no CUDA kernel data in .*e\.sqlite: profile on a GPU with --trace=cuda"
    ):
        open_trace(emptied).require("kernels", "CUDA kernel data")


def test_scan_reads_in_chunks(a100_export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import analysis.readers.nsys_sql as ex

    cols = ["start", "end", "correlation_id", "global_tid", "name_id"]
    whole = open_nsys(a100_export).read("runtime", cols)
    monkeypatch.setattr(ex, "CHUNK_ROWIDS", 7)
    chunked = open_nsys(a100_export).read("runtime", cols)
    assert len(chunked) == 95
    assert chunked.equals(whole)
