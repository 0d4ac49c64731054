"""The comparing and checking commands attacked as a new user would: `overhead`'s options at their edges,
`roofline` of huge sizes and of a stored run with options it would not use."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import shared_export
from typer.testing import CliRunner

from harness.cli import app
from harness.experiments import overhead
from harness.profilers.capture import save as save_run

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--ci-target", "nan"], "error: --ci-target must be a positive percentage, got nan"),
        (["--ci-target", "inf"], "error: --ci-target must be a positive percentage, got inf"),
        (
            ["--ci-target", "5", "--max-time", "nan"],
            "error: --max-time must be a positive number of seconds, got nan",
        ),
        (
            ["--ci-target", "5", "--max-time", "inf"],
            "error: --max-time must be a positive number of seconds, got inf",
        ),
    ],
    ids=["ci-nan", "ci-inf", "max-time-nan", "max-time-inf"],
)
def test_overhead_refuses_a_target_or_time_bound_that_is_not_a_number(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """nan passed `<= 0`: a nan --ci-target is never reached and a nan --max-time never passed, so the
    rounds went on without end."""
    db = tmp_path / "results.sqlite"
    result = runner.invoke(app, ["overhead", "tiny", "--device", "cpu", *args, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == said
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--ci-target", "nan"], "error: --ci-target must be a positive percentage, got nan"),
        (["--ci-target", "inf"], "error: --ci-target must be a positive percentage, got inf"),
        (["--budget", "nan"], "error: --budget must be a positive number of seconds, got nan"),
        (["--budget", "inf"], "error: --budget must be a positive number of seconds, got inf"),
    ],
    ids=["ci-nan", "ci-inf", "budget-nan", "budget-inf"],
)
def test_optimize_refuses_a_target_or_budget_that_is_not_a_number(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """nan passed `<= 0`: a nan --ci-target is never reached and a nan --budget never spent, and the
    changes were tried as if neither was given."""
    db = tmp_path / "results.sqlite"
    result = runner.invoke(app, ["optimize", "tiny", "--device", "cpu", *args, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == said
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--start", "nan"],
            "error: --start must be a number of seconds, at most 9.2e+09 either way; got nan",
        ),
        (["--end", "inf"], "error: --end must be a number of seconds, at most 9.2e+09 either way; got inf"),
        (
            ["--start", "1e300"],
            "error: --start must be a number of seconds, at most 9.2e+09 either way; got 1e+300",
        ),
    ],
    ids=["start-nan", "end-inf", "start-huge"],
)
def test_dashboard_refuses_a_window_edge_that_is_not_a_number_of_seconds(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """A nan or infinite --start/--end, or one whose nanoseconds overflow a float, ended in a traceback."""
    out = tmp_path / "d.html"
    result = runner.invoke(app, ["dashboard", str(shared_export("cpu-train")), *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == said
    assert not out.exists()


def test_overhead_runs_each_nsys_mode_once_a_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nsys_bin: str
) -> None:
    """`--nsys-mode light,light` ran nsys light twice a round, both pooled as one mode's steps, while the
    title counted one run a round."""
    asked: list[list[str]] = []

    def measure(*args: object, modes: list[str], **kwargs: object) -> None:
        asked.append(modes)
        raise SystemExit(0)  # what was asked is all this test reads: nothing is run

    monkeypatch.setattr(overhead, "measure_overhead", measure)
    args = [
        "overhead",
        "tiny",
        "--device",
        "cpu",
        "--nsys-mode",
        "light,full,light",
        "--db",
        str(tmp_path / "r.db"),
    ]
    runner.invoke(app, [*args, "--nsys-path", nsys_bin])
    assert asked == [["light", "full"]]


def _stored_run(db: str) -> str:
    """A tiny train run of two measured steps (batch 2, context 16) stored in `db`; its id."""
    import workloads
    from harness.core.records import ModelInfo, RunConfig, RunResult, StepRecord
    from harness.store.results import ResultsStore

    spec = workloads.get_spec("tiny")
    config = RunConfig(model="tiny", device="cpu", batch_size=2, context_length=16, warmup=1, steps=2)
    steps = [StepRecord(i, i == 0, {"forward": 4_000_000, "backward": 8_000_000, "optimizer": 2_000_000})
             for i in range(3)]  # fmt: skip
    info = ModelInfo(spec.family, spec.d_model, spec.d_ff, spec.num_layers, spec.num_heads, spec.vocab_size,
                     16, 1)  # fmt: skip
    save_run(ResultsStore(db), RunResult(run_id="tiny-r1", config=config, status="ok", device="cpu",
                                    device_name="AMD EPYC", model=info, steps=steps))  # fmt: skip
    return "tiny-r1"


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["--batch-size", "64"], "--batch-size"),
        (["-b", "8", "--model", "small"], "--model, --batch-size"),  # 8 is the default: given all the same
        (["--device", "cpu", "--precision", "bf16"], "--precision, --device"),
        (["-t", "256", "--mode", "forward", "--attention", "sdpa"], "--context-length, --mode, --attention"),
    ],
)
def test_roofline_of_a_run_refuses_the_configuration_options_it_would_not_use(
    tmp_db: str, given: list[str], named: str
) -> None:
    """With RUN the run's own configuration is placed: --batch-size 64 and the like were taken and the table
    was of batch 2 all the same, nothing said."""
    run = _stored_run(tmp_db)
    result = runner.invoke(app, ["roofline", run, *given, "--db", tmp_db])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"error: {named}: the roofline of run {run} is of the run's own configuration; these options go "
        "without RUN"
    )
    assert runner.invoke(app, ["roofline", run, "--db", tmp_db, "--format", "json"]).exit_code == 0


@pytest.mark.parametrize("batch", ["99999999999", "1000000000"])
def test_roofline_refuses_sizes_whose_counts_pass_int64(tmp_path: Path, batch: str) -> None:
    """A batch whose step's FLOPs pass 2^63 printed negative FLOPs, bytes and intensity (the per-phase sums
    wrapped round) as data."""
    result = runner.invoke(app, ["roofline", "--batch-size", batch, "--format", "csv"])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.startswith(f"error: batch {batch} × context 128: a step's ") and "pass 2^63" in line
    assert "\n" not in line
    # the largest that fits is still counted, every count positive
    fits = runner.invoke(app, ["roofline", "--batch-size", "100000000", "--format", "json"])
    assert fits.exit_code == 0, fits.output
    import json

    tables = json.loads(fits.stdout)
    phases = next(rows for title, rows in tables.items() if title == "per phase")
    assert phases[0]["phase"] == "forward" and phases[0]["flops"] == 465155724800000000
    assert all(row["flops"] >= 0 and row["bytes"] > 0 for row in phases)


def test_roofline_help_names_the_html_option_s_value_a_file() -> None:
    result = runner.invoke(app, ["roofline", "--help"])
    assert "--html <file>" in result.output and "<parse>" not in result.output


def test_diff_against_a_run_stopped_before_its_first_measured_step_says_it_has_none(tmp_db: str) -> None:
    """A run interrupted in its warmup was said to `time no phase in common` with the other, and each side
    without an export to leave `phase verdicts only` where there was no verdict at all."""
    import json

    from test_store import make_result

    from harness.store.results import ResultsStore

    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    stopped = make_result("tiny-b")
    stopped.steps = stopped.steps[:2]  # its two warmup steps, then SIGTERM
    stopped.status, stopped.error = "interrupted", "interrupted by SIGTERM after 0 of 3 measured steps"
    save_run(store, stopped)
    result = runner.invoke(app, ["diff", "tiny-a", "tiny-b", "--db", tmp_db, "--format", "json"])
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["notes"]
    assert "B (tiny-b) has no measured steps: there is nothing to compare" in notes
    assert not any("no phase in common" in n or "phase verdicts only" in n for n in notes), notes
    assert "tiny-a has no export: nothing to compare (profile it with --nsys)" in notes
    # a run with steps keeps its note as it was
    save_run(store, make_result("tiny-c"))
    kept = runner.invoke(app, ["diff", "tiny-a", "tiny-c", "--db", tmp_db, "--format", "json"])
    assert (
        "tiny-a has no export: phase verdicts only (profile it with --nsys)"
        in json.loads(kept.stdout)["notes"]
    )


def test_a_whole_number_threshold_takes_a_whole_number_however_written(tmp_path: Path) -> None:
    """`-t optimizer_median_ns=2e4` was refused as not `a int` (the type's name, in a sentence); 2e4 ns is
    the whole number 20000."""
    from analysis.advice.base import Thresholds

    th = Thresholds().with_options(["optimizer_median_ns=2e4", "optimizer_kernels=64.0"])
    assert (th.optimizer_median_ns, th.optimizer_kernels) == (20_000, 64)
    assert isinstance(th.optimizer_median_ns, int)
    export = str(tmp_path / "none.sqlite")
    for value in ("2.5", "inf", "nan", "many"):
        result = runner.invoke(app, ["advise", export, "-t", f"optimizer_kernels={value}"])
        assert result.exit_code == 2, result.output
        assert (
            result.output.strip() == f"error: threshold optimizer_kernels takes a whole number, not '{value}'"
        )
    result = runner.invoke(app, ["advise", export, "-t", "host_wait_share=many"])
    assert result.output.strip() == "error: threshold host_wait_share takes a number, not 'many'"


def test_blocks_by_layer_puts_the_final_norm_in_no_layer() -> None:
    """`blocks --by-layer`: the final norm's row (layer —) named `layer` its parent, a layer it is not in; a
    norm inside a layer keeps it."""
    import pandas as pd

    from analysis.views.blocks import LAYER, block_table

    rows = [
        (1, 0, LAYER, "forward", 80, 1),
        (1, 0, "norm", "forward", 7, 2),
        (1, None, "norm", "forward", 3, 1),
    ]
    records = pd.DataFrame(rows, columns=["step", "layer", "block", "phase", "duration_ns", "calls"])
    records["layer"] = records["layer"].astype("Int64")
    table = block_table(records, {"forward": 100.0}, steps=1, by_layer=True)
    norms = table[table["block"] == "norm"].set_index("layer", drop=False)
    assert norms.loc[0, "parent"] == LAYER and norms.loc[0, "Mean (ns)"] == 7
    final = table[(table["block"] == "norm") & table["layer"].isna()]
    assert len(final) == 1 and final["parent"].isna().all() and final["Mean (ns)"].tolist() == [3]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--gate", "-1"], "error: --gate must be 0 or more, got -1"),
        (["--gate", "-0.5"], "error: --gate must be 0 or more, got -0.5"),
        (["--top", "0"], "error: --top must be 1 or more, got 0"),
        (["--warmup", "-2"], "error: --warmup must be 0 or more, got -2"),
        (["--iteration", "-1"], "error: --iteration must be 0 or more, got -1"),
    ],
)
def test_diff_refuses_a_number_below_its_range_in_one_line(tmp_db: str, given: list[str], said: str) -> None:
    """Click's `min=` printed its usage block, a blank line and a capitalised `Error: Invalid value …`: four
    lines, where every other refusal is one `error:` line."""
    result = runner.invoke(app, ["diff", "a.sqlite", "b.sqlite", *given, "--db", tmp_db])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == said


def test_a_run_stopped_before_its_model_was_built_differs_in_no_context_length(tmp_db: str) -> None:
    """A run interrupted before its model was built stores no context length: its diff against the same
    configuration said `context length None → 128`, a difference of configuration that is none."""
    import json

    from test_store import make_result

    from harness.experiments.diff import config_differences
    from harness.store.results import ResultsStore

    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    early = make_result("tiny-b")
    early.model, early.steps = None, []
    early.status, early.error = "interrupted", "interrupted by SIGTERM after 0 of 3 measured steps"
    save_run(store, early)
    a, b = store.get("tiny-a"), store.get("tiny-b")
    assert a.context_length == 128 and b.context_length is None
    assert config_differences(a, b) == []
    result = runner.invoke(app, ["diff", "tiny-a", "tiny-b", "--db", tmp_db, "--format", "json"])
    assert not any("not the same configuration" in n for n in json.loads(result.stdout)["notes"])
    # a context length asked for is still told apart from the model's own
    asked = make_result("tiny-c")
    asked.config.context_length, asked.model = 64, None
    save_run(store, asked)
    assert config_differences(a, store.get("tiny-c")) == ["context length 128 → 64"]


@pytest.mark.parametrize(("kept", "status"), [(2, "fail"), (4, "warn")])
def test_health_of_a_stopped_run_without_a_capture_says_it_stopped(
    tmp_db: str, kept: int, status: str
) -> None:
    """A run interrupted before its end with no export (no profiler): every check was ok (`health --strict`
    passed a run stopped after 0 of its measured steps); the capture's checks that say a run stopped had
    no capture to read."""
    import csv
    import io

    from test_store import make_result

    from harness.store.results import ResultsStore

    stopped = make_result("tiny-stop")
    stopped.steps = stopped.steps[:kept]  # two warmup steps, then what it measured before SIGTERM
    stopped.status, stopped.error = (
        "interrupted",
        f"interrupted by SIGTERM after {kept - 2} of 3 measured steps",
    )
    save_run(ResultsStore(tmp_db), stopped)
    result = runner.invoke(app, ["health", "tiny-stop", "--db", tmp_db, "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = {r["Check"]: r for r in csv.DictReader(io.StringIO(result.stdout))}
    check = rows["measured steps"]
    assert check["Status"] == status
    said = f"the run was interrupted by SIGTERM, after {kept - 2} of its 3 measured steps (2–4); the other"
    assert check["Evidence"].startswith(f"{said} {5 - kept} never ran"), check["Evidence"]
    strict = runner.invoke(app, ["health", "tiny-stop", "--db", tmp_db, "--strict"])
    assert strict.exit_code == (1 if status == "fail" else 0), strict.output
    # a run that ended ok has no such check
    save_run(ResultsStore(tmp_db), make_result("tiny-ok"))
    whole = runner.invoke(app, ["health", "tiny-ok", "--db", tmp_db, "--format", "csv"])
    assert "measured steps" not in whole.stdout


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_compare_compile_with_no_pair_tells_scripts_why_not_how_to_read_its_rows(
    tmp_db: str, fmt: str
) -> None:
    """No configuration run both ways: csv and json printed the empty table with the note on how its rows'
    medians and speed-ups are read, and not why there were none (the table format said why)."""
    from test_store import make_result

    from harness.store.results import ResultsStore

    save_run(ResultsStore(tmp_db), make_result("tiny-eager"))
    result = runner.invoke(app, ["compare-compile", "--db", tmp_db, "--format", fmt])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "[]" if fmt == "json" else result.stdout.startswith("model,mode,device,")
    assert "medians of the measured steps" not in result.stderr
    said = "note: no configuration has both an eager and a compiled run without a profiler: run it twice"
    assert result.stderr.startswith(said), result.stderr
    unmatched = runner.invoke(app, ["compare-compile", "--db", tmp_db, "--format", fmt, "--device", "cuda"])
    assert unmatched.stderr.startswith("note: no run matches --device cuda"), unmatched.stderr
