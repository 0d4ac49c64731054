"""The CUDA API summary against cudaapisum: the same figures, each call once."""

from __future__ import annotations

from pathlib import Path

from export_data import as_printed, oracle

from analysis.tables.api import APISUM_COLUMNS, cuda_api_summary
from analysis.trace.opening import open_trace


def test_cudaapisum_oracle_without_the_twins(a100_export: Path, a100_expected: Path) -> None:
    ours = as_printed(cuda_api_summary(open_trace(a100_export)))
    theirs = oracle(a100_expected, "cudaapisum")
    assert list(ours.columns) == APISUM_COLUMNS
    # nsys lists cudaMemcpy, cudaFree, cudaMalloc and cudaLaunchKernel twice; its first row of each name
    # is the plain-named call, which is the one kept
    plain = theirs.drop_duplicates("Name")
    assert len(theirs) == 11 and len(ours) == 7
    cols = [c for c in APISUM_COLUMNS if c != "Time (%)"]
    assert ours[cols].to_dict("records") == plain[cols].reset_index(drop=True).to_dict("records")
    assert ours["Time (%)"].tolist() == [53.2, 45.0, 0.8, 0.6, 0.3, 0.0, 0.0]
    assert ours["Time (%)"].tolist() != plain["Time (%)"].tolist()  # the shares change without twins
