"""The Kineto reader reads a trace as a stream of pieces (analysis.readers.kineto_stream): wherever the
pieces are cut, and whether workers or the reader turn them into columns, the frames are the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kineto_data import raw_events, trace_path, write_trace

import analysis.readers.kineto_build as kineto_build
import analysis.readers.kineto_columns as columns
import analysis.readers.kineto_stream as stream
from analysis.errors import ExportError
from analysis.readers.kineto import open_kineto

ARGS = {"stream": 7, "correlation": 1, "device": 0, "grid": [2, 1, 1], "block": [128, 1, 1]}
KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": ARGS}
CALL = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 3, "tid": 4, "ts": 8, "dur": 1,
        "args": {"correlation": 1}}  # fmt: skip


def frames(path: Path, workers: int = 1) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    reader = open_kineto(path, workers=workers)
    return reader._frames, reader.meta()


def assert_same(
    a: tuple[dict[str, pd.DataFrame], dict[str, Any]], b: tuple[dict[str, pd.DataFrame], dict[str, Any]]
) -> None:
    assert a[0].keys() == b[0].keys()
    for name in a[0]:
        pd.testing.assert_frame_equal(a[0][name], b[0][name], obj=name)
    assert a[1] == b[1]


@pytest.mark.parametrize("chunk", [64, 4096])
def test_any_cut_gives_the_same_frames(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    path = trace_path("nccl")  # float times, two streams, user and GPU annotations
    whole = frames(path)
    monkeypatch.setattr(stream, "CHUNK", chunk)
    assert_same(frames(path), whole)


def test_workers_give_the_same_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    path = trace_path("alexnet")
    whole = frames(path)
    monkeypatch.setattr(stream, "CHUNK", 2048)  # forked workers see it too: many pieces, many cuts
    assert_same(frames(path, workers=2), whole)


def test_braces_in_names_and_nested_objects_are_not_cuts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # `}, {` inside a name, a list of objects in args, keys after traceEvents: cuts msgspec must refuse
    odd = {
        **KERNEL,
        "name": "f<{lambda()#1}, {x}>",
        "args": {**KERNEL["args"], "x": [{"a": "}, {"}, {"b": 1}]},
    }
    events = [CALL, *({**odd, "ts": 10 + i} for i in range(40)), KERNEL]
    path = write_trace(tmp_path / "t.json", events, deviceProperties=[{"name": "A"}])
    text = path.read_text()
    path.write_text(text[:-1] + ', "distributedInfo": {"rank": 3}, "z": [{"q": 1}]}')
    whole = frames(path)
    assert whole[0]["kernels"].shape[0] == 41 and whole[1]["rank"] == 3
    monkeypatch.setattr(stream, "CHUNK", 150)
    assert_same(frames(path), whole)
    assert_same(frames(path, workers=2), whole)


def test_float_times_are_exact(tmp_path: Path) -> None:
    kernel = json.dumps({**KERNEL, "ts": "TS", "dur": "DUR"})
    events = [kernel.replace('"TS"', ts).replace('"DUR"', dur) for ts, dur in
              [("1695835542514261.123", "0.0005"), ("1.0000001", "2.5e3")]]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + ", ".join(events) + "]}")  # float64 would not keep these digits
    kernels = frames(path)[0]["kernels"]
    assert kernels["start"].tolist() == [1695835542514261123, 1000]
    assert kernels["end"].tolist() == [1695835542514261123, 2501000]  # half a ns rounds to even


@pytest.mark.parametrize(
    "values",
    [
        ["4458676522690.655", "4458676522709.059", ".123", "0.000"],  # the fast path: three decimals
        ["1.5", "1.123"],  # fewer decimals
        ["1.2.345", "1.123"],  # two dots
        ["1_0.123", " 10.123", "-1.123", "\u0661.123"],  # what int() or isdigit() would let through
        ["9223372036854775.807", "99999999999999999999.123"],  # out of range
        ["1.123", 2],  # text and integers
    ],
)
def test_times_equal_each_text_read_alone(values: list[Any]) -> None:
    ns, ok = columns._times(values)
    for v, got, good in zip(values, ns.tolist(), ok.tolist(), strict=True):
        try:
            want = columns.text_ns(v)
            assert good == (-columns.MAX_NS <= want <= columns.MAX_NS)
            assert not good or got == want
        except ValueError:
            assert not good


def test_input_shapes_as_torch_prints_them(tmp_path: Path) -> None:
    op = {"ph": "X", "cat": "cpu_op", "pid": 3, "tid": 4, "ts": 1, "dur": 1}
    dims = [[[2, 3], [], [3]], [[2, 3], [], [3]], [1.5, "x"], None]  # the second: other spacing
    events = [{**op, "name": f"op{i}", "args": {"Input Dims": d}} for i, d in enumerate(dims)]
    events.append({**op, "name": "none", "args": {}})
    path = write_trace(tmp_path / "t.json", events)
    reader = open_kineto(path)
    ops = reader._frames["cpu_ops"]
    texts = reader._frames["strings"].set_index("id")["value"]
    # a number that is not an integer keeps its digits as text, as every float of the trace does
    want = ["[[2, 3], [], [3]]", "[[2, 3], [], [3]]", '["1.5", "x"]', "", ""]
    assert texts[ops["shapes_id"]].tolist() == want


def test_a_bare_list_of_events_is_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([CALL, KERNEL, 5]))
    got = frames(path)
    assert len(got[0]["kernels"]) == 1 and got[1]["ignored"] == {"not an event": 1}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"traceEvents": [{"ph": "X"}, {"ph"', "not valid JSON"),
        ('{"traceEvents": [{"ph": "X"}]} [', "not valid JSON (extra data"),
        ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "not valid JSON"),
        ('{"traceEvents": {"ph": "X"}}', "no traceEvents list"),
        ('{"schemaVersion": 1}', "no traceEvents list"),
        ("[1, 2", "not valid JSON"),
        ("  \n", "is empty"),
    ],
)
def test_broken_documents_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(ExportError, match=message.replace("(", r"\(")):
        open_kineto(path)


def test_a_trace_cut_in_a_string_says_where_in_one_at(tmp_path: Path) -> None:
    """json's "Unterminated string starting at" was followed by " at byte N": "starting at at byte"."""
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "aten::mm')
    with pytest.raises(ExportError) as e:
        open_kineto(path)
    assert "(Unterminated string starting at byte 37)" in str(e.value) and " at at " not in str(e.value)


def test_invalid_utf8_is_named_with_its_place(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "\xff"}]}')
    with pytest.raises(ExportError, match="not UTF-8 at byte 38"):
        open_kineto(path)


def test_passes_over_whole_columns_in_blocks_give_the_same_frames(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # two ranks in one file (the same correlation ids from two processes: the launcher's shared ids),
    # their names' first sight spread over many blocks
    events = raw_events("alexnet")
    second = [
        {**e, "pid": e["pid"] + 1, "tid": e["tid"] + 1 if e.get("tid") == e["pid"] else e.get("tid")}
        if e.get("cat") in ("cuda_runtime", "cpu_op", "user_annotation")
        else {**e, "args": {**e["args"], "device": 1}}
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cpu_op", "user_annotation", "kernel")
    ]
    paths = [write_trace(tmp_path / "two_ranks.json", [*events, *second]), trace_path("nccl")]
    whole = [frames(path) for path in paths]
    assert whole[0][0]["kernels"]["global_pid"].nunique() == 2
    monkeypatch.setattr(kineto_build, "STEP", 3)
    for path, before in zip(paths, whole, strict=True):
        assert_same(frames(path), before)
