"""The tables built a block at a time give the numbers of the whole-column way they replaced:
on every nsys export of the corpus, with tiny blocks (so every group spans many blocks) and the default."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import NSYS_EXPORTS, shared_export

from analysis.errors import ExportError
from analysis.joins.nvtx_ranges import all_ranges, grouped_tags
from analysis.joins.runtime import _calls_among, _calls_among_columns, runtime_calls
from analysis.readers import NULL
from analysis.stats import Repeats, describe, order_like_nsys, time_percent
from analysis.tables.api import cuda_api_summary, summarize_calls
from analysis.tables.nvtx import NVTXSUM_COLUMNS, nvtx_summary
from analysis.trace.opening import open_trace


def _whole_nvtxsum(trace, by: str) -> pd.DataFrame:
    """nvtx_summary as it was: every range's printed name, grouped by pandas (stats.describe)."""
    ranges = all_ranges(trace)
    names, _ = grouped_tags(ranges, by)
    data = pd.DataFrame(
        {"Range": names.astype(object), "Style": ranges["style"], "duration": ranges["duration_ns"]}
    )
    out = describe(data, ["Range", "Style"])
    out = order_like_nsys(out, "Total Time (ns)", ["Range", "Style"])
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    return out[NVTXSUM_COLUMNS]


@pytest.mark.parametrize("name", NSYS_EXPORTS)
def test_cudaapisum_blocks_equal_the_whole_table(name: str) -> None:
    trace = open_trace(shared_export(name), cache=False)
    if not trace.has("runtime"):  # the block way refuses as the whole way does
        with pytest.raises(ExportError, match="CUDA API"):
            cuda_api_summary(trace, block_rows=7)
        return
    calls = runtime_calls(trace)
    whole = summarize_calls(calls.assign(duration=calls["end"] - calls["start"]), calls.attrs["names"])
    for rows in (7, 1000, None):
        got = cuda_api_summary(open_trace(shared_export(name), cache=False), block_rows=rows)
        pd.testing.assert_frame_equal(got, whole, check_exact=True)


@pytest.mark.parametrize("name", NSYS_EXPORTS)
@pytest.mark.parametrize("by", ["raw", "op"])
def test_nvtxsum_blocks_equal_the_whole_table(name: str, by: str) -> None:
    trace = open_trace(shared_export(name), cache=False)
    if not trace.has("nvtx"):  # the block way refuses, naming what is missing
        with pytest.raises(ExportError, match=r"^no NVTX data in"):
            nvtx_summary(trace, by, block_rows=5)
        return
    whole = _whole_nvtxsum(trace, by)
    for rows in (5, None):
        got = nvtx_summary(open_trace(shared_export(name), cache=False), by, block_rows=rows)
        pd.testing.assert_frame_equal(
            got.reset_index(drop=True), whole.reset_index(drop=True), check_exact=True
        )


@pytest.mark.parametrize("name", NSYS_EXPORTS)
def test_launch_calls_by_blocks_equal_the_columns_way(name: str) -> None:
    trace = open_trace(shared_export(name), cache=False)
    if trace.has("kernels"):
        wanted = pd.unique(trace.frame("kernels", ["correlation_id"])["correlation_id"].to_numpy())
    else:  # calls by ids of no kernel
        wanted = np.array([1, 2, 10**12], dtype=np.int64)
    whole = _calls_among_columns(trace, wanted)
    for rows in (3, None):
        got = _calls_among(open_trace(shared_export(name), cache=False), wanted, block_rows=rows)
        pd.testing.assert_frame_equal(
            got.reset_index(drop=True), whole.reset_index(drop=True), check_exact=True
        )
        assert got.attrs == whole.attrs


def test_repeats_finds_an_id_seen_twice_across_blocks_and_within_one() -> None:
    rng = np.random.default_rng(3)
    ids = rng.permutation(100_000) + 5_000
    r = Repeats(1 << 20)
    assert all(r.seen(part, NULL) is False for part in np.array_split(ids, 17))
    assert r.seen(np.array([NULL, NULL, 7], dtype=np.int64), NULL) is False  # NULL never repeats; 7 is new
    assert r.seen(np.array([ids[500]], dtype=np.int64), NULL) is True
    assert Repeats(1 << 20).seen(np.array([9, 3, 9], dtype=np.int64), NULL) is True
    assert Repeats(10).seen(np.array([0, 100], dtype=np.int64), NULL) is None  # past the limit: cannot say


def _thread_tables(trace, **kw) -> tuple[pd.DataFrame, ...]:
    from analysis.tables.nvtx_gpu import nvtx_gpu_kernels, nvtx_gpu_summary

    return (
        nvtx_gpu_kernels(trace, mode="thread", by="raw", **kw),
        nvtx_gpu_kernels(trace, mode="thread", by="op", top=2, **kw),
        nvtx_gpu_summary(trace, mode="thread", **kw),
    )


@pytest.mark.parametrize("name", NSYS_EXPORTS)
@pytest.mark.parametrize("exclusive", [False, True])
def test_thread_attribution_in_one_pass_equals_the_whole_join(
    name: str, exclusive: bool, monkeypatch
) -> None:
    import functools

    import analysis.joins.nvtx_credits as nvtx_credits
    import analysis.joins.nvtx_sweep as sweep

    trace = open_trace(shared_export(name), cache=False)
    if not (trace.has("nvtx") and trace.has("kernels") and trace.has("runtime")):
        return
    whole_way = nvtx_credits._swept
    with monkeypatch.context() as m:
        m.setattr(nvtx_credits, "_swept", lambda *a, **k: None)
        whole = _thread_tables(trace, exclusive=exclusive)
        whole_notes = [t.attrs["notes"] for t in whole]
    calls = []
    original = sweep.thread_sweep
    for rows in (3, 7, 1 << 18):
        with monkeypatch.context() as m:
            m.setattr(sweep, "thread_sweep", functools.partial(original, rows=rows))
            m.setattr(nvtx_credits, "_swept", lambda *a, **k: calls.append(a) or whole_way(*a, **k))
            got = _thread_tables(open_trace(shared_export(name), cache=False), exclusive=exclusive)
        for g, w, notes in zip(got, whole, whole_notes, strict=True):
            pd.testing.assert_frame_equal(g, w, check_exact=True)
            assert g.attrs["notes"] == notes
    assert calls


@pytest.mark.parametrize("name", NSYS_EXPORTS)
def test_kernexecsum_by_blocks_equals_the_whole_join(name: str) -> None:
    from analysis.joins.launch_join import Unordered
    from analysis.tables.launch import _by_blocks, _whole

    trace = open_trace(shared_export(name), cache=False)
    if not (trace.has("kernels") and trace.has("runtime")):
        return
    whole = _whole(trace)
    for rows in (3, 7, 1 << 18):
        fresh = open_trace(shared_export(name), cache=False)
        try:
            got = _by_blocks(fresh, rows)
        except Unordered:  # the export is not in correlationId order: launch_summary takes the whole join
            continue
        pd.testing.assert_frame_equal(got, whole, check_exact=True)
        assert got.attrs["notes"] == whole.attrs["notes"]


def test_one_pass_counts_a_kernel_once_in_nested_ranges_of_one_name(tmp_path, monkeypatch) -> None:
    """A range inside one of the same name on its thread (renamed so in a copy of a fixture the one-pass
    way reads): each kernel once per row, and the note, as the whole join gives them."""
    import functools
    import sqlite3

    from export_data import derive

    import analysis.joins.nvtx_credits as nvtx_credits
    import analysis.joins.nvtx_sweep as sweep
    from analysis.joins.nvtx_credits import attribute

    src = shared_export("ext/dlprof_norelu")
    _, ranges, pairs = attribute(open_trace(src, cache=False), "thread", range_columns=("range_id",))
    credited = pairs.loc[pairs["range"] >= 0, "range"].unique()
    inner = next(r for r in credited if ranges["parent_row"].iloc[r] >= 0)
    ids = ranges["range_id"].iloc[[inner, ranges["parent_row"].iloc[inner]]].tolist()
    has_text_id = "textId" in {r[1] for r in sqlite3.connect(src).execute("PRAGMA table_info(NVTX_EVENTS)")}
    renamed = "text = 'twice'" + (", textId = NULL" if has_text_id else "")
    path = derive(
        src, tmp_path / "nested.sqlite", f"UPDATE NVTX_EVENTS SET {renamed} WHERE rowid IN {tuple(ids)}"
    )
    with monkeypatch.context() as m:
        m.setattr(nvtx_credits, "_swept", lambda *a, **k: None)
        whole = _thread_tables(open_trace(path, cache=False))
    assert any("nested NVTX ranges of the same name" in n for n in whole[0].attrs["notes"])
    original = sweep.thread_sweep
    for rows in (3, 1 << 16):
        with monkeypatch.context() as m:
            m.setattr(sweep, "thread_sweep", functools.partial(original, rows=rows))
            got = _thread_tables(open_trace(path, cache=False))
        for g, w in zip(got, whole, strict=True):
            pd.testing.assert_frame_equal(g, w, check_exact=True)
            assert g.attrs["notes"] == w.attrs["notes"]
    assert sweep.thread_sweep(open_trace(path, cache=False), by_name=True, ranged_only=False).twice
