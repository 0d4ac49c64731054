"""Readers: one per trace format, each filling the frames of `analysis.trace.FRAMES` from its files.

What every reader shares lives here (readers import nothing else of the trace model).
"""

from __future__ import annotations

import numpy as np

NULL = -9223372036854775807  # stands for a missing value in integer columns


def valid_duration(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """end - start, NULL where either is NULL or the end comes before the start."""
    bad = (start == NULL) | (end == NULL) | (end < start)
    return np.where(bad, NULL, end - start)
