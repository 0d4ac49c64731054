"""A property-based attack on every reader and analysis command, with Hypothesis.

Each example copies a shared fixture (an nsys export or a Kineto trace) into a temporary folder, mutates
the copy, and runs one analysis command on it in this process (typer's CliRunner). The mutations:

- nsys exports: tables and columns dropped; NULLs, text, reals, huge and negative values in integer
  columns; reversed intervals; duplicated rows and ids; string references that point nowhere; names
  holding markup, terminal escapes, invalid UTF-8 (what a lone surrogate becomes) and 10,000 characters;
  the file cut short.
- Kineto traces: fields of the wrong type, keys missing, timestamps out of order, hostile names, the
  document's shape broken, the file cut short (gzipped or not); and hostile shapes (`HOSTILE_SHAPES`): one
  value past the reader's limit (lowered to 1 MiB here), nesting up to 3,000 deep, integers of up to 5,000
  digits, thousands of distinct operator shapes (the shape cache lowered to 64, so that it is cleared while
  threads read), kernel names made to collide in the C reader's table, threads named by numbers; read by
  one thread or several.

Every example must end in a table (exit 0) or one `error:` line (exit 1 or 2), never a traceback; the
input file must keep its bytes; every total, count and time in the output must be finite and not negative.

Profiles: HARNESS_FUZZ=short (default: a few dozen examples per test, seconds) or HARNESS_FUZZ=slow; the
tests marked `fuzz` (and `slow`) run FUZZ_SLOW_EXAMPLES (default 1,000) examples each, 2,000 in all, in
SLOW_PARTS parts that run in parallel: `make fuzz` (and CI) runs them, `make test` leaves them out.
Examples that once failed are kept as regular tests in tests/test_fuzz_found.py.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED_NSYS
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from kineto_data import trace_path
from typer.testing import CliRunner

import analysis.readers.kineto as kineto
import analysis.readers.kineto_columns as kineto_columns
import analysis.readers.kineto_stream as kineto_stream
from harness.cli import app

pytestmark = pytest.mark.attack

settings.register_profile(
    "short", max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
settings.register_profile("slow", max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HARNESS_FUZZ", "short"))
SLOW_EXAMPLES = int(os.environ.get("FUZZ_SLOW_EXAMPLES", "1000"))
SLOW_PARTS = 4  # each slow test runs as this many parts (random examples each), which pytest-xdist spreads

NSYS_FIXTURES = [
    SHARED_NSYS / "a100-saxpy-mpi" / "report.sqlite",
    SHARED_NSYS / "ext" / "dlprof_norelu" / "report.sqlite",
    SHARED_NSYS / "cpu-train" / "report.sqlite",
]
TABLES = [
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds",
    "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "OSRT_API", "ThreadNames",
    "EXPORT_META_DATA", "TARGET_INFO_GPU", "PROCESSES", "TARGET_INFO_SESSION_START_TIME",
]  # fmt: skip
LONG = "n" * 10_000
VALUES = [
    "NULL", "'soon'", "1.5", "-1", "0", str(2**63 - 1), str(-(2**63)), str(10**18), "-start",
    f"'{LONG}'", "'[bold red]x[/]'", "'\x1b]0;pwned\x07'", "CAST(X'EDA080' AS TEXT)", "X'00FF'",
    "987654321", "'k[/x]\\n'",
]  # fmt: skip
COMMANDS = ["kernels", "nvtx", "nvtx-gpu", "api", "memops", "launch", "osrt", "summary", "breakdown", "diff"]
# output columns that hold totals, counts and times: finite and never negative
NON_NEGATIVE = ("Total", "Instances", "Count", "Time (%)", "Avg", "Med", "Min", "Max", "StdDev", "(ns)")
runner = CliRunner()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "-"


@contextmanager
def workdir() -> Iterator[Path]:
    """A fresh folder per example (tmp_path is one folder for all of a test's examples), with its own
    trace cache."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        old = os.environ.get("HARNESS_CACHE_DIR")
        os.environ["HARNESS_CACHE_DIR"] = str(Path(tmp) / "cache")
        try:
            yield Path(tmp)
        finally:
            if old is None:
                os.environ.pop("HARNESS_CACHE_DIR", None)
            else:
                os.environ["HARNESS_CACHE_DIR"] = old


# --- the outcome every example must have -------------------------------------------------------------


def check_outcome(result: Any, command: str) -> None:
    """A table or one clear line; never a traceback; totals finite and not negative."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        trace = "".join(traceback.format_exception(result.exception))
        raise AssertionError(f"{command}: traceback\n{trace}\n{result.output[-2000:]}")
    assert "Traceback" not in result.output, result.output[-3000:]
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output[-2000:])
    if result.exit_code != 0:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, result.stderr[-2000:]
        assert len(errors[0]) > len("error: ") + 5
        return
    doc = json.loads(result.stdout) if result.stdout.strip() else []
    check_numbers(doc, command)


def check_numbers(doc: Any, where: str) -> None:
    if isinstance(doc, dict):
        for key, value in doc.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                assert math.isfinite(value), (where, key, value)
                if any(k in key for k in NON_NEGATIVE) and "Δ" not in key:
                    assert value >= 0, (where, key, value)
            else:
                check_numbers(value, f"{where}/{key}")
    elif isinstance(doc, list):
        for item in doc:
            check_numbers(item, where)


def run_command(command: str, path: Path, no_cache: bool, original: Path) -> Any:
    """`command` on the mutated file (diff: the original fixture against it), JSON out."""
    inputs = [str(original), str(path)] if command == "diff" else [str(path)]
    args = [command, *inputs, "--format", "json", *(["--no-cache"] if no_cache else [])]
    return runner.invoke(app, args, env={"COLUMNS": "120"})


def check_nothing_else_written(tmp: Path, path: Path) -> None:
    """The command wrote nothing beside its input: only the trace cache (in its own folder) is new."""
    assert {p.name for p in tmp.iterdir()} <= {path.name, "cache"}


# --- nsys exports --------------------------------------------------------------------------------------


@st.composite
def export_mutations(draw: st.DrawFn) -> list[tuple]:
    kinds = st.sampled_from(["drop_table", "drop_column", "set", "reverse", "duplicate", "dangling", "name"])
    out = []
    for _ in range(draw(st.integers(1, 4))):
        out.append(
            (
                draw(kinds),
                draw(st.sampled_from(TABLES)),
                draw(st.integers(0, 40)),  # column, modulo the table's
                draw(st.integers(1, 5)),  # every m-th row ...
                draw(st.integers(0, 4)),  # ... from this one
                draw(st.sampled_from(VALUES)),
            )
        )
    return out


def columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def loosen(con: sqlite3.Connection, table: str) -> None:
    """The table without constraints (NOT NULL, types), so any value can go in."""
    con.execute(f'CREATE TABLE fuzz_tmp AS SELECT * FROM "{table}"')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE fuzz_tmp RENAME TO "{table}"')


def mutate_export(path: Path, mutations: list[tuple], cut: float | None) -> None:
    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for kind, table, col, m, r, value in mutations:
            if table not in tables:
                continue
            cols = columns(con, table)
            column = cols[col % len(cols)]
            where = f"WHERE rowid % {m} = {r % m}"
            if kind == "drop_table":
                con.execute(f'DROP TABLE "{table}"')
                tables.discard(table)
                continue
            loosen(con, table)
            if kind == "drop_column":
                keep = ", ".join(f'"{c}"' for c in cols if c != column) or "1 AS x"
                con.execute(f'CREATE TABLE fuzz_tmp AS SELECT {keep} FROM "{table}"')
                con.execute(f'DROP TABLE "{table}"')
                con.execute(f'ALTER TABLE fuzz_tmp RENAME TO "{table}"')
            elif kind == "set":
                expr = value.replace("-start", f'-"{column}"')
                con.execute(f'UPDATE "{table}" SET "{column}" = {expr} {where}')
            elif kind == "reverse" and {"start", "end"} <= set(cols):
                con.execute(f'UPDATE "{table}" SET start = "end", "end" = start {where}')
            elif kind == "duplicate":
                con.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}" {where}')
            elif kind == "dangling":
                ref = next(
                    (c for c in cols if c in ("demangledName", "shortName", "nameId", "textId")), column
                )
                con.execute(f'UPDATE "{table}" SET "{ref}" = 987654321 {where}')
            elif (
                kind == "name" and "StringIds" in tables and {"id", "value"} <= set(columns(con, "StringIds"))
            ):
                loosen(con, "StringIds")
                text = value if value != "-start" else "'-'"
                con.execute(f"UPDATE StringIds SET value = {text} WHERE id % {m} = {r % m}")
        con.commit()
    finally:
        con.close()
    if cut is not None:
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * cut)])


def check_export_example(fixture: Path, mutations: list[tuple], cut: float | None, command: str,
                         no_cache: bool) -> None:  # fmt: skip
    before_fixture = digest(fixture)
    with workdir() as tmp:
        path = tmp / "report.sqlite"
        shutil.copyfile(fixture, path)
        path.chmod(0o644)
        mutate_export(path, mutations, cut)
        before = digest(path)
        result = run_command(command, path, no_cache, fixture)
        assert digest(path) == before, "the command changed its input"
        check_nothing_else_written(tmp, path)
        check_outcome(result, command)
    assert digest(fixture) == before_fixture


export_cases = st.tuples(
    st.sampled_from(NSYS_FIXTURES),
    export_mutations(),
    st.one_of(st.none(), st.none(), st.floats(0, 1)),
    st.sampled_from(COMMANDS),
    st.booleans(),
)


def test_fuzz_exports() -> None:
    from hypothesis import given

    @given(export_cases)
    def prop(case: tuple) -> None:
        check_export_example(*case)

    prop()


@pytest.mark.slow
@pytest.mark.fuzz
@pytest.mark.parametrize("part", range(SLOW_PARTS))
def test_fuzz_exports_slow(part: int) -> None:
    from hypothesis import given

    @settings(
        max_examples=SLOW_EXAMPLES // SLOW_PARTS,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=False,
    )
    @given(export_cases)
    def prop(case: tuple) -> None:
        check_export_example(*case)

    prop()


# --- Kineto traces -------------------------------------------------------------------------------------

_BASE: dict[str, Any] = {}


def kineto_base(fixture: str) -> dict[str, Any]:
    """The fixture's document with its first 400 events (parsed once)."""
    if fixture not in _BASE:
        with gzip.open(trace_path(fixture), "rt") as f:
            doc = json.load(f)
        doc["traceEvents"] = doc["traceEvents"][:400]
        _BASE[fixture] = doc
    return _BASE[fixture]


HOSTILE = ["\ud800", "\udfff x", LONG, "[bold]x[/]", "\x1b]0;pwned\x07", "ProfilerStep#" + "9" * 30]
WRONG = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.sampled_from(HOSTILE),
)  # fmt: skip
KEYS = ["ts", "dur", "name", "ph", "cat", "args", "pid", "tid", "id"]
ARG_KEYS = ["correlation", "stream", "device", "grid", "block", "bytes", "External id", "name", "Input Dims"]
# the limits of one trace, lowered so that the hostile shapes stay small
LIMITS = {(kineto_stream, "MAX_VALUE"): 1 << 20, (kineto_stream, "CHUNK"): 1 << 18,
          (kineto_columns, "SHOWN_MAX"): 64}  # fmt: skip
# (shape, size): a value of `size` bytes (past MAX_VALUE or not), nested `size` deep (the C reader steps
# aside past 64; the parsers stop near 1,000), an integer of `size` digits (Python's limit: 4,300), `size`
# cpu_ops of distinct Input Dims, `size` kernels whose names share their length and 16 bytes at each end,
# a thread named by a number (or by what is not a name)
HOSTILE_SHAPES = st.one_of(
    st.tuples(st.just("long"), st.sampled_from([1000, (1 << 20) - 300, 1 << 20, 3 << 20])),
    st.tuples(st.just("deep"), st.sampled_from([2, 63, 64, 65, 300, 980, 995, 1000, 3000])),
    st.tuples(st.just("digits"), st.sampled_from([18, 19, 20, 400, 4300, 4301, 5000])),
    st.tuples(st.just("float digits"), st.sampled_from([16, 17, 400, 5000])),
    st.tuples(st.just("shapes"), st.integers(1, 2000)),
    st.tuples(st.just("colliding"), st.integers(2, 2000)),
    st.tuples(st.just("thread name"), st.sampled_from(["1.5", "40", "-0", "1e3", "true", "[1]", "7" * 30])),
)  # fmt: skip


@dataclass(frozen=True)
class Raw:
    """JSON text put in a document as it is (nesting and integers that json.dumps cannot write)."""

    text: str


def hostile_value(shape: str, size: int) -> Any:
    """The value a hostile shape puts in a field."""
    if shape == "long":
        return "a" * size
    if shape == "deep":
        return Raw("[" * size + "]" * size)
    if shape == "digits":
        return Raw("7" * size)
    return Raw("1." + "7" * size)  # float digits: read as text, never as a float


COLLIDING = "void kernel_AAAA<{:08d}>(float*) BBBBBBBBBBBBBBBB"  # one length, the same 16 bytes at each end


def hostile_events(shape: str, size: Any, like: dict[str, Any]) -> list[Any]:
    """The events a hostile shape adds, made from `like` (an event of the trace)."""
    base = {k: like[k] for k in ("pid", "tid", "ts", "dur") if k in like}
    if shape == "shapes":
        return [{**base, "ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": i,
                 "args": {"External id": i, "Input Dims": [[i, 3], [3]]}} for i in range(size)]  # fmt: skip
    if shape == "colliding":
        return [{**base, "ph": "X", "cat": "kernel", "name": COLLIDING.format(i), "ts": i, "dur": 1,
                 "args": {"stream": 7, "correlation": i, "device": 0}} for i in range(size)]  # fmt: skip
    return [{"ph": "M", "name": "thread_name", "pid": like.get("pid"), "tid": like.get("tid"),
             "args": {"name": Raw(str(size))}}]  # fmt: skip


@st.composite
def kineto_mutations(draw: st.DrawFn) -> list[tuple]:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["set", "delete", "arg", "shuffle_ts", "top", "dup", "hostile"]))
        where = draw(st.integers(0, 399))
        value = draw(HOSTILE_SHAPES if kind == "hostile" else WRONG)
        out.append((kind, where, draw(st.sampled_from(KEYS)), draw(st.sampled_from(ARG_KEYS)), value))
    return out


def mutate_trace(doc: dict[str, Any], mutations: list[tuple]) -> Any:
    events = [dict(e) if isinstance(e, dict) else e for e in doc["traceEvents"]]
    out: Any = {**doc, "traceEvents": events}
    for kind, i, key, arg, value in mutations:
        e = events[i % len(events)] if events else {}
        if not isinstance(e, dict):
            continue
        if kind == "set":
            e[key] = value
        elif kind == "delete":
            e.pop(key, None)
        elif kind == "arg":
            e["args"] = {**(e["args"] if isinstance(e.get("args"), dict) else {}), arg: value}
        elif kind == "shuffle_ts" and "ts" in e:
            other = events[(i * 7 + 3) % len(events)]
            if isinstance(other, dict) and "ts" in other:
                e["ts"], other["ts"] = other["ts"], e["ts"]
        elif kind == "dup":
            events.append(dict(e))
        elif kind == "hostile":
            shape, size = value
            if shape in ("shapes", "colliding", "thread name"):
                at = i % len(events) if events else 0
                events[at:at] = hostile_events(shape, size, e)
            elif key == "args":
                e["args"] = {
                    **(e["args"] if isinstance(e.get("args"), dict) else {}),
                    arg: hostile_value(*value),
                }
            elif key == "id":  # a top-level key
                out = {**out, "hostile": hostile_value(*value)} if isinstance(out, dict) else out
            else:
                e[key] = hostile_value(*value)
        elif kind == "top":
            choice = i % 5
            if choice == 0:
                out = events  # a bare list of events
            elif choice == 1:
                out = {**doc, "traceEvents": value}
            elif choice == 2:
                out = {**doc, "distributedInfo": value, "deviceProperties": value}
            elif choice == 3:
                events.insert(0, value)
            else:
                out = value
    return out


def dumps(doc: Any, ascii_only: bool = True) -> str:
    """The document as JSON text, each Raw written as its text."""
    raws: list[str] = []

    def default(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value.text)
            return f"@@raw{len(raws) - 1}@@"
        return str(value)

    text = json.dumps(doc, default=default, allow_nan=True, ensure_ascii=ascii_only)
    for k, raw in enumerate(raws):
        text = text.replace(f'"@@raw{k}@@"', raw, 1)
    return text


@contextmanager
def limits(threads: bool) -> Iterator[None]:
    """The reader's limits lowered (LIMITS), and the trace read by threads (the C reader) or one thread."""
    patched = {**LIMITS, (kineto, "THREAD_BYTES"): 0 if threads else 1 << 62}
    before = {k: getattr(*k) for k in patched}
    for (module, name), value in patched.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for (module, name), value in before.items():
            setattr(module, name, value)


def write_mutated(path: Path, doc: Any, gz: bool, cut: float | None) -> None:
    data = dumps(doc).encode()
    if gz:
        data = gzip.compress(data, compresslevel=1)
    if cut is not None:
        data = data[: int(len(data) * cut)]
    path.write_bytes(data)


def check_trace_example(fixture: str, mutations: list[tuple], gz: bool, cut: float | None, command: str,
                        no_cache: bool, threads: bool = False) -> None:  # fmt: skip
    with workdir() as tmp, limits(threads):
        path = tmp / ("trace.json.gz" if gz else "trace.json")
        write_mutated(path, mutate_trace(kineto_base(fixture), mutations), gz, cut)
        before = digest(path)
        result = run_command(command, path, no_cache, trace_path(fixture))
        assert digest(path) == before, "the command changed its input"
        check_nothing_else_written(tmp, path)
        check_outcome(result, command)


trace_cases = st.tuples(
    st.sampled_from(["nccl", "alexnet"]),
    kineto_mutations(),
    st.booleans(),
    st.one_of(st.none(), st.none(), st.floats(0, 1)),
    st.sampled_from(COMMANDS),
    st.booleans(),
    st.booleans(),
)


def test_fuzz_traces() -> None:
    from hypothesis import given

    @given(trace_cases)
    def prop(case: tuple) -> None:
        check_trace_example(*case)

    prop()


@pytest.mark.slow
@pytest.mark.fuzz
@pytest.mark.parametrize("part", range(SLOW_PARTS))
def test_fuzz_traces_slow(part: int) -> None:
    from hypothesis import given

    @settings(
        max_examples=SLOW_EXAMPLES // SLOW_PARTS,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=False,
    )
    @given(trace_cases)
    def prop(case: tuple) -> None:
        check_trace_example(*case)

    prop()


@pytest.fixture(scope="module", autouse=True)
def _fixtures_keep_their_bytes() -> Iterator[None]:
    """The shared fixtures the examples copy keep their bytes over the whole module."""
    paths = [*NSYS_FIXTURES, trace_path("nccl"), trace_path("alexnet")]
    before = {p: digest(p) for p in paths}
    yield
    assert {p: digest(p) for p in paths} == before
