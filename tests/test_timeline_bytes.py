"""`harness timeline` writes the same bytes as before the NVTX ranges were read a chunk at a time:
every nsys export and Kineto trace of ../shared/fixtures against the SHA-256 of the file that 7f6c3d8
(the ranges read whole) wrote, with the default chunks and with chunks so small that every export's NVTX
ranges come in many (rowids per query of NVTX_EVENTS, ranges per batch, rows per line batch). Smaller
queries of the other tables would reorder the GPU lines (the same lines, as in 7f6c3d8).

tests/golden/timeline.sha256 (`sha256  fixture`); HARNESS_UPDATE_GOLDEN=1 rewrites it from this code."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, need

from analysis.readers import nsys, nsys_sql
from analysis.trace.opening import open_trace
from analysis.views import chrome_trace

FIXTURES = REPO.parent / "shared" / "fixtures"
DIGESTS = REPO / "tests" / "golden" / "timeline.sha256"
WANT = dict(line.split()[::-1] for line in DIGESTS.read_text().splitlines() if line.strip())


def written(name: str, out: Path) -> str:
    path = FIXTURES / name
    need(path)
    chrome_trace.write_chrome_trace(open_trace(path, cache=False), out)
    return hashlib.sha256(out.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", sorted(WANT))
def test_timeline_bytes_as_before(tmp_path: Path, name: str) -> None:
    digest = written(name, tmp_path / "default.json")
    if os.environ.get("HARNESS_UPDATE_GOLDEN") == "1":
        WANT[name] = digest
        DIGESTS.write_text("".join(f"{WANT[n]}  {n}\n" for n in sorted(WANT)))
    assert digest == WANT[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WANT))
def test_timeline_bytes_as_before_in_small_chunks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    scan_blocks, rowids = nsys.NsysReader.scan_blocks, nsys_sql.CHUNK_ROWIDS

    def small_nvtx_queries(self: Any, table: str, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(nsys_sql, "CHUNK_ROWIDS", 97 if table == "NVTX_EVENTS" else rowids)
        try:
            yield from scan_blocks(self, table, *args, **kwargs)
        finally:
            monkeypatch.setattr(nsys_sql, "CHUNK_ROWIDS", rowids)

    monkeypatch.setattr(nsys.NsysReader, "scan_blocks", small_nvtx_queries)
    monkeypatch.setattr(chrome_trace, "CHUNK", 101)
    monkeypatch.setattr(chrome_trace, "NVTX_CHUNK", 13)
    assert written(name, tmp_path / "chunks.json") == WANT[name]
