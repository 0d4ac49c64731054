"""The trace cache under attack (issue 22): an export rewritten with its size and mtime put back, a cache
folder that cannot be written or is a file, a limit that is not a size, a limit of 0."""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from reading import flat
from typer.testing import CliRunner

from analysis.cache import BLOCK, EDGE, WHOLE_FILE, Cache, content_digest
from analysis.kernels import kernel_summary
from analysis.trace import open_trace
from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    monkeypatch.delenv("HARNESS_CACHE_LIMIT", raising=False)
    return root


def test_an_export_rewritten_with_size_and_mtime_put_back_is_read_again(
    a100_export: Path, tmp_path: Path, cache_dir: Path
) -> None:
    export = tmp_path / "report.sqlite"
    shutil.copy(a100_export, export)
    before = kernel_summary(open_trace(export))["Total Time (ns)"].sum()
    st = export.stat()
    with sqlite3.connect(export) as db:  # same rows, one kernel 1 µs longer: the file keeps its size
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1000 WHERE rowid = 1")
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (export.stat().st_size, export.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    after = kernel_summary(open_trace(export))["Total Time (ns)"].sum()
    assert after == before + 1000
    assert len(Cache().entries()) == 1  # the stale entry went when the new one was made


def test_a_big_file_changed_in_a_sampled_block_gets_a_new_digest(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    data = bytearray(os.urandom(WHOLE_FILE * 3))
    path.write_bytes(data)
    first = content_digest(path, len(data))
    data[EDGE + (len(data) - 2 * EDGE) // 17] ^= 1  # the first block between head and tail
    path.write_bytes(data)
    assert content_digest(path, len(data)) != first
    data[-BLOCK] ^= 1
    path.write_bytes(data)
    assert content_digest(path, len(data)) != first


@pytest.mark.parametrize("blocker", ["file", "readonly"])
def test_max_size_on_a_cache_folder_that_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocker: str
) -> None:
    root = tmp_path / "cache"
    if blocker == "file":
        root.write_text("not a folder")
    else:
        root.mkdir()
        root.chmod(0o500)
        if os.access(root, os.W_OK):  # root: permissions are not enforced, so the write fails as it would

            def denied(path: Path, data: bytes) -> None:
                raise PermissionError(13, "Permission denied", str(path))

            monkeypatch.setattr("analysis.cache.write_atomic", denied)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    try:
        result = runner.invoke(app, ["cache", "--max-size", "1GB"])
    finally:
        root.chmod(0o700) if root.is_dir() else None
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"cannot save the cache limit in {root}" in flat(result.output)
    if blocker == "file":
        assert root.read_text() == "not a folder"


def test_a_cache_limit_that_is_not_a_size_fails_clearly(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_LIMIT", "abc")
    for args in (["kernels", str(a100_export)], ["cache"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert "HARNESS_CACHE_LIMIT='abc' is not a size" in result.output


def test_max_size_0_leaves_no_entry_and_caches_nothing_after(a100_export: Path, cache_dir: Path) -> None:
    assert runner.invoke(app, ["kernels", str(a100_export)]).exit_code == 0
    assert len(Cache().entries()) == 1
    result = runner.invoke(app, ["cache", "--max-size", "0"])
    assert result.exit_code == 0 and Cache().entries() == []
    table = runner.invoke(app, ["kernels", str(a100_export), "-f", "csv"])
    assert table.exit_code == 0 and Cache().entries() == []
    assert pd.read_csv(io.StringIO(table.stdout))["Instances"].sum() == 5
