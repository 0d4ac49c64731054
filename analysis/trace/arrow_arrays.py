"""Arrow arrays made from numpy arrays and Python strings over their buffers, without pandas.

pyarrow's `pa.array` (and `Table.from_pandas`) first asks pandas whether its argument is a Series or a
categorical, importing it (0.28 s): most of what a cold `harness kernels` imported beyond the reader and
pyarrow. The arrays here hold the same values and types as `pa.array` gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the Parquet cache's modules import this one, and a warm command
    import numpy as np  # served from the cache needs neither
    import pyarrow as pa

# the most bytes one arrow string array addresses (int32 offsets); a longer column is cut into chunks,
# as Table.from_pandas cuts it
STRING_BYTES = 2**31 - 1


def int64_array(values: np.ndarray) -> pa.Array:
    """`values` as an arrow int64 array without nulls, over their buffer (a copy unless contiguous int64)."""
    import numpy as np
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def string_array(values: Sequence[str], limit: int = STRING_BYTES) -> pa.Array | pa.ChunkedArray:
    """`values` as an arrow string array without nulls; chunked where they add up to over `limit` bytes."""
    import numpy as np
    import pyarrow as pa

    encoded = [v.encode("utf-8") for v in values]
    ends = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=ends[1:])
    chunks = []
    lo = 0
    while lo < len(encoded) or not chunks:
        # the most strings from lo on within the limit, at least one
        hi = max(int(np.searchsorted(ends, ends[lo] + limit, side="right")) - 1, min(lo + 1, len(encoded)))
        offsets = (ends[lo : hi + 1] - ends[lo]).astype(np.int32)
        data = b"".join(encoded[lo:hi])
        chunks.append(
            pa.Array.from_buffers(pa.string(), hi - lo, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        )
        lo = hi
    return chunks[0] if len(chunks) == 1 else pa.chunked_array(chunks, type=pa.string())
