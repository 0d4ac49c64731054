"""scripts/trim_export.py: an export made small for tests/data (the tables the fixtures leave out emptied,
xz -9), its kernels and NVTX as they were, the export given only read."""

from __future__ import annotations

import hashlib
import lzma
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import CPU_DIR, REPO, need

SCRIPT = REPO / "scripts" / "trim_export.py"


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_an_export_is_trimmed_into_a_copy(tmp_path: Path) -> None:
    export = need(CPU_DIR / "report.sqlite")
    before = hashlib.sha256(export.read_bytes()).hexdigest()
    out = tmp_path / "cpu-train.sqlite.xz"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(export), str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "OSRT_API 10,911" in done.stdout
    unpacked = tmp_path / "cpu-train.sqlite"
    unpacked.write_bytes(lzma.decompress(out.read_bytes()))
    assert _count(unpacked, "OSRT_API") == 0 and _count(export, "OSRT_API") == 10_911
    assert _count(unpacked, "NVTX_EVENTS") == _count(export, "NVTX_EVENTS") > 0
    assert out.stat().st_size < export.stat().st_size / 4
    assert hashlib.sha256(export.read_bytes()).hexdigest() == before


def test_what_is_not_an_export_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.sqlite"
    bad.write_text("not a database")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(bad), str(tmp_path / "x.sqlite.xz")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "not an SQLite export" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
