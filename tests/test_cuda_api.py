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


def test_rows_name_each_distinct_id_once(h100_export: Path, series_maps: list[int]) -> None:
    """The rows a table over several exports groups (api_rows) made a name string for every CUDA call
    before grouping: they are grouped by string id, then each distinct id is named once. No Series as long
    as the calls is mapped to names; the rows' names are the calls' (59,945 calls, none twice)."""
    from export_data import query_rows

    from analysis.joins.runtime import plain_name
    from analysis.tables.api import api_rows

    with open_trace(h100_export) as trace:
        rows = api_rows(trace)
    assert len(rows) == 59_945 and max(series_maps) < 1_000
    query = (
        "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "GROUP BY s.value"
    )
    expected: dict[str, int] = {}
    for name, n in query_rows(h100_export, query):  # cudaLaunchKernel_v7000 is cudaLaunchKernel, as nsys says
        expected[plain_name(name)] = expected.get(plain_name(name), 0) + n
    assert rows["Name"].value_counts().to_dict() == expected
