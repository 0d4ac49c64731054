"""A trace seen through a rule (HTA's load rules, one process of a capture): the frames are the view's,
the data and the source stay the base trace's, read once."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from analysis.trace.frames import rows_of
from analysis.trace.trace import Trace


class TraceView(Trace):
    """A trace seen through a rule (HTA's load rules, one process of a capture): the frames are the
    subclass's, the data and the source stay the base trace's, read once."""

    def __init__(self, base: Trace) -> None:  # no super().__init__: the base trace holds the data
        self.base = base
        self.path = base.path
        self.meta = base.meta
        self.format = base.format

    @property
    def reader(self) -> Any:
        return self.base.reader

    @property
    def source_reads(self) -> dict[str, int]:
        return self.base.source_reads

    @property
    def cache_entry(self) -> Any:
        """None: the entry is the source's, and a view's tables are not the source's."""
        return None

    def _cached_strings(self) -> dict[int, str] | None:
        return None

    def capture_facts(self) -> dict[str, int | bool]:
        return self.base.capture_facts()

    def _raw_blocks(self, frame: str, columns: list[str], rows: int) -> Iterator[dict[str, np.ndarray]]:
        """The view's columns (its `_columns`), whole, handed out a block at a time."""
        data = self._columns(frame, columns)
        for lo in range(0, len(data[columns[0]]), rows):
            yield {c: rows_of(data[c], lo, lo + rows) for c in columns}

    def close(self) -> None:
        self.base.close()

    def load(self, wanted: Mapping[str, Iterable[str]]) -> None:
        self.base.load(wanted)

    def stage(self, wanted: Mapping[str, Iterable[str]]) -> bool:
        return False  # a view's frames are its own: `load` them

    def release(self) -> None:
        return None
