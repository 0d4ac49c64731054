"""Hostile Kineto traces: names that are lists or hold lone surrogates, invalid fields, grids
that are not grids. Each gives the right table with a note, or one clear line; never a traceback."""

from __future__ import annotations

import gzip
import io
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kineto_data import write_trace
from reading import flat
from typer.testing import CliRunner

import analysis.readers.kineto_stream as stream
from analysis.readers.kineto import open_kineto
from analysis.tables.kernels import kernel_summary
from analysis.trace.opening import open_trace
from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()
ARGS = {"stream": 7, "correlation": 1, "device": 0, "grid": [2, 1, 1], "block": [128, 1, 1]}
KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": ARGS}


def kernels_csv(path: Path, *extra: str) -> tuple[pd.DataFrame, str]:
    result = runner.invoke(app, ["kernels", str(path), "-f", "csv", *extra])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return pd.read_csv(io.StringIO(result.stdout)), result.stderr


def test_a_name_that_is_a_list_is_kept_as_text(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", [KERNEL, {**KERNEL, "name": ["a", 1], "ts": 20}])
    table, _ = kernels_csv(path)
    assert sorted(table["Name"]) == ['["a", 1]', "k"]
    assert table["Total Time (ns)"].sum() == 10_000


def test_lone_surrogates_are_kept_escaped_and_counted(tmp_path: Path) -> None:
    # json.dumps writes "\ud800" as the escape JSON allows; json.loads gives a str UTF-8 cannot hold
    events = [{**KERNEL, "name": "k\ud800x"}, {**KERNEL, "name": "k\udfff", "ts": 30}, KERNEL]
    path = write_trace(tmp_path / "t.json", events)
    table, err = kernels_csv(path)  # with the cache: the names are written to Parquet
    assert sorted(table["Name"]) == ["k", "k\\ud800x", "k\\udfff"]
    assert "2 names held invalid Unicode (lone surrogates): kept, with \\uXXXX escapes" in err
    again, _ = kernels_csv(path)  # from the cache: the same
    assert sorted(again["Name"]) == sorted(table["Name"])


def test_a_thread_named_with_a_surrogate_is_kept(tmp_path: Path) -> None:
    meta = {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "t\ud800"}}
    call = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 7, "ts": 8,
            "dur": 1, "args": {"correlation": 1}}  # fmt: skip
    path = write_trace(tmp_path / "t.json", [meta, call, KERNEL])
    result = runner.invoke(app, ["api", str(path), "-f", "csv"])
    assert result.exit_code == 0 and "Traceback" not in result.output


def test_dropped_events_are_counted_with_the_reason(tmp_path: Path) -> None:
    events = [KERNEL, {**KERNEL, "ts": "soon"}, {**KERNEL, "dur": -1}, {**KERNEL, "ts": [1]}]
    table, err = kernels_csv(write_trace(tmp_path / "t.json", events), "--no-cache")
    assert table["Instances"].tolist() == [1]
    assert "left out 3 Kineto events with no usable ts or dur" in err and "(3 kernel)" in err


def test_all_events_invalid_says_so_not_unrelated_advice(tmp_path: Path) -> None:
    events = [{**KERNEL, "ts": "soon"}, {**KERNEL, "dur": None}]
    result = runner.invoke(app, ["kernels", str(write_trace(tmp_path / "t.json", events)), "--no-cache"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "all 2 of its kernel events were left out (no usable ts or dur" in result.output
    assert "ProfilerActivity.CUDA" not in result.output


def test_one_left_out_event_is_said_as_one(tmp_path: Path) -> None:
    """`left out 1 Kineto event`, `1 name held`, `its kernel event was left out`: no plural for one."""
    kept = write_trace(tmp_path / "t.json", [{**KERNEL, "name": "k\ud800"}, {**KERNEL, "ts": "soon"}])
    _, err = kernels_csv(kept, "--no-cache")
    assert "left out 1 Kineto event with no usable ts or dur" in err and "(1 kernel)" in err
    assert "1 name held invalid Unicode" in err
    lone = write_trace(tmp_path / "lone.json", [{**KERNEL, "ts": "soon"}])
    result = runner.invoke(app, ["kernels", str(lone), "--no-cache"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "its kernel event was left out (no usable ts or dur" in flat(result.output)


def test_a_malformed_grid_is_unknown_not_zero(tmp_path: Path) -> None:
    bad = [
        {**KERNEL, "args": {**ARGS, "grid": g}, "ts": 20 + i}
        for i, g in enumerate(["zz", [1, 2], [2**40, 1, 1], [-1, 1, 1]])
    ]
    trace = open_trace(write_trace(tmp_path / "t.json", [KERNEL, *bad]), cache=False)
    table = kernel_summary(trace)
    assert sorted(table["GridXYZ"]) == ["   2    1    1", "unknown"]
    assert table.set_index("GridXYZ").loc["unknown", "Instances"] == 4


def test_huge_timestamps_are_left_out_not_wrapped(tmp_path: Path) -> None:
    events = [
        KERNEL,
        {**KERNEL, "ts": 10**17},
        {**KERNEL, "ts": 2**62, "dur": 2**62},
        {**KERNEL, "ts": "1e300"},
    ]
    trace = open_trace(write_trace(tmp_path / "t.json", events), cache=False)
    table = kernel_summary(trace)
    assert table["Instances"].tolist() == [1] and table["Total Time (ns)"].tolist() == [5000]


def test_odd_pids_and_step_numbers(tmp_path: Path) -> None:
    events = [
        {**KERNEL, "pid": [1, 2], "tid": {"a": 1}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#" + "9" * 30, "pid": [0], "tid": None,
         "ts": 1, "dur": 100},
    ]  # fmt: skip
    path = write_trace(tmp_path / "t.json", events)
    for command in ("kernels", "nvtx", "nvtx-gpu", "summary"):
        result = runner.invoke(app, [command, str(path)])
        assert result.exit_code in (0, 1) and "Traceback" not in result.output, (command, result.output)


def test_the_most_negative_int64_timestamp_is_left_out(tmp_path: Path) -> None:
    events = [KERNEL, {**KERNEL, "ts": -(2**63)}, {**KERNEL, "dur": -(2**63)}]
    trace = open_trace(write_trace(tmp_path / "t.json", events), cache=False)
    assert kernel_summary(trace)["Total Time (ns)"].tolist() == [5000]


# --- whitespace: the reader is linear in its input and holds no run of it ------------------

CALL = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 3, "tid": 4, "ts": 8, "dur": 1,
        "args": {"correlation": 1}}  # fmt: skip
SECOND = {**KERNEL, "ts": 20}
PLACES = ["before the document", "between keys", "between events", "before a comma", "after the document"]


def spaced(place: str, space: str) -> str:
    """A small trace with a run of whitespace in one place."""
    call, first, second = (json.dumps(e) for e in (CALL, KERNEL, SECOND))
    events = {
        "between events": f"[{call}, {first},{space}{second}]",
        "before a comma": f"[{call}, {first}{space}, {second}]",
    }.get(place, f"[{call}, {first}, {second}]")
    doc = f'{{"schemaVersion": 1,{space if place == "between keys" else " "}"traceEvents": {events}}}'
    return {"before the document": space + doc, "after the document": doc + space}.get(place, doc)


def stream_steps(text: str) -> int:
    """Lines of analysis.readers.kineto_stream run while it walks `text`, handed 4 KiB a read."""
    source = io.BytesIO(text.encode())
    steps = 0

    def count(frame: Any, event: str, arg: Any) -> Any:
        nonlocal steps
        if frame.f_code.co_filename != stream.__file__:
            return None
        steps += event == "line"
        return count

    sys.settrace(count)
    try:
        for _ in stream.TraceStream(Path("t.json"), lambda n: source.read(min(n, 4096))):
            pass
    finally:
        sys.settrace(None)
    return steps


@pytest.mark.parametrize("place", PLACES)
def test_whitespace_costs_no_step_a_byte(monkeypatch: pytest.MonkeyPatch, place: str) -> None:
    # 10 MB of leading spaces took 2.7 s, 50 MB 20 s, 100 MB 65 s: a Python step a byte, and each
    # read-on scanned the run again. Counted in steps, not seconds: a run is skipped a buffer at a
    # time (the old reader took two steps a byte: 131,000 here), and 4x the run takes about 4x the steps
    monkeypatch.setattr(stream, "CHUNK", 4096)
    small, big = (stream_steps(spaced(place, " " * n)) for n in (16 << 10, 64 << 10))
    assert big < (64 << 10) // 16, f"{big:,} steps for 64 KiB of whitespace"
    assert big <= 5 * small, (small, big)


def peak_reading(path: Path) -> int:
    """The most memory Python held at once while reading a trace (tracemalloc), in bytes."""
    tracemalloc.start()
    try:
        reader = open_kineto(path, workers=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reader.count("kernels") == 2 and reader.count("runtime") == 1
    return peak


@pytest.mark.parametrize("place", PLACES)
def test_a_long_run_of_whitespace_is_not_held(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, place: str
) -> None:
    # 1 GB of spaces in a 4.7 MB .json.gz gave no answer in 300 s; here 4 and 16 MiB (gzipped: KBs).
    # The reader's buffer and the decompressing thread's blocks take a few MiB whatever the run
    monkeypatch.setattr(stream, "CHUNK", 1 << 16)
    peaks = []
    for n in (2 << 20, 8 << 20):
        path = tmp_path / f"{n}.json.gz"
        path.write_bytes(gzip.compress(spaced(place, " \n" * n).encode(), compresslevel=1))
        peaks.append(peak_reading(path))
    assert peaks[1] < peaks[0] + (4 << 20), f"{peaks[0]:,} then {peaks[1]:,} bytes held at once"
