"""How NVTX ranges are grouped, declared once (`NvtxBy`, `grouping`) for `harness nvtx`, `nvtx-gpu`,
`summary` and `harness diff` of two exports: their `--by` and `--raw-names` name one of
analysis.nvtx_names.GROUPINGS."""

from __future__ import annotations

from enum import StrEnum


class NvtxBy(StrEnum):
    op = "op"
    shape = "shape"


def grouping(by: NvtxBy, raw_names: bool) -> str:
    """The NVTX grouping of analysis.nvtx_names the options name."""
    return "raw" if raw_names else by.value
