"""How NVTX ranges are grouped in `harness diff` of two exports (`NvtxBy`): its `--by`, with `--raw-names`,
names one of analysis.nvtx_names.GROUPINGS through analysis.tables.nvtx.grouping, as the NVTX tables'
options do."""

from __future__ import annotations

from enum import StrEnum


class NvtxBy(StrEnum):
    op = "op"
    shape = "shape"
