"""Two single-process exports merged into one file: every table of the merged file equals the two files'
tables combined.

A correlationId is unique within a process, not within an export (one nsys around torchrun records both
ranks, and their ids collide). The second file is the first with its process renumbered, so every
correlationId of one process is also used by the other: a table that joins or de-duplicates calls by
correlationId alone gets the merged file wrong. The A100 fixture also records each runtime call twice on one
thread, which must still count once.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from conftest import SHARED_NSYS, need

from analysis.tables import api, combine, kernels, launch, memops, nvtx, nvtx_gpu, run_task
from analysis.trace.multi import label_sources
from analysis.trace.opening import open_trace

OTHER_PID = 4242  # the renumbered process


def _moved(column: str) -> str:
    """`column` of a row of the renumbered process: the pid bits (24-47) of globalPid / globalTid."""
    return f"(({column} & ~(0xFFFFFF << 24)) | ({OTHER_PID} << 24))"


def _tables_with_pids(con: sqlite3.Connection) -> dict[str, list[tuple[str, bool]]]:
    """Tables with a globalPid or globalTid column and rows: their columns, and which is a primary key."""
    out = {}
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        cols = [(r[1], r[5] > 0) for r in con.execute(f'PRAGMA table_info("{name}")')]
        if (
            any(c in ("globalPid", "globalTid") for c, _ in cols)
            and con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
        ):
            out[name] = cols
    return out


def _select(cols: list[tuple[str, bool]]) -> str:
    def one(col: str, pk: bool) -> str:
        if pk:
            return "NULL"  # a new rowid
        if col in ("globalPid", "globalTid", "endGlobalTid"):
            return _moved(col)
        return f'"{col}"'

    return ", ".join(one(c, pk) for c, pk in cols)


def renumbered(src: Path, dst: Path) -> Path:
    """A copy of `src` with its process renumbered (the fixture itself is only read)."""
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    for name, cols in _tables_with_pids(con).items():
        sets = ", ".join(
            f'"{c}" = {_moved(c)}' for c, _ in cols if c in ("globalPid", "globalTid", "endGlobalTid")
        )
        con.execute(f'UPDATE "{name}" SET {sets}')
    con.commit()
    con.close()
    return dst


def merged(src: Path, dst: Path) -> Path:
    """`src` with the rows of its renumbered copy added: two processes, the same correlationIds."""
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    for name, cols in _tables_with_pids(con).items():
        names = ", ".join(f'"{c}"' for c, _ in cols)
        con.execute(f'INSERT INTO "{name}" ({names}) SELECT {_select(cols)} FROM "{name}"')
    con.commit()
    con.close()
    return dst


@pytest.fixture(params=["a100-saxpy-mpi", "ext/llama3_realsim"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path, Path]:
    src = SHARED_NSYS / request.param / "report.sqlite"
    need(src)
    return src, renumbered(src, tmp_path / "other.sqlite"), merged(src, tmp_path / "merged.sqlite")


def _combined(kind: str, paths: list[Path], options: dict | None = None) -> list[pd.DataFrame]:
    parts = [run_task(str(p), kind, options or {}, cache=False) for p in paths]
    return [df for _, df in combine(kind, parts, label_sources(paths, parts), options=options).tables]


def _rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows in one order, for tables whose rows are per process (stacked from both files)."""
    df = df.drop(columns=[c for c in ("Source", "Rank") if c in df.columns]).astype(str)
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def _same(ours: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Equal on the columns both have (the combined tables may add a column, e.g. bytes for sorting)."""
    cols = [c for c in ours.columns if c in expected.columns]
    assert len(cols) >= len(ours.columns) - 1
    pd.testing.assert_frame_equal(
        ours[cols].reset_index(drop=True), expected[cols].reset_index(drop=True), check_dtype=False
    )


def test_summaries_of_the_merged_file_equal_the_two_files_combined(pair: tuple[Path, Path, Path]) -> None:
    one, other, both = pair
    for kind, table in (
        ("kernels", kernels.kernel_summary),
        ("api", api.cuda_api_summary),
        ("nvtx", nvtx.nvtx_summary),
    ):
        (expected,) = _combined(kind, [one, other])
        _same(table(open_trace(both, cache=False)), expected)
    by_time, by_size = _combined("memops", [one, other])
    _same(memops.memops_time(open_trace(both, cache=False)), by_time)
    _same(memops.memops_size(open_trace(both, cache=False)), by_size)


def test_per_process_tables_of_the_merged_file_are_the_two_files_tables(
    pair: tuple[Path, Path, Path],
) -> None:
    one, other, both = pair
    for table in (launch.launch_summary, lambda t: nvtx_gpu.nvtx_gpu_kernels(t, mode="thread")):
        ours = table(open_trace(both, cache=False))
        stacked = pd.concat([table(open_trace(p, cache=False)) for p in (one, other)], ignore_index=True)
        assert len(ours) == len(stacked)
        pd.testing.assert_frame_equal(_rows(ours), _rows(stacked))


def test_the_api_counts_every_call_of_both_processes(pair: tuple[Path, Path, Path]) -> None:
    one, _, both = pair
    single = api.cuda_api_summary(open_trace(one, cache=False))
    double = api.cuda_api_summary(open_trace(both, cache=False)).set_index("Name")
    single = single.set_index("Name")
    assert (double["Num Calls"] == 2 * single.loc[double.index, "Num Calls"]).all()
    assert (double["Total Time (ns)"] == 2 * single.loc[double.index, "Total Time (ns)"]).all()


def test_a_kineto_trace_merged_from_two_ranks_credits_each_kernel_to_its_own_process(tmp_path: Path) -> None:
    """Two ranks' events in one Kineto file: the same correlation ids, the second rank's CPU rows under
    another pid and its GPU rows on device 1. Each kernel goes to the process that drove its device."""
    from kineto_data import raw_events, write_trace

    events = raw_events("alexnet")
    main = 2869224
    second = []
    for e in events:
        e2 = {**e, "args": dict(e.get("args") or {})}
        if e.get("pid") == main:
            e2["pid"] = main + 1
            if e.get("tid") == main:
                e2["tid"] = main + 1
        elif isinstance(e.get("pid"), int) and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e2["pid"] = 1
            e2["args"]["device"] = 1
        else:
            continue
        second.append(e2)
    both = write_trace(tmp_path / "two_ranks.json", [*events, *second])
    k = open_trace(both, cache=False).frame("kernels", ["global_pid", "device_id"])
    pid = (k["global_pid"].to_numpy() >> 24) & 0xFFFFFF
    n = sum(e.get("cat") == "kernel" for e in events)
    assert n == 79
    assert sorted(zip(k["device_id"], pid, strict=True)).count((0, main)) == n
    assert sorted(zip(k["device_id"], pid, strict=True)).count((1, main + 1)) == n
