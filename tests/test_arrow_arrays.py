"""analysis.trace.arrow_arrays: the arrays pa.array makes, without importing pandas."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO

from analysis.trace.arrow_arrays import int64_array, string_array

TEXTS = ["a", "", "héllo", "x" * 10, "k\x1b]0;\x07", "€€", "saxpy(double *, int)"]


@pytest.mark.parametrize("values", [np.arange(10)[::3], np.array([1, -2], dtype=np.int32), np.empty(0)])
def test_int64_array_is_pa_array(values: np.ndarray) -> None:
    out = int64_array(values)
    out.validate(full=True)
    assert out.equals(pa.array(values, type=pa.int64()))


@pytest.mark.parametrize(("limit", "chunks"), [(2**31 - 1, 1), (7, 5), (1, 6)])
def test_string_array_is_pa_array(limit: int, chunks: int) -> None:
    """Cut into chunks of at most `limit` bytes (a longer string alone in its chunk), same values."""
    out = string_array(TEXTS, limit)
    parts = out.chunks if isinstance(out, pa.ChunkedArray) else [out]
    assert len(parts) == chunks
    for chunk in parts:
        chunk.validate(full=True)
        assert len(chunk) == 1 or sum(len(s.encode()) for s in chunk.to_pylist()) <= limit
    assert out.type == pa.string()
    assert out.to_pylist() == TEXTS
    assert string_array([]).to_pylist() == []


def test_no_pandas() -> None:
    code = (
        "import sys, numpy as np; from analysis.trace.arrow_arrays import int64_array, string_array; "
        "int64_array(np.arange(3)); string_array(['a']); assert 'pandas' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
