"""The C reader of Kineto pieces (analysis/readers/_kineto_fast.c) gives the columns msgspec and Python give,
or steps aside: on every fixture's pieces, wherever they are cut, on odd values written by hand, and on
events Hypothesis makes up."""

from __future__ import annotations

import gzip
import json
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kineto_data import TRACES, trace_path
from test_kineto_stream import assert_same, frames

import analysis.readers.kineto_columns as columns
import analysis.readers.kineto_pool as pool
import analysis.readers.kineto_stream as stream
from analysis.readers.kineto_columns import Piece, decode_columns
from analysis.readers.kineto_stream import Text, TraceStream

FAST = columns._kineto_fast
needs_c = pytest.mark.skipif(FAST is None, reason="the C reader is not built here (no C compiler at install)")


def assert_same_piece(a: Piece | None, b: Piece | None) -> None:
    if a is None or b is None:
        assert a is b
        return
    assert (a.count, a.names, list(a.groups)) == (b.count, b.names, list(b.groups))
    for kind, got in a.groups.items():
        want = b.groups[kind]
        assert list(got) == list(want), kind
        for c in got:
            if isinstance(want[c], np.ndarray):
                assert got[c].dtype == want[c].dtype, (kind, c)
                np.testing.assert_array_equal(got[c], want[c], err_msg=f"{kind}.{c}")
            else:
                assert list(got[c]) == list(want[c]), (kind, c)
    assert list(a.ignored.items()) == list(b.ignored.items())
    assert list(a.thread_names.items()) == list(b.thread_names.items())
    assert (a.unusable, a.float_times) == (b.unusable, b.float_times)


def both(data: bytes) -> tuple[Piece | None, Piece | None, bool]:
    """(the C reader's piece, msgspec's, whether the C reader took it)."""
    taken = FAST is not None and FAST.columns(data) is not None
    return decode_columns(data), decode_columns(data, fast=False), taken


def test_the_c_reader_is_built_where_a_compiler_is() -> None:
    """`optional = true` lets an install without a compiler go on: where there is one, it must be built."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine: the C reader cannot be built")
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        pytest.skip("no Python headers on this machine (python3-dev): the C reader cannot be built")
    assert FAST is not None, "the C reader was not built: `pip install -e .` printed why"


@needs_c
@pytest.mark.parametrize("chunk", [stream.CHUNK, 4096])
@pytest.mark.parametrize("fixture", sorted(TRACES))
def test_every_fixture_piece_is_read_in_c_the_same(
    monkeypatch: pytest.MonkeyPatch, fixture: str, chunk: int
) -> None:
    path = trace_path(fixture)
    monkeypatch.setattr(stream, "CHUNK", chunk)
    with gzip.open(path, "rb") as f:
        pieces = [p for p in TraceStream(path, f.read) if isinstance(p, Text)]
    assert pieces
    for text in pieces:
        fast, slow, taken = both(text.data)
        assert taken, f"the C reader stepped aside on a piece of {fixture}"
        assert_same_piece(fast, slow)
        assert_same_piece(pool.text_columns(text), slow)  # read where the stream holds it


@needs_c
@pytest.mark.parametrize("fixture", ["nccl", "diff-control"])
@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.forks)])
def test_frames_are_the_same_without_the_c_reader(
    monkeypatch: pytest.MonkeyPatch, fixture: str, workers: int
) -> None:
    path = trace_path(fixture)
    with_c = frames(path, workers=workers)
    monkeypatch.setattr(columns, "_kineto_fast", None)
    monkeypatch.setattr(pool, "FAST", False)
    assert_same(frames(path, workers=workers), with_c)


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is (a number with as many decimals as the test wants)."""

    text: str


def dumps(value: Any, sep: str = " ", ascii_only: bool = False) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = (f"{json.dumps(k)}:{sep}{dumps(v, sep, ascii_only)}" for k, v in value.items())
        return "{" + f",{sep}".join(items) + "}"
    if isinstance(value, list):
        return "[" + f",{sep}".join(dumps(v, sep, ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


LAUNCH = {"stream": 7, "correlation": 1, "device": 0, "grid": [2, 1, 1], "block": [128, 1, 1]}
KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": LAUNCH}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 3, "tid": 4, "ts": 8, "dur": 1,
      "args": {"External id": 9, "Input Dims": [[2, 3], [], [3]]}}  # fmt: skip


@needs_c
@pytest.mark.parametrize(
    ("ts", "ns"),
    [
        ("1.0005", 1000),  # sub-nanosecond digits: half to even
        ("1.0015", 1002),
        ("1.00150001", 1002),
        ("1.0014999", 1001),
        ("-2.5", -2500),
        ("4458676522690.655", 4458676522690655),
        ("1695835542514261.123", 1695835542514261123),
        ("7", 7000),
        ("0.1", 100),
    ],
)
def test_times_are_exact_nanoseconds(ts: str, ns: int) -> None:
    data = f"[{dumps({**KERNEL, 'ts': Raw(ts)})}]".encode()
    fast, slow, taken = both(data)
    assert taken
    assert_same_piece(fast, slow)
    assert fast is not None and fast.groups["kernels"]["start"].tolist() == [ns]


@needs_c
@pytest.mark.parametrize(
    "event",
    [
        {**KERNEL, "name": 'caf\u00e9 \u4e2d \U0001f600 "quoted" \\ / \n'},  # escapes and UTF-8
        {**KERNEL, "args": {**KERNEL["args"], "grid": [1, 2]}},  # not three: unknown
        {**KERNEL, "args": {**KERNEL["args"], "grid": [1, -2, 3], "block": [True, 1, 1]}},
        {
            **KERNEL,
            "args": {**KERNEL["args"], "grid": [2**31, 1, 1], "block": [1, 2**11, 1]},
        },  # past their bits
        {**KERNEL, "args": {"correlation": None, "stream": 3}, "pid": 5},  # device from pid
        {**KERNEL, "args": {**KERNEL["args"], "device": -1}},
        {**KERNEL, "args": None},
        {**KERNEL, "args": {**KERNEL["args"], "other": {"a": [1, {"b": None}], "c": "x"}}},
        {**OP, "args": {"External id": 9}},  # no Input Dims: ""
        {**OP, "args": {"Input Dims": [[2, 3.5], ["x"]], "External id": 1}},
        {**KERNEL, "cat": "gpu_user_annotation", "name": "step", "args": {}},  # stream: the tid
        {"ph": "M", "name": "thread_name", "pid": 3, "tid": "main", "args": {"name": "  py thread  "}},
        {"ph": "f", "cat": "ac2g", "id": 5, "args": [1]},  # a flow's args are not read
        {"ph": "X", "cat": "python_function", "name": "f", "args": {"x": 1}},
        {"ph": "i", "name": "marker"},  # no category
    ],
)
def test_odd_values_read_the_same(event: dict[str, Any]) -> None:
    data = f"[{dumps(KERNEL)}, {dumps(event)}, {dumps(OP)}]".encode()
    fast, slow, taken = both(data)
    assert taken, "expected the C reader to take this piece"
    assert_same_piece(fast, slow)


@needs_c
@pytest.mark.parametrize(
    "text",
    [
        '[{"ph": "X", "cat": "kernel", "args": {"a": [1, 2,]}}]',  # not JSON: both refuse it
        '[{"ph": "X", "ph": "X"}]',  # a key twice
        '[{"ph": "X", "cat": "kernel", "name": "\\ud800", "ts": 1, "dur": 1}]',  # a lone surrogate
        '[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e3, "dur": 1}]',  # an exponent
        '[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -1}]',  # unusable
        '[{"ph": "X", "cat": "kernel", "name": "k", "ts": "1", "dur": 1}]',  # a time as text
        '[{"ph": "Z", "cat": "x"}]',  # an unknown phase
        '[{"ph": "X", "cat": "cuda_runtime", "name": "c", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
        '"args": {"correlation": "7"}}]',
        '[{"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1.5, "tid": 1, "ts": 1, "dur": 1}]',
        "[5]",
        '[{"ph": "X"}] x',
        '[{"ph": "X", "cat": "kernel", "name": "k\x01", "ts": 1, "dur": 1}]',  # a control character
        b'[{"ph": "X", "cat": "kernel", "name": "\xff", "ts": 1, "dur": 1}]',  # not UTF-8
    ],
)
def test_what_the_c_reader_cannot_decide_goes_to_msgspec(text: str | bytes) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    fast, slow, taken = both(data)
    assert not taken
    assert_same_piece(fast, slow)


VALUES = st.one_of(
    st.integers(-(2**64), 2**64),
    st.integers(-3, 2**33),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: Raw(repr(f))),
    st.integers(0, 6)
    .flatmap(lambda k: st.decimals(-(10**17), 10**17, places=k, allow_nan=False, allow_infinity=False))
    .map(lambda d: Raw(str(d))),
    st.text(max_size=6),
    st.booleans(),
    st.none(),
    st.lists(st.integers(-2, 2**42), max_size=4),
    # hostile: integers past the C reader's 640 digits and Python's 4,300, nesting past the C reader's 64
    st.sampled_from([Raw("7" * 19), Raw("-" + "7" * 641), Raw("7" * 4301), Raw("1." + "7" * 400)]),
    st.sampled_from([Raw("[" * 64 + "]" * 64), Raw("[" * 65 + "]" * 65), Raw("[" * 300 + "]" * 300)]),
)
ARG_KEYS = ["correlation", "stream", "device", "grid", "block", "bytes", "External id", "Input Dims", "name",
            "other"]  # fmt: skip
EVENTS = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "M", "f", "s", "i", "Z"]),
        "ts": VALUES,
        "dur": VALUES,
        "args": st.one_of(st.dictionaries(st.sampled_from(ARG_KEYS), VALUES, max_size=6), st.none(), VALUES),
    },
    optional={
        "cat": st.sampled_from([*columns.CATEGORIES, "python_function", "ac2g", ""]) | VALUES,
        "name": st.text(max_size=8) | st.sampled_from(["thread_name", "aten::mm"]) | VALUES,
        "pid": VALUES,
        "tid": VALUES,
    },
)


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(EVENTS, min_size=1, max_size=8), st.sampled_from([" ", "", "\n  "]), st.booleans(), st.booleans()
)
def test_made_up_events_read_the_same_or_go_to_msgspec(
    events: list[dict[str, Any]], sep: str, ascii_only: bool, valid_times: bool
) -> None:
    if valid_times:  # most events usable, so that pieces reach the columns
        events = [{**e, "ts": abs(e["ts"]) if type(e["ts"]) is int else 3, "dur": 2} for e in events]
    data = ("[" + f",{sep}".join(dumps(e, sep, ascii_only) for e in events) + "]").encode()
    fast, slow, _ = both(data)
    assert_same_piece(fast, slow)


@needs_c
def test_typical_events_reach_the_c_reader() -> None:
    """The property above is not only ever a step aside: typical pieces of made-up events are taken."""
    events = [{**KERNEL, "ts": i, "name": f"k{i % 3}"} for i in range(50)] + [
        {**OP, "ts": i} for i in range(9)
    ]
    fast, slow, taken = both(("[" + ",".join(map(dumps, events)) + "]").encode())
    assert taken and fast is not None
    assert_same_piece(fast, slow)
    assert fast.names == ["aten::mm", "[[2, 3], [], [3]]", "k0", "k1", "k2"]  # operators' group comes first
    assert len(fast.groups["kernels"]["start"]) == 50
