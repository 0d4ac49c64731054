"""A table fitted to 80 columns keeps the columns that carry its decision, leaves out empty columns first,
says how to see what it left out, and never shows two different names (or two different rows) alike."""

from __future__ import annotations

import io
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import click
import numpy as np
import pandas as pd
import pytest
from conftest import measure_drift
from test_diff import make_run
from test_roofline_run import _run
from typer.testing import CliRunner

from analysis import tables
from analysis.compare.overhead import overhead_table
from analysis.ranks.ranks import imbalance_table, straggler_table
from harness.cli import app, commands, load
from harness.cli.terminal.fit import rich_table
from harness.cli.terminal.text import distinct
from harness.core.records import RunResult
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
ALEXNET = SHARED / "kineto" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"


def cli(*args: str | Path) -> str:
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "80", "LINES": "60"})
    assert result.exit_code == 0, result.output
    return result.stdout


def left_out(text: str) -> list[list[str]]:
    """The columns each note says were left out (a note may wrap: joined back into one line)."""
    joined = " ".join(line.strip() for line in text.splitlines())
    found = re.findall(
        r"columns left out to fit 80 columns: (.*?); --wide shows them, --format csv or json every column",
        joined,
    )
    return [f.split(", ") for f in found]


def headers(df: pd.DataFrame) -> list[str]:
    return [str(c.header) for c in rich_table(df, 80).table.columns]


def test_diff_of_runs_keeps_verdict_and_both_means(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    measure_drift(store, make_run("aa", noise=0.01, seed=5))
    save_run(store, make_run("base-1", noise=0.01, seed=1))
    save_run(store, make_run("slow-1", noise=0.01, backward_scale=1.10, seed=2))
    out = cli("diff", "base-1", "slow-1")
    (dropped,) = left_out(out)
    assert dropped == ["CI Low (%)", "CI High (%)", "Steps A", "Steps B"]
    backward = next(line for line in out.splitlines() if line.startswith("│ backward "))
    cells = [c.strip() for c in backward.strip("│").split("│")]
    assert cells[:3] == ["backward", "regression", "19.987"] and cells[3] == "22.020"  # Mean A, Mean B


def test_overhead_of_run_nsys_keeps_its_verdict() -> None:
    """`run --nsys`'s overhead table: the profiled side's mean, overhead and verdict stay at 80 columns."""
    rng = np.random.default_rng(0)
    rows = [
        (label, 0, step, phase, int(ns * scale * (1 + 0.01 * rng.standard_normal())))
        for label, scale in (("no nsys", 1.0), ("nsys light", 1.08))
        for step in range(10)
        for phase, ns in (("forward", 10e6), ("backward", 20e6), ("optimizer", 5e6))
    ]
    steps = pd.DataFrame(rows, columns=["label", "repeat", "step", "phase", "duration_ns"])
    table = overhead_table(steps, ("forward", "backward", "optimizer"))
    shown = headers(table)
    assert shown == ["Phase", "no nsys Avg (ms)", "nsys light Avg (ms)", "nsys light overhead (%)",
                     "nsys light verdict"]  # fmt: skip
    fitted = rich_table(table, 80)
    assert "nsys light StdDev (ms)" in fitted.dropped


def _two_modes() -> pd.DataFrame:
    """`harness overhead --nsys-mode light,full`'s table: a baseline and two profiled kinds."""
    rng = np.random.default_rng(3)
    rows = [
        (label, repeat, step, phase, int(ns * scale * (1 + 0.01 * rng.standard_normal())))
        for label, scale in (("no nsys", 1.0), ("nsys light", 1.04), ("nsys full", 1.08))
        for repeat in (0, 1, 2)
        for step in range(10)
        for phase, ns in (("forward", 10e6), ("backward", 20e6), ("optimizer", 5e6))
    ]
    steps = pd.DataFrame(rows, columns=["label", "repeat", "step", "phase", "duration_ns"])
    return overhead_table(steps, ("forward", "backward", "optimizer"))


@pytest.mark.parametrize("width", [60, 80, 120])
def test_overhead_keeps_the_baseline_beside_each_profiled_time(width: int) -> None:
    """The baseline's time, each profiled kind's time and its overhead are what a reader compares: kept
    at any width, the verdict sentences (the same figures in words) and the spreads left out first."""
    needed = ["Phase", "no nsys Avg (ms)", "nsys light Avg (ms)", "nsys light overhead (%)",
              "nsys full Avg (ms)", "nsys full overhead (%)"]  # fmt: skip
    fitted = rich_table(_two_modes(), width)
    assert [h for h in fitted.shown if h in needed] == needed, (width, fitted.shown)
    assert fitted.dropped and set(fitted.dropped).isdisjoint(needed)
    one = rich_table(_noisy_overhead(), width)
    assert {"no nsys Avg (ms)", "nsys light Avg (ms)", "nsys light overhead (%)"} <= set(one.shown), width


def test_overhead_verdicts_read_whole_at_80_columns() -> None:
    """An inconclusive verdict is a sentence: at 80 columns it wraps within its column, never cut in the
    middle ("inconclus…(±71.7%) is l… effect", as `run --nsys` printed on a noisy machine)."""
    rng = np.random.default_rng(1)
    rows = [
        (label, 0, step, phase, int(ns * (1 + 0.5 * rng.standard_normal() ** 2)))
        for label in ("no nsys", "nsys light")
        for step in range(4)
        for phase, ns in (("forward", 10e6), ("backward", 20e6), ("optimizer", 5e6))
    ]
    steps = pd.DataFrame(rows, columns=["label", "repeat", "step", "phase", "duration_ns"])
    table = overhead_table(steps, ("forward", "backward", "optimizer"))
    verdicts = table["nsys light verdict"].tolist()
    assert all(v.startswith("inconclusive: the noise (±") for v in verdicts), verdicts
    from rich.console import Console

    console = Console(width=80, record=True, file=io.StringIO())
    console.print(rich_table(table, 80).table)
    text = console.export_text()
    assert "…" not in text
    column = [line.strip("│").split("│")[-1].strip() for line in text.splitlines() if line.startswith("│")]
    assert " ".join(c for c in column if c) == " ".join(verdicts)


def test_overhead_of_run_nsys_fits_60_columns_its_verdicts_whole() -> None:
    """`run --nsys`'s overhead table of a noisy CPU run drew 64 cells wide at 60 columns, its verdicts cut
    at 12 cells (`inconclusive` and `: the noise` on two lines). The table now leaves off its outer border
    and abbreviates `overhead`: it fits, and each verdict reads whole."""
    from rich.cells import cell_len
    from rich.console import Console

    table = _noisy_overhead()
    fitted = rich_table(table, 60)
    console = Console(width=60, record=True, file=io.StringIO())
    console.print(fitted.table)
    text = console.export_text()
    assert max(cell_len(line) for line in text.splitlines()) <= 60, text
    assert fitted.notes == ["headers abbreviated to fit: ovhd = overhead"]
    rows = [[c.strip() for c in line.split("│")] for line in text.splitlines() if "│" in line]
    assert " ".join(r[-1] for r in rows if r[-1]) == " ".join(table["nsys light verdict"])
    means = [f"{v / 1e6:,.3f}" for v in table["no nsys Avg (ns)"]]
    assert [r[1] for r in rows if r[0]] == means  # the baseline's time, whole


def test_a_table_too_wide_for_its_kept_columns_abbreviates_their_headers() -> None:
    """Columns that are never left out, their numbers narrower than their headers' words: on a terminal
    too narrow for them the headers' long words are abbreviated, each alike in every header (the usual
    short form, else the word's head and a dot), a note gives them whole, and no number is cut."""
    from rich.cells import cell_len
    from rich.console import Console

    df = pd.DataFrame({
        "Kernel": ["gemm", "softmax"],
        "Compute utilization (%)": [91.5, 12.0],
        "Memory utilization (%)": [40.25, 88.0],
        "Occupancy achieved (%)": [50.0, 75.5],
        "Occupancy theoretical (%)": [100.0, 100.0],
    })  # fmt: skip
    df.attrs["deciding"] = list(df.columns)
    fitted = rich_table(df, 40)
    console = Console(width=40, record=True, file=io.StringIO())
    console.print(fitted.table)
    text = console.export_text()
    assert max(cell_len(line) for line in text.splitlines()) <= 40, text
    assert fitted.shown == list(df.columns) and not fitted.dropped
    headers = [str(c.header) for c in fitted.table.columns]
    assert headers[1:] == ["Comp util (%)", "Mem util (%)", "Occu. achi. (%)", "Occu. theo. (%)"], headers
    assert fitted.notes == [
        "headers abbreviated to fit: Comp = Compute, util = utilization, Mem = Memory, Occu. = Occupancy, "
        "achi. = achieved, theo. = theoretical"
    ], fitted.notes
    cells = [[c.strip() for c in line.split("│")] for line in text.splitlines() if "│" in line]
    assert cells == [["gemm", "91.5", "40.2", "50.0", "100.0"], ["softmax", "12.0", "88.0", "75.5", "100.0"]]
    assert rich_table(df, 120).table.show_edge and rich_table(df, 120).notes == []


def test_diff_fits_60_columns(tmp_db: str) -> None:
    """`harness diff` of two runs of steps near two seconds (a CPU's) on a 60-column terminal drew 64 cells
    wide: its phase, verdict, both means and Δ are kept, each figure whole, within 60 cells."""
    from rich.cells import cell_len

    def slow(run: RunResult) -> RunResult:  # steps 100 times as long
        for s in run.steps:
            s.phases = {p: ns * 100 for p, ns in s.phases.items()}
        return run

    store = ResultsStore(tmp_db)
    measure_drift(store, slow(make_run("aa", noise=0.01, seed=5)))
    save_run(store, slow(make_run("base-1", noise=0.01, seed=1)))
    save_run(store, slow(make_run("slow-1", noise=0.01, backward_scale=1.10, seed=2)))
    out = runner.invoke(app, ["diff", "base-1", "slow-1"], env={"COLUMNS": "60", "LINES": "60"}).stdout
    assert max(cell_len(line) for line in out.splitlines()) <= 60, out
    rows = [[c.strip() for c in line.strip(" │").split("│")] for line in out.splitlines() if "│" in line]
    backward = next(r for r in rows if r[0] == "backward")
    assert backward[1:5] == ["regression", "1,998.750", "2,201.958", "10.2"], out  # Verdict, means, Δ


def test_roofline_of_a_cpu_run_leaves_out_the_empty_columns_first(tmp_db: str) -> None:
    save_run(ResultsStore(tmp_db), _run("char-r1", "char"))
    out = cli("roofline", "char-r1")
    sub_blocks, phases = left_out(out)
    # no roofs on a CPU: bound and % of roof are empty, and go before columns with values
    assert {"bound", "of roof (%)", "attainable TFLOP/s"} <= set(sub_blocks)
    assert "intensity" not in sub_blocks and "flops" not in sub_blocks
    assert {"bound", "of roof (%)"} <= set(phases) and "intensity" not in phases
    qkv = next(line for line in out.splitlines() if line.startswith("│ qkv_proj "))
    assert [c.strip() for c in qkv.strip("│").split("│")] == [
        "qkv_proj", "forward", "12,582,912", "11.930", "0.400", "0.031", "2.637"
    ]  # fmt: skip


def test_an_empty_deciding_column_still_goes_first() -> None:
    df = pd.DataFrame({"Name": ["a" * 40, "b" * 40], "Verdict": [None, None], "Total Time (ns)": [1, 2],
                       "Detail": ["x" * 30, "y" * 30]})  # fmt: skip
    df.attrs["deciding"] = ["Name", "Verdict"]
    fitted = rich_table(df, 80)
    assert fitted.dropped == ["Verdict"]


@pytest.mark.parametrize("name", ["kernels", "nvtx", "nvtx-gpu", "api", "memops", "launch"])
def test_registry_tables_keep_their_deciding_columns(name: str, a100_export: Path) -> None:
    out = cli(name, a100_export)
    dropped = {c for found in left_out(out) for c in found}
    deciding = {c.replace("(ns)", "(ms)") for c in tables.get(name).deciding}
    assert not deciding & dropped, (deciding & dropped, out)


def test_names_shortened_alike_stay_apart() -> None:
    head, tail = "void at::native::max_pool_forward_nchw<float, float>(int, ", ", long, long)"
    a, b = head + "float const*, int" * 4 + tail, head + "double const*, int" * 4 + tail
    short, numbered = distinct([a, b, a], 33)
    assert short[0] == short[2] and short[0] != short[1] and numbered == []
    assert all(len(s) == 33 for s in short)
    assert "float" in short[0].split("…")[1] and "double" in short[1].split("…")[1]
    # two of three differ beyond the part shown: numbered, their full names in a note
    x, m, y = "x" * 30, "m" * 100, "y" * 10
    c, d, e = f"{x}1{m}1{y}", f"{x}1{m}2{y}", f"{x}2{m}1{y}"
    short, numbered = distinct([c, d, e], 20)
    assert short[0].endswith(" #1") and short[1].endswith(" #2") and len(set(short)) == 3
    assert numbered == [f"#1: {c}", f"#2: {d}"]


def test_kineto_kernel_names_shortened_alike_stay_apart() -> None:
    """Two fft2d_r2c_32x32 kernels differ only in their template arguments, in the middle of the name."""
    out = cli("kernels", ALEXNET, "--limit", "0")
    names = [line.strip("│").split("│")[-1].strip() for line in out.splitlines() if "void fft2" in line]
    # at 80 columns each shows where it differs: void fft2d…, 5u, true>(fl…t, int)
    assert len(names) == len(set(names)) == 3, names
    assert sum("5u, true" in n for n in names) == 1 and sum("0u, false" in n for n in names) == 1


def test_rows_shown_identical_keep_what_tells_them_apart() -> None:
    df = pd.DataFrame({"Name": ["k", "k"], "Comment": ["x" * 70, "x" * 70], "Total Time (ns)": [5, 5],
                       "GridXYZ": ["1 1 1", "2 1 1"]})  # fmt: skip
    df.attrs["priority"] = ["Name", "Comment"]
    # without GridXYZ the two rows would look the same
    assert rich_table(df, 30).dropped == ["Comment", "Total Time (ms)"]
    df["GridXYZ"] = "1 1 1"
    assert rich_table(df, 30).dropped == ["Comment", "Total Time (ms)", "GridXYZ"]


def test_cache_paths_shortened_alike_stay_apart(
    tmp_path: Path, cpu_export: Path, a100_export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))  # its own entries, none of other tests'
    deep = "/".join(["experiments"] * 6)
    for run, export in (("run-000001", cpu_export), ("run-000002", a100_export)):
        path = tmp_path / deep / run / deep / "report.sqlite"
        path.parent.mkdir(parents=True)
        shutil.copy(export, path)
        cli("nvtx", path)
    out = cli("cache")
    sources = [
        line.strip("│").split("│")[0].strip()
        for line in out.splitlines()
        if line.startswith(f"│ {str(tmp_path)[:5]}")
    ]
    assert len(sources) == len(set(sources)) == 2  # e.g. /tmp/pytest-of…001/experiments/ex…ort.sqlite
    assert {"001/experiments", "002/experiments"} <= {s.split("…")[1][:15] for s in sources}


def test_rank_tables_keep_the_straggler_at_80_columns() -> None:
    def ms(rank: int) -> dict[str, int]:  # rank 3 computes 200 ms longer; the others wait for it
        late = 200 if rank == 3 else 0
        return {"forward": 100 + late, "backward": 200, "allreduce": 250 - late, "optimizer": 50}

    rows = [(r, p, s, ns * 1_000_000) for r in range(4) for s in (1, 2) for p, ns in ms(r).items()]
    phases = pd.DataFrame(rows, columns=["rank", "phase", "step", "duration_ns"])
    stragglers = straggler_table(phases)
    assert headers(stragglers)[:1] == ["Rank"]
    assert {"Compute (ms)", "Wait (ms)", "Straggler", "Costs Others (ms)"} <= set(headers(stragglers))
    assert stragglers["Straggler"].tolist() == ["-", "-", "-", "rank 3"]
    assert {"Phase", "Slowest Rank", "Imbalance"} <= set(headers(imbalance_table(phases)))


def test_a_missing_count_prints_as_a_dash_not_na() -> None:
    """`harness ranks` on a CPU run's exports: the kernel counts are pandas' NA (nullable integers); the
    table shows "—", as for every other missing value, never "<NA>"."""
    from rich.console import Console

    df = pd.DataFrame({"Rank": [0, 1], "Kernels": pd.array([pd.NA, 5], dtype="Int64")})
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(rich_table(df, 80).table)
    rows = [line for line in console.export_text().splitlines() if line.startswith("│")]
    assert [[c.strip() for c in r.strip("│").split("│")] for r in rows] == [["0", "—"], ["1", "5"]]


def _noisy_overhead() -> pd.DataFrame:
    """An overhead table of a noisy CPU run (steps of about a second, two runs each): every verdict
    inconclusive, so the overhead column is empty, its emptiness the finding."""
    rng = np.random.default_rng(2)
    rows = [
        (label, repeat, step, phase, int(ns * (1 + 0.6 * rng.standard_normal() ** 2)))
        for label in ("no nsys", "nsys light")
        for repeat in (0, 1)
        for step in range(2)
        for phase, ns in (("forward", 350e6), ("backward", 700e6), ("optimizer", 220e6))
    ]
    steps = pd.DataFrame(rows, columns=["label", "repeat", "step", "phase", "duration_ns"])
    table = overhead_table(steps, ("forward", "backward", "optimizer"))
    assert table["nsys light overhead (%)"].isna().all()
    return table


def test_overhead_at_80_columns_keeps_its_deciding_column_and_both_bounds_or_neither() -> None:
    table = _noisy_overhead()
    shown = headers(table)
    # `harness overhead` at 80 columns kept "CI low" and left out the overhead column and "CI high"
    assert {"Phase", "nsys light overhead (%)", "nsys light verdict", "nsys light Avg (ms)"} <= set(shown)
    low, high = "nsys light CI low (%)", "nsys light CI high (%)"
    for width in range(60, 221):
        kept = set(rich_table(table, width).shown)
        assert (low in kept) == (high in kept), (width, kept)
        assert "nsys light overhead (%)" in kept, width


def test_runs_at_80_columns_tell_a_profiled_run_from_its_baseline(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, make_run("char-20261127-094436-d6d6", noise=0.01, seed=1), experiment="e")
    save_run(
        store,
        make_run("char-20261127-094457-340e", noise=0.01, seed=2),
        profiler="nsys",
        nsys_mode="light",
        experiment="e",
        baseline_run_id="char-20261127-094436-d6d6",
    )
    out = cli("runs")
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines() if line[:1] == "│"]
    assert (rows[0][1:3], rows[1][1:3]) == (["ok", "none"], ["ok", "nsys"]), out  # status, profiler
    assert rows[0][3] == "—" and rows[1][3].endswith("d6d6")  # the baseline: its id's end at least
    assert not {"status", "profiler", "baseline run"} & {c for found in left_out(out) for c in found}


def test_kineto_kernels_alike_but_for_their_grid_show_the_grid() -> None:
    """nccl_data's `CUDAFunctor_add` kernel, launched with grids of 50176 and 25088 blocks, read alike at
    80 columns (`void at::n…::CUDAFunctor…r*, 3>)` twice) with GridXYZ left out."""
    out = cli("kernels", SHARED / "kineto" / "nccl" / "nccl_data.json.gz", "--limit", "0")
    header = next(line for line in out.splitlines() if "Name" in line)
    assert "GridXYZ" in header, out
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines() if line[:1] == "│"]
    grid, name = [c.strip() for c in header.strip("┃").split("┃")].index("GridXYZ"), -1
    add = [r for r in rows if "CUDAFunct" in r[name]]
    assert {r[grid] for r in add} >= {"50176    1    1", "25088    1    1"}
    seen = [(r[name], r[grid]) for r in rows]
    assert len(seen) == len(set(seen)) or "BlockXYZ" in header


def test_a_narrow_sweep_keeps_the_status_of_a_point_out_of_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep with a point that ran and one out of memory: fitted to 64 columns, the phase means fill the
    width and the status column (after them in the table's priority) was left out, so the OOM point read as
    dashes only. It stays, with the verdict of each point."""
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank

    def run(config, run_id=None):  # type: ignore[no-untyped-def]
        if config.model == "tiny":
            return RunResult("p-tiny", config, "oom", device="cpu", error="CUDA out of memory")
        phases = {"forward": 100_000_000, "backward": 200_000_000, "optimizer": 50_000_000}
        steps = [StepRecord(i, False, phases) for i in range(3)]
        return RunResult(
            "p-char", config, "ok", device="cpu", device_name="cpu", steps=steps, tokens_per_s=9.0
        )

    monkeypatch.setattr(multirank, "run_any", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["sweep", "--models", "char,tiny", "--device", "cpu", "--db", db]
    result = runner.invoke(app, args, env={"COLUMNS": "64", "LINES": "60"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert [(r.split("│")[1].strip(), r.split("│")[-2].strip()) for r in rows] == [
        ("char", "ok"),
        ("tiny", "oom"),  # as runs and the database spell it
    ]
    assert not [names for names in left_out(out) if "status" in names]


def _sweep_point(config, run_id=None):  # type: ignore[no-untyped-def]
    from harness.core.records import RunResult, StepRecord

    scale = 3 if config.precision == "bf16" else 1
    phases = {"forward": 500_000_000 * scale, "backward": 2_000_000_000 * scale, "optimizer": 900_000_000}
    steps = [StepRecord(i, False, phases) for i in range(3)]
    return RunResult(
        f"{config.model}-{config.precision}", config, "ok", device="cpu", device_name="cpu", steps=steps,
        tokens_per_s=5.0,
    )  # fmt: skip


def test_a_sweep_over_precisions_keeps_the_precision_at_80_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sweep --models tiny,small --precision fp32,bf16` fitted to 80 columns left the precision out (last
    in the table's priority), so two rows of one size read alike. A setting that differs between rows is
    kept before the figures; one every row shares is not."""
    from harness.execution.ranks import multirank

    monkeypatch.setattr(multirank, "run_any", _sweep_point)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["sweep", "--models", "tiny,small", "--precision", "fp32,bf16", "--device", "cpu", "--db", db]
    result = runner.invoke(app, args, env={"COLUMNS": "80", "LINES": "60"})
    assert result.exit_code == 0, result.output
    rows = [[c.strip() for c in r.split("│")[1:-1]] for r in result.stdout.splitlines() if r.startswith("│")]
    assert [r[:2] for r in rows] == [["tiny", "fp32"], ["tiny", "bf16"], ["small", "fp32"], ["small", "bf16"]]
    assert not [names for names in left_out(result.stdout) if "precision" in names]

    listed = runner.invoke(app, ["runs", "--db", db], env={"COLUMNS": "80", "LINES": "60"}).stdout
    header = next(line for line in listed.splitlines() if "run" in line and "┃" in line)
    assert "precision" in header and "profiler" not in header  # every run without a profiler
    (dropped,) = left_out(listed)
    assert "profiler" in dropped and "precision" not in dropped


def test_runs_tells_a_sweeps_batch_sizes_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After `sweep --batch-sizes 1,2`, `harness runs` listed the two points with no batch size: two rows
    of one model and precision that differ only in their times. The batch (and context) is a setting: shown
    where runs differ in it, left out first where they do not."""
    from harness.execution.ranks import multirank

    def point(config, run_id=None):  # type: ignore[no-untyped-def]
        return replace(_sweep_point(config), run_id=f"tiny-batch-{config.batch_size}")

    monkeypatch.setattr(multirank, "run_any", point)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["sweep", "--models", "tiny", "--batch-sizes", "1,2", "--device", "cpu", "--db", db]
    assert runner.invoke(app, args, env={"COLUMNS": "80", "LINES": "60"}).exit_code == 0
    listed = runner.invoke(app, ["runs", "--db", db], env={"COLUMNS": "80", "LINES": "60"}).stdout
    header = [c.strip() for c in next(x for x in listed.splitlines() if x.startswith("┃ run")).split("┃")]
    rows = [[c.strip() for c in r.split("│")[1:-1]] for r in listed.splitlines() if r.startswith("│")]
    assert header[1:3] == ["run", "batch"] and [r[1] for r in rows] == ["1", "2"]
    (dropped,) = left_out(listed)
    assert "context" in dropped and "batch" not in dropped


def _table_commands() -> list[tuple[str, click.Command]]:
    """Every command (and subcommand) whose --format offers a table for people."""
    out = []
    for name in commands():
        top = load(name)
        subs = top.commands.items() if isinstance(top, click.Group) else [("", top)]
        for sub, command in subs:
            fmt = next((p for p in command.params if "--format" in getattr(p, "opts", ())), None)
            if fmt is not None and "table" in getattr(fmt.type, "choices", ()):
                out.append((f"{name} {sub}".strip(), command))
    return out


def test_every_command_that_fits_a_table_takes_wide() -> None:
    """The note under a fitted table says `--wide shows them`: every command that prints one takes it."""
    lacking = [
        name for name, command in _table_commands()
        if not any("--wide" in getattr(p, "opts", ()) for p in command.params)
    ]  # fmt: skip
    assert lacking == []


def test_import_at_80_columns_keeps_what_became_of_each_file(tmp_path: Path) -> None:
    """A run id as long as a program's (`harness profile -- sleep 6`) and the file it is in."""
    data = json.loads((Path(__file__).parent / "data" / "harness-unsaved-char.json").read_text())
    run_id = data["result"]["run_id"] = "sleep-20261201-010806-939d5660"
    real = tmp_path / "h1" / f"harness-unsaved-{run_id}.json"
    real.parent.mkdir()
    real.write_text(json.dumps(data))
    db = str(tmp_path / "results.sqlite")
    assert runner.invoke(app, ["import", str(real), "--db", db]).exit_code == 0
    out = cli("import", real, "--db", db)
    assert "already stored" in out and run_id in out
    assert left_out(out) == []


def test_baseline_list_wide_shows_every_column(tmp_db: str) -> None:
    save_run(ResultsStore(tmp_db), make_run("base-1", noise=0.01, seed=1))
    assert runner.invoke(app, ["baseline", "tag", "main", "base-1"]).exit_code == 0
    assert left_out(cli("baseline", "list")) == [["tagged_at"]]
    wide = cli("baseline", "list", "--wide")
    assert "tagged_at" in wide and left_out(wide) == []


@pytest.mark.parametrize("width", [60, 80, 120])
def test_findings_sentences_wrap_never_cut(width: int) -> None:
    """A finding's Where, Fix and Evidence are sentences: on any terminal a shown one reads whole, wrapped in
    its column, never cut in the middle (`the host launches too l…se operators`)."""
    from conftest import H100_DIR, need

    export = need(H100_DIR / "report.sqlite")
    env = {"COLUMNS": str(width), "LINES": "200"}
    found = json.loads(runner.invoke(app, ["advise", str(export), "--format", "json"], env=env).stdout)
    found = found["findings"]
    text = runner.invoke(app, ["advise", str(export)], env=env).stdout
    table = text[: text.index("└")]
    header = [c.strip() for c in next(ln for ln in table.splitlines() if "Rule" in ln).strip("┃").split("┃")]
    rows = [[c.strip() for c in ln.strip("│").split("│")] for ln in table.splitlines() if ln.startswith("│")]
    for name in ("Where", "Fix", "Evidence"):
        if name not in header:
            continue
        column = "".join("".join(r[header.index(name)].split()) for r in rows)  # compared without spaces
        assert column == "".join("".join(f[name].split()) for f in found), (width, name, column)
    assert "Where" in header and "…" not in table, table


@pytest.mark.parametrize("width", [60, 80, 120])
def test_health_keeps_each_checks_evidence(width: int) -> None:
    """A check's evidence is why it has its status (h100-medium warns about its `[Unknown]` kernels): shown
    on any terminal, wrapped in a narrower column, never left out for the status alone."""
    from conftest import H100_DIR, need
    from rich.cells import cell_len

    export = need(H100_DIR / "report.sqlite")
    out = runner.invoke(app, ["health", str(export)], env={"COLUMNS": str(width), "LINES": "200"}).stdout
    header = next(line for line in out.splitlines() if "Check" in line)
    assert "Evidence" in header, out
    assert "columns left out" not in out
    row = out[out.index("│ kernel names") :].split("│ times")[0]
    cells = [line.strip("│").split("│")[2] for line in row.splitlines() if line.startswith("│")]
    assert "".join("".join(c.split()) for c in cells).startswith("14,011of30,528kernelsnamed"), cells
    assert max(cell_len(line) for line in out.splitlines() if line[:1] in "┏│└") <= width


@pytest.mark.parametrize("width", [60, 80, 120])
def test_show_keeps_each_fields_value(tmp_db: str, width: int) -> None:
    """`show`'s run table is fields and their values: a table of two columns keeps both on any terminal (the
    fields alone say nothing), its values wrapped."""
    run = make_run("base-1", noise=0.01, seed=1)
    run.device_name = "Intel(R) Xeon(R) Platinum 8480+ with a long marketing name"  # a long value
    save_run(ResultsStore(tmp_db), run)
    out = runner.invoke(app, ["show", "base-1"], env={"COLUMNS": str(width), "LINES": "200"}).stdout
    run_table = out[: out.index("└")]
    assert "value" in run_table.splitlines()[2], run_table
    status = next(line for line in run_table.splitlines() if line.startswith("│ status "))
    assert [c.strip() for c in status.strip("│").split("│")] == ["status", "ok"]
    assert "1 of 2 columns left out" not in out
