"""Rows of a column of names (an NVTX range's name, a domain) tested once per distinct name, not once per row:
a categorical column's categories, or a plain column's distinct values, with each row's code into them. A
capture of 1.8M NVTX ranges holds a few dozen names; turning every row into a string to compare it took
longer than the rest of `harness health` together."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd


def label_codes(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Each row's code (-1: missing) and the names the codes index, as strings (`astype(str)` of a row)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = np.asarray(column.cat.codes.to_numpy(), dtype=np.int64)
        labels = column.cat.categories
    else:
        raw, labels = pd.factorize(column)
        codes = np.asarray(raw, dtype=np.int64)
    return codes, pd.Index(labels).astype(str)


def label_test(column: pd.Series, test: Callable[[pd.Index], Any]) -> np.ndarray:
    """Which rows' names pass `test` (given the distinct names, it answers one bool each); a missing name
    passes none."""
    codes, labels = label_codes(column)
    hit = np.append(np.asarray(test(labels), dtype=bool), False)  # code -1 reads the last: False
    return hit[codes]


def label_in(column: pd.Series, names: Any) -> np.ndarray:
    """Which rows' names are among `names`."""
    wanted = set(names)
    return label_test(column, lambda labels: [n in wanted for n in labels])


def labels_of(column: pd.Series, rows: np.ndarray) -> np.ndarray:
    """The names of the rows `rows` (a bool mask) as strings, as `column.astype(str)` gives them; only
    rows whose name is there (their test passed)."""
    codes, labels = label_codes(column)
    return labels.to_numpy(dtype=object)[codes[rows]]
