"""`harness run --profiler torch`: the run under torch.profiler, its trace, its operator tables, its row."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from analysis.tables.nvtx import nvtx_ranges
from analysis.tables.operators import CALLS, CPU_TOTAL, NAME, SELF_CPU, _nest, operator_table
from analysis.trace.opening import open_trace
from harness.cli import app
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.profilers import registry
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def one_line_error(result) -> str:
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_nesting_gives_each_op_its_innermost_parent() -> None:
    # thread 1: a [0,10) holds b [1,5) which holds c [2,3); d [6,9) is a's other child; thread 2: e [2,4)
    start = np.array([0, 1, 2, 6, 2])
    end = np.array([10, 5, 3, 9, 4])
    tid = np.array([1, 1, 1, 1, 2])
    assert _nest(start, end, tid).tolist() == [-1, 0, 1, 0, -1]


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--nsys", "--profiler", "torch"], "--nsys means --profiler nsys"),
     (["--record-shapes"], "need --profiler torch"), (["--nsys", "--with-stack"], "need --profiler torch")],
)  # fmt: skip
def test_profiler_options_that_disagree(tmp_db, args: list[str], message: str) -> None:
    result = invoke("run", "tiny", "--device", "cpu", *args)
    assert result.exit_code == 2
    assert message in one_line_error(result)


def test_database_of_an_older_harness_gets_artifacts(tmp_path) -> None:
    path = tmp_path / "old.sqlite"
    config = RunConfig(model="tiny", device="cpu", warmup=0, steps=1)
    old = RunResult(run_id="tiny-old", config=config, status="ok",
                    steps=[StepRecord(step=0, warmup=False, phases={"forward": 5})])  # fmt: skip
    save_run(ResultsStore(str(path)), old, profiler="nsys", nsys_rep="/p/a.nsys-rep")
    with sqlite3.connect(path) as conn:  # as the harness before `artifacts` made it
        cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] != "artifacts"]
        assert len(cols) > 10
        conn.execute(f"CREATE TABLE runs_old AS SELECT {', '.join(cols)} FROM runs")
        conn.execute("DROP TABLE runs")
        conn.execute("ALTER TABLE runs_old RENAME TO runs")
        conn.execute("UPDATE harness_alembic_version SET version_num = '0004'")  # the revision before it
        assert "artifacts" not in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    store = ResultsStore(str(path))
    with sqlite3.connect(path) as conn:
        assert "artifacts" in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    run = store.get("tiny-old")
    assert run.artifacts is None and run.nsys_rep == "/p/a.nsys-rep" and run.profiler == "nsys"
    new = RunResult(run_id="tiny-new", config=config, status="ok", steps=old.steps)
    save_run(store, new, profiler="torch", artifacts={"trace": "/p/t.pt.trace.json.gz"})
    rows = store.runs()
    assert rows["run_id"].tolist() == ["tiny-old", "tiny-new"]
    assert rows["artifacts"].tolist() == [None, {"trace": "/p/t.pt.trace.json.gz"}]


def _run_json(tmp_path: Path, *args: str) -> dict:
    result = invoke("run", *args, "--device", "cpu", "--profiler", "torch", "--profile-dir",
                    str(tmp_path / "prof"), "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _range_counts(trace_path: Path) -> dict[str, int]:
    with open_trace(trace_path) as trace:
        names = nvtx_ranges(trace)["name"].astype(str)
    return names.value_counts().to_dict()


def _check_ops(rows: list[dict]) -> None:
    aten = [r for r in rows if r[NAME].startswith("aten::")]
    assert aten and all(r[SELF_CPU] > 0 and r[CPU_TOTAL] >= r[SELF_CPU] and r[CALLS] > 0 for r in aten)


@pytest.mark.slow
def test_tiny_train_under_torch_profiler(tmp_db, tmp_path) -> None:
    doc = _run_json(tmp_path, "tiny", "--warmup", "1", "--steps", "2", "--batch-size", "1",
                    "--context-length", "16")  # fmt: skip
    (trace,) = [Path(r["path"]) for r in doc["files"] if r["kind"] == "trace"]
    assert trace.parent == tmp_path / "prof" and trace.name.endswith(".pt.trace.json.gz")
    _check_ops(doc["top 15 operators by self CPU"])
    counts = _range_counts(trace)
    # the warmup step is not recorded: 2 of each phase, 2 harness steps, 2 ProfilerStep#N
    assert {p: counts.get(p) for p in ("forward", "backward", "optimizer", "step")} == dict.fromkeys(
        ("forward", "backward", "optimizer", "step"), 2
    )
    assert sum(n.startswith("ProfilerStep#") for n in counts) == 2
    with open_trace(trace) as t:
        assert operator_table(t, within="backward")[NAME].str.contains("Backward").any()
    (run,) = ResultsStore(tmp_db).runs().to_dict("records")
    assert run["profiler"] == "torch" and run["artifacts"] == {"trace": str(trace)}
    assert run["nsys_rep"] is None
    shown = invoke("show", run["run_id"], "--format", "csv")
    assert shown.exit_code == 0 and f"file.trace,{trace}" in shown.stdout


@pytest.mark.slow
def test_gpt2_generate_prefill_and_decode_tables(tmp_db, tmp_path) -> None:
    doc = _run_json(tmp_path, "gpt2", "--mode", "generate", "--warmup", "1", "--steps", "2",
                    "--batch-size", "1", "--context-length", "8", "--new-tokens", "4")  # fmt: skip
    prefill = doc["top 15 operators in prefill by self CPU"]
    decode = doc["top 15 operators in decode by self CPU"]
    _check_ops(prefill)
    _check_ops(decode)
    # per step one prefill forward and 3 decode forwards: three times the matmuls
    addmm = {name: next(r[CALLS] for r in rows if r[NAME] == "aten::addmm")
             for name, rows in (("prefill", prefill), ("decode", decode))}  # fmt: skip
    assert addmm["decode"] == 3 * addmm["prefill"]
    (trace,) = [Path(r["path"]) for r in doc["files"] if r["kind"] == "trace"]
    counts = _range_counts(trace)
    assert (counts.get("prefill"), counts.get("decode"), counts.get("step")) == (2, 2, 2)
    kernels = invoke("kernels", str(trace))
    assert kernels.exit_code == 1
    assert "no CUDA kernel data" in one_line_error(kernels)


def test_unsaved_run_keeps_its_artifacts(tmp_path) -> None:
    from datetime import UTC, datetime

    from harness.store import unsaved

    config = RunConfig(model="tiny", device="cpu", warmup=0, steps=1)
    steps = [StepRecord(step=0, warmup=False, phases={"forward": 1000, "backward": 2000, "optimizer": 3})]
    result = RunResult(run_id="tiny-u", config=config, status="ok", steps=steps)
    pending = unsaved.PendingRun(result=result, created_at=datetime.now(UTC), profiler="torch",
                                 artifacts={"trace": "/p/t.pt.trace.json.gz"})  # fmt: skip
    back = unsaved.read(unsaved.write(pending, [tmp_path], "test"), registry.NAMES)
    assert (back.profiler, back.artifacts) == ("torch", {"trace": "/p/t.pt.trace.json.gz"})
    store = ResultsStore(str(tmp_path / "r.sqlite"))
    store.import_file(unsaved.write(pending, [tmp_path], "test"), profilers=registry.NAMES)
    assert store.get("tiny-u").artifacts == {"trace": "/p/t.pt.trace.json.gz"}


def _table_rows(text: str, title: str) -> list[list[str]]:
    """The body rows of the printed table titled `title`, cell by cell."""
    lines = text.splitlines()
    at = lines.index(title)
    rows: list[list[str]] = []
    for line in lines[at + 1 :]:
        if line.startswith("└"):
            return rows
        if line.startswith("│"):
            rows.append([c.strip() for c in line.strip("│").split("│")])
    raise AssertionError(f"table {title!r} has no end:\n{text}")


def _headers(text: str, title: str) -> list[str]:
    """The printed table's column names (a header may wrap over several lines: joined per column)."""
    lines = text.splitlines()
    at = lines.index(title)
    heads = []
    for line in lines[at + 2 :]:
        if line.startswith("┡"):
            break
        heads.append([c.strip() for c in line.strip("┃").split("┃")])
    return [" ".join(p for p in parts if p) for parts in zip(*heads, strict=True)]


@pytest.mark.slow
@pytest.mark.elsewhere
def test_run_torch_sort_and_top_order_and_cut_the_printed_operator_table(tmp_db, tmp_path) -> None:
    """`run --profiler torch --sort Calls --top 4`, the options of `harness operators`: the printed table
    is ordered by calls (descending) and has 4 rows; the same run's trace through `harness operators` with
    the same options gives the same operators."""
    args = ["run", "tiny", "--device", "cpu", "--warmup", "1", "--steps", "2", "--batch-size", "1",
            "--context-length", "16", "--profiler", "torch", "--profile-dir", str(tmp_path / "prof"),
            "--sort", "Calls", "--top", "4"]  # fmt: skip
    result = runner.invoke(app, args, env={"COLUMNS": "80", "LINES": "60"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    title = "top 4 operators by Calls"
    assert "top 15 operators by self CPU" not in result.stdout
    heads = _headers(result.stdout, title)
    rows = _table_rows(result.stdout, title)
    assert len(rows) == 4 and heads[0] == "Name" and "Calls" in heads
    calls = [int(r[heads.index("Calls")].replace(",", "")) for r in rows]
    assert calls == sorted(calls, reverse=True) and calls[0] > calls[-1] > 0
    (trace,) = (tmp_path / "prof").glob("*.pt.trace.json.gz")
    same = runner.invoke(app, ["operators", str(trace), "--sort", "Calls", "--top", "4", "--format", "json"])
    assert same.exit_code == 0, same.output
    ops = json.loads(same.stdout)
    assert [r[CALLS] for r in ops] == calls
    assert [r[NAME][:10] for r in ops] == [r[0][:10] for r in rows]


def test_run_sort_and_top_need_the_torch_profiler(tmp_db) -> None:
    for args in (["--sort", "Calls"], ["--nsys", "--top", "3"]):
        result = invoke("run", "tiny", "--device", "cpu", *args)
        assert result.exit_code == 2
        assert "--sort and --top order the operator table of --profiler torch" in one_line_error(result)


def test_run_sort_names_a_column_before_the_run(tmp_db) -> None:
    result = invoke("run", "tiny", "--device", "cpu", "--profiler", "torch", "--sort", "bogus")
    assert result.exit_code == 2  # a bad argument, as --sort 'Self CUDA' on the CPU is
    assert "no operator column 'bogus' to sort by" in one_line_error(result)
    assert ResultsStore(tmp_db).runs().empty


def test_run_sort_by_a_cuda_column_on_the_cpu_is_refused_before_the_run(tmp_db) -> None:
    """`--sort 'Self CUDA'` on a CPU run: the run ran, was stored, and then ended in "no operator column
    'Self CUDA (ns)' to sort by" (exit 1): its trace could never hold a kernel."""
    args = ["--steps", "1", "--warmup", "0", "--sort", "Self CUDA"]  # small, should it run
    result = invoke("run", "char", "--device", "cpu", "--profiler", "torch", *args)
    assert result.exit_code == 2
    assert one_line_error(result) == (
        "error: --sort 'Self CUDA': the trace of a run on cpu holds no CUDA kernel, so no CUDA column; sort "
        "by Self CPU, CPU Total, CPU Avg or Calls"
    )
    assert ResultsStore(tmp_db).runs().empty
