"""`harness sweep` axes: context lengths beside models, precisions, compile settings and batch sizes
(seeds 003 and 004), and counts that print as integers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.records import RunConfig, RunResult
from harness.experiments.run_tables import results_table
from harness.experiments.sweep import grid
from harness.store.results import ResultsStore

runner = CliRunner()


def test_grid_has_a_context_length_axis_innermost() -> None:
    configs = grid(RunConfig("tiny", device="cpu"), ["tiny", "char"], ["fp32"], [False], [1, 2], [16, 64])
    assert [(c.model, c.batch_size, c.context_length) for c in configs] == [
        ("tiny", 1, 16),
        ("tiny", 1, 64),
        ("tiny", 2, 16),
        ("tiny", 2, 64),
        ("char", 1, 16),
        ("char", 1, 64),
        ("char", 2, 16),
        ("char", 2, 64),
    ]
    # without the axis: the base's context length (the model's own when None)
    assert [
        c.context_length for c in grid(RunConfig("tiny", context_length=64), ["tiny"], ["fp32"], [False])
    ] == [64]


def test_sweep_context_lengths_must_be_positive_integers(tmp_db: str) -> None:
    out = runner.invoke(app, ["sweep", "--models", "tiny", "--device", "cpu", "--context-length", "128,x,0"])
    assert out.exit_code == 2
    assert "--context-length takes positive integers, e.g. 128,512,1024; got x, 0" in out.output
    assert len(out.output.strip().splitlines()) == 1


@pytest.mark.parametrize("option", ["--context-length", "--batch-sizes"])
@pytest.mark.parametrize(
    "given", ["\u00b2", "\u0661", "1,\uff12"]
)  # superscript two, Arabic-Indic one, fullwidth two
def test_sweep_sizes_are_ascii_digits(tmp_db: str, option: str, given: str) -> None:
    """str.isdigit takes a superscript two, which int() refuses (a ValueError traceback), and digits of
    other scripts, which int() reads: a size is ASCII digits, as anywhere else on the command line."""
    out = runner.invoke(app, ["sweep", "--models", "tiny", "--device", "cpu", option, given])
    assert out.exit_code == 2, out.output
    bad = given.split(",")[-1]
    assert out.output.strip().splitlines() == [
        f"error: {option} takes positive integers, e.g. "
        f"{'1,2,4,8' if option == '--batch-sizes' else '128,512,1024'}; got {bad}"
    ]


@pytest.mark.parametrize("option", ["--context-length", "--batch-sizes"])
def test_sweep_size_past_the_digits_int_reads_is_out_of_range(tmp_db: str, option: str) -> None:
    out = runner.invoke(app, ["sweep", "--models", "tiny", "--device", "cpu", option, "1" * 5000])
    assert out.exit_code == 2, out.output
    assert out.output.strip().splitlines() == [
        f"error: {option} {'1' * 20}… (5000 digits) is out of range: at most {2**63 - 1}"
    ]


@pytest.mark.parametrize("option", ["--models", "--precision", "--compile"])
@pytest.mark.parametrize("given", ["", ","])
def test_sweep_axis_that_names_nothing_is_refused(tmp_db: str, option: str, given: str) -> None:
    out = runner.invoke(app, ["sweep", "--device", "cpu", option, given, "--db", tmp_db])
    assert out.exit_code == 2  # it ran an empty grid: an empty table, exit 0
    assert out.output.strip() == f"error: {option} names nothing ({given!r}): give a comma-separated list"


def test_context_column_is_an_integer_even_beside_a_run_without_a_model() -> None:
    from dashboard_data import MODELS

    ok = RunResult("a", RunConfig("tiny", context_length=128), "ok", model=MODELS["tiny"])
    ok.model = type(ok.model)(**{**ok.model.__dict__, "context_length": 128})
    oom = RunResult("b", RunConfig("tiny", context_length=1024), "oom")  # failed before the model was built
    table = results_table([ok, oom])
    assert str(table["context"].dtype) == "Int64" and list(table["context"]) == [128, 1024]
    import io

    from harness.cli.terminal.output import emit

    out = io.StringIO()
    emit(table, "table", file=out, wide=True)
    assert "128.000" not in out.getvalue() and "1,024" in out.getvalue()


def test_model_shape_columns_are_integers_in_csv_and_json_beside_an_interrupted_run() -> None:
    """A sweep stopped by Ctrl-C stores its point that had not built the model yet: its d_model, d_ff,
    num_layers and num_heads are empty, and the finished runs' were written as 128.0 in csv and json."""
    import io

    from dashboard_data import MODELS

    from harness.cli.terminal.output import emit

    ok = RunResult("a", RunConfig("tiny"), "ok", model=MODELS["tiny"])
    stopped = RunResult("b", RunConfig("tiny", precision="bf16"), "interrupted")
    table = results_table([ok, stopped])
    shape = ["d_model", "d_ff", "num_layers", "num_heads"]
    csv, js = io.StringIO(), io.StringIO()
    emit(table, "csv", file=csv)
    emit(table, "json", file=js)
    header, first, second = csv.getvalue().splitlines()
    cells = [dict(zip(header.split(","), line.split(","), strict=True)) for line in (first, second)]
    assert [cells[0][c] for c in shape] == ["64", "256", "2", "2"]
    assert [cells[1][c] for c in shape] == ["", "", "", ""]
    rows = json.loads(js.getvalue())
    assert [rows[0][c] for c in shape] == [64, 256, 2, 2]
    assert all(isinstance(rows[0][c], int) for c in shape) and [rows[1][c] for c in shape] == [None] * 4


@pytest.mark.slow
@pytest.mark.elsewhere
def test_sweep_over_context_lengths(tmp_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    args = ["sweep", "--models", "char", "--device", "cpu", "--context-length", "16,32", "--steps", "1"]
    out = runner.invoke(app, [*args, "--warmup", "0"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    lines = [line for line in out.stdout.splitlines() if line.startswith("│")]
    assert [line.split("│")[1:3] for line in lines] == [[" char ", "      16 "], [" char ", "      32 "]]
    assert "16.000" not in out.stdout
    runs = ResultsStore(tmp_db, readonly=True).runs()
    assert list(runs["context_length"]) == [16, 32] and len(set(runs["experiment"])) == 1
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert [r["context_length"] for r in listed] == [16, 32]


def test_a_value_named_twice_on_an_axis_is_one_point() -> None:
    base = RunConfig("tiny", device="cpu")
    configs = grid(base, ["tiny", "tiny"], ["fp32", "bf16", "fp32"], [False, False], [2, 2], [16, 16])
    assert [(c.model, c.precision, c.compile, c.batch_size) for c in configs] == [
        ("tiny", "fp32", False, 2),
        ("tiny", "bf16", False, 2),
    ]


def _two_alike_runs() -> list[RunResult]:
    from dashboard_data import MODELS

    model = type(MODELS["tiny"])(**{**MODELS["tiny"].__dict__, "context_length": 128})
    config = RunConfig("tiny", batch_size=8, context_length=128)
    return [RunResult(r, config, "ok", model=model) for r in ("a", "b")]


def test_csv_and_json_carry_the_columns_every_row_shares() -> None:
    """Batch, context and compile alike in every row: the terminal leaves them out (layout), csv and json
    keep them, so a script reads the batch size."""
    import csv
    import io

    from harness.cli.terminal.output import emit

    table = results_table(_two_alike_runs())
    out = io.StringIO()
    emit(table, "csv", file=out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["batch"], r["context"], r["compile"]) for r in rows] == [("8", "128", "False")] * 2
    out = io.StringIO()
    emit(table, "json", file=out)
    shown = json.loads(out.getvalue())
    assert [(r["batch"], r["context"], r["compile"]) for r in shown] == [(8, 128, False)] * 2
    out = io.StringIO()
    emit(table, "table", file=out, wide=True)
    header = next(line for line in out.getvalue().splitlines() if "size" in line)
    assert "size" in header and "batch" not in header and "context" not in header and "compile" not in header


@pytest.mark.slow
def test_run_csv_carries_batch_context_and_compile(tmp_db: str) -> None:
    args = ["run", "char", "--device", "cpu", "--steps", "1", "--warmup", "0", "--batch-size", "2"]
    out = runner.invoke(app, [*args, "-f", "csv", "--db", tmp_db], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    header, row = out.stdout.splitlines()[1:3]  # under the table's `# run …` line
    fields = dict(zip(header.split(","), row.split(","), strict=True))
    assert (fields["batch"], fields["context"], fields["compile"]) == ("2", "64", "False")


@pytest.mark.slow
def test_sweep_json_carries_batch_context_and_compile(tmp_db: str) -> None:
    args = ["sweep", "--models", "char", "--device", "cpu", "--steps", "1", "--warmup", "0", "-f", "json"]
    out = runner.invoke(app, [*args, "--batch-size", "2", "--db", tmp_db], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert [(r["size"], r["batch"], r["context"], r["compile"]) for r in rows] == [("char", 2, 64, False)]


def test_sweep_says_the_settings_every_run_shares(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal's table leaves out batch, context and compile where no run differs in them, --wide too,
    and nothing else said them: a note says what every run shares, after the table and on stderr beside
    csv and json; a setting swept is a column, not in the note."""
    from dashboard_data import MODELS

    from harness.core.records import StepRecord
    from harness.execution.ranks import multirank

    def run(config: RunConfig, run_id: str | None = None) -> RunResult:
        model = type(MODELS["tiny"])(**{**MODELS["tiny"].__dict__, "context_length": config.context_length})
        steps = [StepRecord(0, False, {"prefill": 100, "decode": 200})]
        name = f"{config.model}-{config.precision}"
        return RunResult(name, config, "ok", device="cpu", device_name="cpu", model=model, steps=steps)

    monkeypatch.setattr(multirank, "run_any", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["sweep", "--models", "tiny", "--device", "cpu", "--mode", "generate", "--new-tokens", "2"]
    args += ["-b", "1", "-t", "16", "--steps", "2", "--warmup", "1", "--db", db]
    said = "all runs: generate, fp32, batch 1, context 16, eager, new tokens 2"
    for fmt in ("table", "csv", "json"):
        r = runner.invoke(app, [*args, "--format", fmt, "--wide"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        assert f"note: {said}" in (r.stdout if fmt == "table" else r.stderr), r.output
    r = runner.invoke(app, [*args, "--precision", "fp32,bf16"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "note: all runs: generate, batch 1, context 16, eager, new tokens 2" in r.stdout
