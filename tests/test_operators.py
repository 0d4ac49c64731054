"""The operator table of a torch.profiler trace (seed 001): torch.profiler key_averages()'s columns (self and
total CPU and CUDA time with their %, averages, calls), sorting by any column, a row limit, and grouping by
input shape; checked against the raw events of a real Kineto trace."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from kineto_data import raw_events, trace_path, write_trace
from typer.testing import CliRunner

from analysis.errors import ExportError
from analysis.tables.operators import (
    CALLS,
    CPU_AVG,
    CPU_TOTAL,
    CPU_TOTAL_PCT,
    CUDA_TOTAL,
    NAME,
    SELF_CPU,
    SELF_CPU_PCT,
    SELF_CUDA,
    SELF_CUDA_PCT,
    SHAPES,
    operator_table,
)
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def control():
    with open_trace(trace_path("diff-control")) as trace:
        yield operator_table(trace), operator_table(trace, group_by_input_shape=True)


def _raw_ops() -> dict[tuple[str, str], list[float]]:
    """(name, input dims as json) -> durations (µs) of the trace's cpu_op events, read with plain json."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in raw_events("diff-control"):
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            dims = (e.get("args") or {}).get("Input Dims")
            out[(e["name"], json.dumps(dims) if dims is not None else "")].append(float(e["dur"]))
    return out


def test_columns_are_key_averages_with_their_shares(control) -> None:
    table, _ = control
    assert list(table.columns) == [
        NAME, SELF_CPU_PCT, SELF_CPU, CPU_TOTAL_PCT, CPU_TOTAL, CPU_AVG,
        SELF_CUDA, SELF_CUDA_PCT, CUDA_TOTAL, "CUDA Total (%)", "CUDA Avg (ns)", CALLS,
    ]  # fmt: skip
    # each share of the whole, to the one decimal the table gives it
    assert table[SELF_CPU_PCT].to_numpy() == pytest.approx(
        table[SELF_CPU] / table[SELF_CPU].sum() * 100, abs=0.05
    )
    assert table[SELF_CUDA_PCT].to_numpy() == pytest.approx(
        table[SELF_CUDA] / table[SELF_CUDA].sum() * 100, abs=0.05
    )
    assert (table[CPU_TOTAL] >= table[SELF_CPU]).all() and (table[CUDA_TOTAL] >= table[SELF_CUDA]).all()
    assert list(table[SELF_CPU]) == sorted(table[SELF_CPU], reverse=True)  # torch's default order
    raw = _raw_ops()
    mm = table.set_index(NAME).loc["aten::mm"]
    durations = [d for (name, _), ds in raw.items() if name == "aten::mm" for d in ds]
    assert mm[CALLS] == len(durations) == 1092
    assert mm[CPU_TOTAL] == pytest.approx(sum(durations) * 1000)
    assert mm[CPU_AVG] == pytest.approx(mm[CPU_TOTAL] / 1092, abs=0.05)
    assert mm[CPU_TOTAL_PCT] == pytest.approx(mm[CPU_TOTAL] / table[SELF_CPU].sum() * 100, abs=0.05)


def test_grouped_by_input_shape_as_torch_groups(control) -> None:
    table, grouped = control
    raw = _raw_ops()
    cat = grouped[grouped[NAME] == "aten::cat"]
    expect = {json.loads(dims).__repr__(): len(ds) for (name, dims), ds in raw.items() if name == "aten::cat"}
    assert {s: int(n) for s, n in zip(cat[SHAPES], cat[CALLS], strict=True)} == expect
    assert cat[CALLS].sum() == table.set_index(NAME).loc["aten::cat", CALLS]  # the groups add up
    assert grouped[CPU_TOTAL].sum() == table[CPU_TOTAL].sum()


def test_sort_by_any_column_and_limit() -> None:
    with open_trace(trace_path("diff-control")) as trace:
        by_calls = operator_table(trace, sort="Calls", top=3)
        by_cuda = operator_table(trace, sort="cuda_time_total", top=5)  # torch's sort_by key
        by_name = operator_table(trace, sort="name", top=2)
        with pytest.raises(Exception, match="no operator column 'bogus' to sort by"):
            operator_table(trace, sort="bogus")
    assert len(by_calls) == 3 and list(by_calls[CALLS]) == sorted(by_calls[CALLS], reverse=True)
    assert list(by_cuda[CUDA_TOTAL]) == sorted(by_cuda[CUDA_TOTAL], reverse=True)
    assert list(by_name[NAME]) == sorted(by_name[NAME])


def test_operators_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path = str(trace_path("diff-control"))
    args = ["operators", path, "--sort", "Self CUDA", "--top", "4", "--group-by-input-shape"]
    out = runner.invoke(app, args, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    lines = [line for line in out.stdout.splitlines() if line.startswith("│")]
    assert len(lines) == 4 and lines[0].split("│")[1].strip() == "record_param_comms"
    header = " ".join(out.stdout.split("┡")[0].split())
    assert "Self" in header and "CUDA" in header and "Calls" in header  # the sort column stays at 80
    rows = json.loads(runner.invoke(app, [*args, "--format", "json"]).stdout)
    assert [r[NAME] for r in rows][:1] == ["record_param_comms"] and len(rows) == 4
    assert rows[0][SELF_CUDA] == 163_535_000 and rows[0][CALLS] == 102
    bad = runner.invoke(app, ["operators", path, "--sort", "bogus"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1
    assert "no operator column 'bogus' to sort by" in bad.output


def test_operators_of_an_nsys_export_is_one_line(cpu_export) -> None:
    """One line that says where operators come from (it said "record it with the matching trace option":
    no nsys option records them) and where PyTorch's NVTX ranges of an export are counted."""
    out = runner.invoke(app, ["operators", str(cpu_export)])
    assert out.exit_code == 1 and out.output.strip().splitlines() == [
        f"error: no CPU operators in {cpu_export}: framework operators are in a torch.profiler (Kineto) "
        "trace, not in an nsys export; PyTorch's NVTX ranges (emit_nvtx) are `harness nvtx`'s rows, grouped "
        "by operator"
    ]


def test_a_launch_recorded_twice_counts_its_kernels_once(tmp_path: Path) -> None:
    """A driver call inside the runtime call that made it (the same correlation id, as CUPTI records both)
    and an op that starts inside a launch call: the table is the trace's without them (it was an
    IndexError: the call inside a call was taken for an op)."""
    events = raw_events("alexnet")
    launch = next(e for e in events if e.get("cat") == "cuda_runtime" and e["name"] == "cudaLaunchKernel")
    driver = {**launch, "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": launch["ts"] + 1,
              "dur": launch["dur"] - 2, "args": {"correlation": launch["args"]["correlation"]}}  # fmt: skip
    with open_trace(trace_path("alexnet")) as trace:
        plain = operator_table(trace)
    with open_trace(write_trace(tmp_path / "driver.json", [*events, driver])) as trace:
        twice = operator_table(trace)
    assert plain[SELF_CUDA].sum() == 10_692_000  # every kernel of the trace, once
    pd.testing.assert_frame_equal(twice, plain)
    inner = {**launch, "cat": "cpu_op", "name": "inside_a_call", "ts": launch["ts"] + 1, "dur": 1, "args": {}}
    with open_trace(write_trace(tmp_path / "inner.json", [*events, inner])) as trace:
        table = operator_table(trace).set_index(NAME)
    assert table.loc["inside_a_call", CALLS] == 1 and table[SELF_CPU].sum() == plain[SELF_CPU].sum()


def test_events_the_reader_left_out_are_said_as_every_table_says_them(tmp_path: Path) -> None:
    """A cpu_op and a kernel with a negative dur are left out by the reader: `harness kernels` said so, the
    operator table, computed without them, said nothing."""
    events = raw_events("alexnet")
    op = next(i for i, e in enumerate(events) if e.get("cat") == "cpu_op")
    kernel = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    events[op] = {**events[op], "dur": -1}
    events[kernel] = {**events[kernel], "dur": -1}
    path = str(write_trace(tmp_path / "bad.json", events))
    said = "note: left out 2 Kineto events with no usable ts or dur: missing, not a number, or a negative dur"
    for fmt in ("csv", "table"):
        out = runner.invoke(app, ["operators", path, "--format", fmt, "--no-cache"])
        assert out.exit_code == 0, out.output
        assert f"{said} (1 cpu_op, 1 kernel)" in " ".join(out.output.split())  # the table's notes follow it


def test_a_range_counts_the_ops_of_its_own_process_not_its_gpu_copy(tmp_path: Path) -> None:
    """nccl's `nccl:all_reduce` ranges are there twice: on the CPU (15, no op starts inside them) and as the
    GPU ran them (gpu_user_annotation, 15). `--range nccl:all_reduce` counted the 1,015 ops that the CPU
    happened to start while the GPU ran the all-reduces."""
    nccl = trace_path("nccl")
    events = raw_events("nccl")

    def direct(name: str) -> int:  # ops starting inside the CPU-side ranges of that name, any thread
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in events
                 if e.get("cat") == "user_annotation" and e["name"] == name]  # fmt: skip
        return sum(1 for e in events if e.get("cat") == "cpu_op" and any(a <= e["ts"] < b for a, b in spans))

    with open_trace(nccl) as trace:
        assert operator_table(trace, within="## backward ##")[CALLS].sum() == direct("## backward ##") == 7230
        table = operator_table(trace, within="nccl:all_reduce")
    assert table.empty and direct("nccl:all_reduce") == 0
    assert table.attrs["notes"] == ["no operator starts inside the range 'nccl:all_reduce' (15 of that name)"]
    cpu_side = {"cat": "user_annotation", "name": "nccl:all_reduce"}
    gpu_only = [e for e in events if {k: e.get(k) for k in cpu_side} != cpu_side]
    gone = "'nccl:all_reduce' is a range on the GPU's timeline"
    with (
        open_trace(write_trace(tmp_path / "gpu.json", gpu_only)) as trace,
        pytest.raises(ExportError, match=gone),
    ):
        operator_table(trace, within="nccl:all_reduce")


def test_csv_gives_shares_and_averages_to_one_decimal_as_nsys_stats() -> None:
    """`operators --format csv` wrote its shares and averages unrounded (`9.027150005678388`,
    `32738.599371069184`) where every other table's csv gives them as `nsys stats` does: whole ns, one
    decimal. nccl's aten::convolution_backward: 52,597,726 ns in 159 calls, 330,803.3 ns a call."""
    import csv
    import io

    out = runner.invoke(app, ["operators", str(trace_path("nccl")), "--format", "csv"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    conv = next(r for r in rows if r[NAME] == "aten::convolution_backward")
    assert (conv[CPU_TOTAL], conv[CALLS], conv[CPU_AVG]) == ("52597726", "159", "330803.3")
    assert conv[SELF_CUDA_PCT] == "24.1" and conv[CPU_TOTAL_PCT] == "9.1"
    for column in rows[0]:
        if column.endswith(("(%)", "Avg (ns)")):
            assert all(len(r[column].partition(".")[2]) <= 1 for r in rows), column
        elif column != NAME:
            assert all(r[column].isdigit() for r in rows), column
