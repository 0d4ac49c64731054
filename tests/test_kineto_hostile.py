"""Hostile Kineto traces that once cost a traceback or all the memory of the machine: one value of
gigabytes (a few MB of gzip), an integer of thousands of digits, nesting a thousand deep, ever new operator
shapes read by threads, a thread named by a number, names made to collide in the C reader's table. Each
gives its table, or one line naming the limit it passes, in bounded memory; the limits are lowered here so
that the inputs stay small."""

from __future__ import annotations

import gzip
import json
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_kineto_fast import assert_same_piece
from test_kineto_stream import assert_same, frames
from typer.testing import CliRunner

import analysis.readers.kineto_columns as columns
import analysis.readers.kineto_pool as pool
import analysis.readers.kineto_stream as stream
from analysis.errors import ExportError
from analysis.readers.kineto import open_kineto
from analysis.readers.kineto_columns import decode_columns
from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()
FAST = columns._kineto_fast
needs_c = pytest.mark.skipif(FAST is None, reason="the C reader is not built here (no C compiler at install)")
ARGS = {"stream": 7, "correlation": 1, "device": 0, "grid": [2, 1, 1], "block": [128, 1, 1]}
KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": ARGS}
CALL = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 3, "tid": 4, "ts": 8, "dur": 1,
        "args": {"correlation": 1}}  # fmt: skip
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 3, "tid": 4, "ts": 8, "dur": 1,
      "args": {"External id": 9, "Input Dims": [[2, 3], [], [3]]}}  # fmt: skip
LIMIT = 1 << 18  # the most bytes of one value in these tests: 0.25 MiB


@pytest.fixture(params=["C reader", "msgspec"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: pieces read by the C reader (where built), and by msgspec alone."""
    if request.param == "C reader" and FAST is None:
        pytest.skip("the C reader is not built here (no C compiler at install)")
    if request.param == "msgspec":
        monkeypatch.setattr(columns, "_kineto_fast", None)
        monkeypatch.setattr(pool, "FAST", False)
    return request.param


def write_trace(path: Path, events: list[Any], **top: Any) -> Path:
    """A small trace written by the test (gzipped when the name ends in .gz)."""
    text = json.dumps({"schemaVersion": 1, **top, "traceEvents": events}).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def write_parts(path: Path, *parts: bytes | tuple[bytes, int]) -> Path:
    """A gzipped trace written in parts; (text, n) is text repeated n times, compressed as it goes."""
    with gzip.open(path, "wb", compresslevel=1) as f:
        for part in parts:
            if isinstance(part, tuple):
                text, n = part
                for _ in range(n // 4096):
                    f.write(text * 4096)
                f.write(text * (n % 4096))
            else:
                f.write(part)
    return path


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


# --- one value of many megabytes: refused past the limit, in bounded memory ------------------------------

FIRST = b'{"traceEvents": [' + dumps(KERNEL)
LONG = {  # (text, n): n bytes of text
    "an event's name": lambda n: (FIRST + b', {"ph": "X", "name": "', (b"a", n), b'", "ts": 1, "dur": 1}]}'),
    "a string in args": lambda n: (FIRST + b', {"ph": "X", "args": {"x": "', (b"\\u4e2d", n // 6), b'"}}]}'),
    "an element that is a number": lambda n: (FIRST + b", 0.", (b"0", n), b"]}"),
    "whitespace inside an event": lambda n: (FIRST + b', {"ph": "X",', (b" ", n), b'"ts": 1}]}'),
    "a top-level value": lambda n: (b'{"traceName": "', (b"a", n), b'", ' + FIRST[1:] + b"]}"),
    "a top-level key": lambda n: (b'{"', (b"k", n), b'": 1, ' + FIRST[1:] + b"]}"),
}  # fmt: skip


def peak_open(path: Path) -> tuple[int, str]:
    """(the most memory Python held at once while reading, the error's message or "")."""
    tracemalloc.start()
    try:
        try:
            open_kineto(path, workers=1)
            message = ""
        except ExportError as e:
            message = str(e)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, message


@pytest.mark.parametrize("where", list(LONG))
def test_one_long_value_is_refused_naming_the_limit_in_bounded_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    # a 2 MB .json.gz holding one 2 GB name took 5.4 GB and ended in MemoryError; a 0.5 GB top-level
    # value 2.7 GB. Here the limit is 0.25 MiB and the values 4 and 32 MiB (KBs of gzip)
    monkeypatch.setattr(stream, "MAX_VALUE", LIMIT, raising=False)
    monkeypatch.setattr(stream, "CHUNK", 1 << 16)
    plain, _ = peak_open(write_parts(tmp_path / "plain.json.gz", *LONG[where](16)))  # a value of 16 bytes
    peaks = []
    for n in (4 << 20, 32 << 20):
        peak, message = peak_open(write_parts(tmp_path / f"{n}.json.gz", *LONG[where](n)))
        assert "longer than 0.25 MiB of JSON" in message and "HARNESS_KINETO_MAX_VALUE_MB" in message, message
        peaks.append(peak)
    # what grows with the value: the decompressing thread's blocks read ahead (1 MiB a read), no more
    assert peaks[1] < peaks[0] + (4 << 20), f"{peaks[0]:,} then {peaks[1]:,} bytes held at once"
    assert peaks[1] < plain + 8 * (LIMIT + (1 << 20)), f"{plain:,}, then {peaks[1]:,} bytes held at once"


def test_a_value_within_the_limit_is_read_whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(stream, "MAX_VALUE", LIMIT, raising=False)
    monkeypatch.setattr(stream, "CHUNK", 1 << 16)
    name = "k" * (LIMIT - 200)  # the event, with its other keys, just within
    reader = open_kineto(write_trace(tmp_path / "t.json", [KERNEL, {**KERNEL, "name": name, "ts": 20}]))
    assert reader.count("kernels") == 2
    assert name in reader.read("strings", ["id", "value"])["value"].tolist()


def test_top_level_keys_the_reader_does_not_use_are_not_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # each key within the limit, but a few MB of gzip can hold thousands of them: only the keys the
    # reader reads are kept (their values still have to be JSON)
    monkeypatch.setattr(stream, "MAX_VALUE", LIMIT, raising=False)
    monkeypatch.setattr(stream, "CHUNK", 1 << 16)
    peaks = []
    for keys in (4, 64):  # 0.5 and 8 MiB of values
        top = {f"k{i}": "v" * (LIMIT // 2) for i in range(keys)}
        path = write_trace(tmp_path / f"{keys}.json", [KERNEL], distributedInfo={"rank": 3}, **top)
        tracemalloc.start()
        try:
            reader = open_kineto(path, workers=1)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert reader.meta()["rank"] == 3 and reader.meta()["schema"] == "1"
    assert peaks[1] < peaks[0] + (2 << 20), f"{peaks[0]:,} then {peaks[1]:,} bytes held at once"


def test_the_limit_is_one_line_from_the_command_and_can_be_raised(tmp_path: Path) -> None:
    path = write_parts(tmp_path / "t.json.gz", *LONG["an event's name"](6 << 20))
    env = {"HARNESS_KINETO_MAX_VALUE_MB": "4", "COLUMNS": "200"}
    result = runner.invoke(app, ["kernels", str(path), "--no-cache"], env=env)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "longer than 4 MiB of JSON" in errors[0], result.stderr
    raised = runner.invoke(
        app,
        ["kernels", str(path), "--no-cache", "-f", "csv"],
        env={**env, "HARNESS_KINETO_MAX_VALUE_MB": "8"},
    )
    assert raised.exit_code == 0, raised.output
    assert raised.stdout.count("\n") == 2  # the header and kernel k (the long event has no category)


@pytest.mark.parametrize("value", ["many", "0", "3", "-3", "4.5", "\u0668", "1_0"])
def test_a_limit_that_is_not_a_size_is_one_line(tmp_path: Path, value: str) -> None:
    path = write_trace(tmp_path / "t.json", [KERNEL])
    result = runner.invoke(
        app, ["kernels", str(path), "--no-cache"], env={"HARNESS_KINETO_MAX_VALUE_MB": value}
    )
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"HARNESS_KINETO_MAX_VALUE_MB={value!r} is not a whole number of MiB from 4" in result.stderr


# --- integers past Python's digit limit (4,300) ---------------------------------------------------------

BIG = "7" * 5000
DIGITS = {  # "BIG" stands for the integer
    "ts": [KERNEL, {**KERNEL, "ts": "BIG"}],
    "a pid": [CALL, {**CALL, "pid": "BIG"}],
    "Input Dims": [OP, {**OP, "args": {"Input Dims": [["BIG"]]}}],
    "an element": [KERNEL, "BIG"],
    "a top-level number": {"traceEvents": [KERNEL], "x": "BIG"},
}


@pytest.mark.parametrize("where", list(DIGITS))
def test_an_integer_of_5000_digits_is_one_line(tmp_path: Path, reader: str, where: str) -> None:
    # "ValueError: Exceeds the limit (4300 digits) for integer string conversion" was a traceback
    doc = DIGITS[where]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc if isinstance(doc, dict) else {"traceEvents": doc}).replace('"BIG"', BIG))
    with pytest.raises(ExportError, match="holds an integer of more than 4,300 digits"):
        open_kineto(path)
    result = runner.invoke(app, ["kernels", str(path), "--no-cache"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "more than 4,300 digits" in result.stderr


def test_an_integer_of_5000_digits_that_is_not_read_is_passed_over(tmp_path: Path, reader: str) -> None:
    """msgspec and the C reader skip a key the reader does not use without reading its number (the
    stdlib's parser, which reads it, refuses it: the line above)."""
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps({"traceEvents": [KERNEL, {**KERNEL, "args": {**ARGS, "x": "BIG"}}]}).replace('"BIG"', BIG)
    )
    assert open_kineto(path).count("kernels") == 2


def test_integers_within_the_digit_limit_are_left_out_as_times(tmp_path: Path, reader: str) -> None:
    events = [KERNEL, *({**KERNEL, "ts": int("7" * n)} for n in (19, 400, 4300))]
    assert open_kineto(write_trace(tmp_path / "t.json", events)).count("kernels") == 1


# --- nesting a thousand deep ------------------------------------------------------------------------------


THREAD = {"ph": "M", "name": "thread_name", "pid": 3, "tid": 4}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


NESTED = {
    "an unused arg": lambda d: {**KERNEL, "args": {**ARGS, "x": nested(d)}},
    "an event's name": lambda d: {**KERNEL, "name": nested(d)},
    "a pid": lambda d: {**CALL, "pid": nested(d)},
    "a category": lambda d: {**KERNEL, "cat": nested(d)},
    "Input Dims": lambda d: {**OP, "args": {"Input Dims": nested(d)}},
    "a thread's name": lambda d: {**THREAD, "args": {"name": nested(d)}},
}  # fmt: skip


def nested_trace(path: Path, where: str, depth: int) -> Path:
    text = json.dumps({"traceEvents": [CALL, KERNEL, NESTED[where](depth)]})
    path.write_text(text.replace(json.dumps(nested(depth)), nested(depth)))
    return path


@pytest.mark.parametrize("where", list(NESTED))
def test_nesting_a_thousand_deep_is_one_line(tmp_path: Path, reader: str, where: str) -> None:
    # 1,000 nested arrays in an event's args: RecursionError from msgspec, a traceback
    path = nested_trace(tmp_path / "t.json", where, 1000)
    with pytest.raises(ExportError, match="nested too deeply to read"):
        open_kineto(path)
    result = runner.invoke(app, ["kernels", str(path), "--no-cache"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("where", list(NESTED))
def test_nesting_near_the_recursion_limit_is_a_table_or_one_line(
    tmp_path: Path, reader: str, where: str
) -> None:
    # deep enough for a parser to take and for json.dumps (a name that is a list is kept as its JSON
    # text) to refuse, or not, by how deep the stack already is: either way, never a traceback
    for depth in range(960, 1000, 4):
        path = nested_trace(tmp_path / f"{depth}.json", where, depth)
        try:
            assert open_kineto(path).count("kernels") in (1, 2)
        except ExportError as e:
            assert "nested too deeply to read" in str(e)


@pytest.mark.parametrize("where", list(NESTED))
def test_nesting_a_few_hundred_deep_is_read(tmp_path: Path, reader: str, where: str) -> None:
    """Past the C reader's own depth (64: it steps aside), within the parsers'."""
    kernels = open_kineto(nested_trace(tmp_path / "t.json", where, 300)).count("kernels")
    assert kernels == (2 if where in ("an unused arg", "an event's name") else 1)


# --- ever new operator shapes, read by threads ------------------------------------------------------------


def test_the_shape_cache_cleared_by_another_thread_loses_no_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    # `_SHOWN` is shared by the reader's threads and cleared when full: a thread cleared it while another
    # was between filling it and looking its piece's shapes up in it (KeyError: b'[[548734, 3]]', 3 of 5
    # runs of a trace of 700,000 distinct shapes). Here the other thread's clear comes at that moment
    shapes = columns.shapes

    def shapes_then_cleared(dims: Any) -> str:
        text = shapes(dims)
        columns._SHOWN.clear()
        return text

    monkeypatch.setattr(columns, "shapes", shapes_then_cleared)
    dims = [b"[[1, 3]]", b"[[2, 3]]", b"[[1, 3]]", b"[]"]
    assert columns._shape_texts(dims) == ["[[1, 3]]", "[[2, 3]]", "[[1, 3]]", "[]"]


@needs_c
def test_threads_reading_ever_new_shapes_agree_with_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(columns, "SHOWN_MAX", 64, raising=False)  # cleared every few pieces
    monkeypatch.setattr(stream, "CHUNK", 1 << 14)
    monkeypatch.setattr(columns, "_SHOWN", {})
    events = [
        CALL,
        KERNEL,
        *({**OP, "ts": i, "args": {"External id": i, "Input Dims": [[i, 3]]}} for i in range(20_000)),
    ]
    path = write_trace(tmp_path / "t.json", events)
    one = frames(path, workers=1)
    for _ in range(3):
        assert_same(frames(path, workers=4), one)
    strings = one[0]["strings"].set_index("id")["value"]
    shapes = strings[one[0]["cpu_ops"]["shapes_id"]].tolist()
    assert shapes[:2] == ["[[0, 3]]", "[[1, 3]]"] and len(set(shapes)) == 20_000


def test_the_shape_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns, "SHOWN_MAX", 100, raising=False)
    monkeypatch.setattr(columns, "_SHOWN", {})
    threads = [
        threading.Thread(target=columns._shape_texts, args=([f"[[{t}, {i}]]".encode() for i in range(1000)],))
        for t in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(columns._SHOWN) <= 100 + 4  # each thread adds at most one after a clear it did not see


# --- a thread named by a number ------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "name"), [("1.5", "1.5"), ("40", "40"), ("1e3", "1e3"), ("-7", "-7"),
                                              ("true", "thread 4"), ("null", "thread 4"), ("[1]", "thread 4"),
                                              ('" main "', "main"), ("7" * 25, "7" * 25)])  # fmt: skip
def test_a_thread_named_by_a_number_reads_the_same_in_c_and_msgspec(
    tmp_path: Path, reader: str, value: str, name: str
) -> None:
    # the C reader named it "thread 40" and msgspec "1.5": a number reads as its JSON text, as an event's
    # name that is a number does; anything else names nothing
    meta = f'{{"ph": "M", "name": "thread_name", "pid": 3, "tid": 4, "args": {{"name": {value}}}}}'
    data = f"[{meta}, {json.dumps(CALL)}, {json.dumps(KERNEL)}]".encode()
    piece = decode_columns(data)
    assert piece is not None
    if FAST is not None:
        assert_same_piece(piece, decode_columns(data, fast=False))
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": ' + data + b"}")
    threads = open_kineto(path).read("threads", ["global_tid", "name"])
    assert threads["name"].tolist()[:1] == [name]


# --- names made to collide in the C reader's table -------------------------------------------------------


@needs_c
def test_names_sharing_their_length_and_both_ends_spread_over_the_table() -> None:
    # the name table hashed a name's length and 16 bytes at each end: kernels of equal length differing
    # only in the middle all took one chain (1 s instead of 0.03 s a 4 MiB piece). Every byte counts now
    names = [f"void kernel_AAAA<{i:08d}>(float*) BBBBBBBBBBBBBBBB".encode() for i in range(4096)]
    slots = np.array([FAST.text_hash(n) & 8191 for n in names], dtype=np.uint64)
    assert len(set(slots.tolist())) > 2500  # 8,192 slots: ~3,200 for a random spread, 1 before
    assert np.bincount(slots.astype(np.int64)).max() < 16


@needs_c
def test_colliding_names_read_the_same() -> None:
    events = [
        {**KERNEL, "name": f"void kernel_AAAA<{i:08d}>(float*) BBBBBBBBBBBBBBBB", "ts": i}
        for i in range(3000)
    ]
    data = json.dumps(events).encode()
    fast = decode_columns(data)
    assert FAST.columns(data) is not None and fast is not None and len(fast.names) == 3000
    assert_same_piece(fast, decode_columns(data, fast=False))
