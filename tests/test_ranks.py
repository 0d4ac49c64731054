"""`harness ranks`: phase times per rank, GPU busy time, NCCL kernels, the straggler, the aligned clock."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from export_data import derive, distinct_copy, query_rows, with_harness_ranges
from typer.testing import CliRunner

from analysis.ranks.ranks import (
    gpu_table,
    imbalance_table,
    one_rank_note,
    phase_rows,
    phase_table,
    ranks_report,
    straggler_note,
    straggler_table,
    union_ns,
    with_step_rows,
)
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
SLOW_NS = 30_000_000  # rank 1's backward takes 30 ms longer in every step
SHIFT_NS = 1_000_000_000  # rank 1's session started 1 s later
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm *, unsigned long, ncclWork *)"


@pytest.fixture(scope="module")
def two_ranks(a100_export: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The A100 export with harness phases (steps 1..4 measured, backward 60 ms) and an `allreduce` of 2 ms
    after each backward, as rank 0; rank 1: backward 30 ms longer, its first kernel an NCCL all-reduce,
    its session 1 s later."""
    folder = tmp_path_factory.mktemp("ranks")
    base = with_harness_ranges(a100_export, folder / "base.sqlite")
    allreduce = (
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, int64Value) "
        "SELECT end - 2000000, end - 1, 59, 'allreduce', globalTid, 0, int64Value FROM NVTX_EVENTS "
        "WHERE text = 'backward'"
    )
    r0 = derive(base, folder / "job.rank0.sqlite", allreduce)
    r1 = derive(
        base,
        folder / "job.rank1.sqlite",
        allreduce,
        f"UPDATE NVTX_EVENTS SET end = end + {SLOW_NS} WHERE text = 'backward'",
        f"UPDATE NVTX_EVENTS SET end = end + {SLOW_NS} WHERE text IN ('step', 'measured')",
        "INSERT INTO StringIds (id, value) VALUES (999999, '" + NCCL + "')",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999999 WHERE rowid = "
        "(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)",
        f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + {SHIFT_NS}",
    )
    (folder / "base.sqlite").unlink()
    return [r0, r1]


def test_phase_rows_keep_the_measured_steps(two_ranks: list[Path]) -> None:
    with open_trace(two_ranks[0]) as trace:
        rows = phase_rows(trace)
    assert sorted(rows["phase"].unique()) == ["allreduce", "backward", "forward", "step"]
    assert sorted(rows.loc[rows["phase"] == "forward", "step"]) == [1, 2, 3, 4]  # step 0 is warm-up
    assert (rows.loc[rows["phase"] == "allreduce", "duration_ns"] == 2_000_000 - 1).all()


def test_straggler_named_with_its_ratio(two_ranks: list[Path]) -> None:
    report = ranks_report(two_ranks, jobs=2)
    imb = report.imbalance.set_index("Phase")
    assert list(imb.index) == ["forward", "backward", "allreduce", "step"]
    back = imb.loc["backward"]
    assert back["Slowest Rank"] == 1 and back["Fastest Rank"] == 0
    assert back["Fastest (ns)"] == 60_000_000 - 2  # backward: kernel end + 1 to step end - 1
    assert back["Slowest (ns)"] == 60_000_000 - 2 + SLOW_NS
    assert back["Imbalance"] == pytest.approx(90 / 75, abs=1e-3)  # median of two ranks: their mean
    assert imb.loc["forward", "Imbalance"] == 1.0
    # rank 1 computes 30 ms longer; this derived export's all-reduce is 2 ms on both (no wait recorded)
    stragglers = report.stragglers.set_index("Rank")
    assert stragglers["Straggler"].tolist() == ["-", "rank 1"]
    assert stragglers.loc[1, "Compute (ns)"] - stragglers.loc[0, "Compute (ns)"] == pytest.approx(
        SLOW_NS, abs=1
    )
    assert stragglers.loc[1, "Costs Others (ns)"] == pytest.approx(0, abs=1)
    times = report.phase_times.set_index(["Rank", "Phase"])
    assert times.loc[(1, "backward"), "Steps"] == 4
    assert times.loc[(1, "backward"), "Total (ns)"] == 4 * (60_000_000 - 2 + SLOW_NS)


def test_one_step_has_one_figure_and_the_phases_sum_is_named_as_such(two_ranks: list[Path]) -> None:
    """The straggler table's `Step` column (compute + wait, the phases' sum) stood beside the imbalance
    table's `step` row (the step range) with another figure for the same step: the sum is named for what
    it is, and `step` is the step range alone."""
    result = runner.invoke(app, ["ranks", str(two_ranks[0].parent), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    steps = {r["Phase"]: r for r in doc["Imbalance per phase over 2 ranks (mean per step)"]}["step"]
    stragglers = doc["Straggler: compute and wait in collectives per rank (mean per step)"]
    assert list(stragglers[0]) == [
        "Rank", "Steps", "Compute (ns)", "Wait (ns)", "Compute + Wait (ns)", "Straggler", "Costs Others (ns)",
    ]  # fmt: skip
    for row, step_ns in zip(stragglers, (steps["Fastest (ns)"], steps["Slowest (ns)"]), strict=True):
        assert row["Compute + Wait (ns)"] == row["Compute (ns)"] + row["Wait (ns)"]
        assert row["Compute + Wait (ns)"] != step_ns  # the planted all-reduce lies inside backward
    headers = [k for rows in doc.values() for k in rows[0]] + [r["Phase"] for r in doc["Phase time per rank"]]
    assert [h for h in headers if h.lower().startswith("step") and h != "Steps"] == []


def test_gpu_busy_and_nccl_kernels(two_ranks: list[Path]) -> None:
    per_rank = ranks_report(two_ranks).per_rank.set_index("Rank")
    assert (per_rank["Kernels"] == 5).all()
    assert per_rank["GPU Busy (ns)"].tolist() == [88_573_480, 88_573_480]  # 5 kernels, apart
    assert per_rank["NCCL Kernels"].tolist() == [0, 1]
    assert per_rank.loc[1, "NCCL Time (ns)"] == 942626994 - 924922186
    assert 0 < per_rank.loc[0, "Comm Share (%)"] < 5


def test_a_phase_one_rank_of_several_measured_claims_no_balance() -> None:
    """Rank 0 alone measured `allreduce`: it was shown Spread 0 and Imbalance 1.000 under a title over 2
    ranks, which reads as balanced; there is no other rank to compare it with."""
    rows = [(0, "forward", s, 10_000_000) for s in range(3)] + [
        (1, "forward", s, 12_000_000) for s in range(3)
    ]
    rows += [(0, "allreduce", s, 2_000_000) for s in range(3)]
    table = imbalance_table(pd.DataFrame(rows, columns=["rank", "phase", "step", "duration_ns"]))
    alone, both = table.set_index("Phase").loc["allreduce"], table.set_index("Phase").loc["forward"]
    assert alone["Ranks"] == 1 and alone["Mean (ns)"] == 2e6
    assert np.isnan(alone["Spread (ns)"]) and np.isnan(alone["Imbalance"])
    assert both["Spread (ns)"] == 2e6 and both["Imbalance"] == pytest.approx(12 / 11, abs=1e-3)


def test_ranks_share_one_clock(two_ranks: list[Path]) -> None:
    phases = ranks_report(two_ranks).phases
    first = phases[phases["phase"] == "forward"].groupby("rank")["start_ns"].min()
    assert first[1] - first[0] == SHIFT_NS  # same program, session 1 s later: 1 s later on the common clock


def test_straggler_table_from_store_shaped_rows() -> None:
    """What the results store hands over: rank, phase, step, duration_ns."""
    rows = [(r, p, s, d) for r, ms_ in ((0, 10), (1, 11), (2, 15)) for s in range(3)
            for p, d in (("forward", ms_ * 1_000_000), ("allreduce", 2_000_000))]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["rank", "phase", "step", "duration_ns"])
    fwd = imbalance_table(frame).set_index("Phase").loc["forward"]
    assert fwd["Slowest Rank"] == 2 and fwd["Median (ns)"] == 11e6 and fwd["Mean (ns)"] == 12e6
    assert fwd["Imbalance"] == pytest.approx(15 / 11, abs=1e-3)
    assert straggler_table(frame)["Straggler"].tolist() == ["-", "-", "rank 2"]


def test_union_of_kernel_intervals() -> None:
    start = np.array([0, 5, 20, 21, 100])
    end = np.array([10, 8, 30, 25, 101])
    assert union_ns(start, end) == 10 + 10 + 1
    assert union_ns(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0


def test_cpu_run_says_cuda_not_traced(cpu_export: Path, tmp_path: Path) -> None:
    one = derive(cpu_export, tmp_path / "cpu.rank0.sqlite")
    report = ranks_report([one])
    cells = report.per_rank.drop(columns="Rank")
    assert list(cells.columns) == [
        "Kernels",
        "GPU Busy (ns)",
        "NCCL Kernels",
        "NCCL Time (ns)",
        "NCCL Share (%)",
    ]
    assert cells.isna().all().all()  # not traced: every cell empty, never 0
    assert (
        "rank 0: CUDA not traced (no kernel data: a CPU run, or profiled without --trace=cuda)"
        in report.notes
    )
    gpu = gpu_table(report.gpu, report.phases)
    assert "Comm Share (%)" not in gpu.columns  # no allreduce phase on one rank


def test_cli_tables_and_html(two_ranks: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "ranks.html"
    result = runner.invoke(app, ["ranks", str(two_ranks[0].parent), "--html", str(out), "--format", "csv"])
    assert result.exit_code == 0, result.output
    second = result.stdout.split("\n\n")[1]
    assert second.startswith("# Straggler: compute and wait in collectives per rank")
    stragglers = pd.read_csv(io.StringIO(second.split("\n", 1)[1]))
    assert stragglers.set_index("Rank").loc[1, "Straggler"] == "rank 1"
    html = out.read_text()
    assert "ranks × phases" in html and "Ranks on one clock" in html
    assert "Straggler: rank 1 arrives last" in html and "straggler ratio" not in html
    assert "wrote" in result.stderr and "3 panels" in result.stderr


def test_the_imbalance_title_counts_ranks_as_people_say_them(two_ranks: list[Path]) -> None:
    result = runner.invoke(app, ["ranks", *map(str, two_ranks), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "# Imbalance per phase over 2 ranks (mean per step)"


ONE_RANK = "imbalance and the straggler need two or more ranks, and there is one (rank 0): its own times only"


def test_one_rank_has_no_imbalance_but_a_line_saying_why(cpu_export: Path) -> None:
    """One export is one rank: its imbalance table was Spread 0.0 and Imbalance 1.000 in every row, which
    compares the rank with itself. Every format leaves the table out and says why in one line; the rank's
    own phase times stay (forward: 8 steps, 19,376,537.6 ns per step)."""
    outputs = {}
    for fmt in ("csv", "json", "table"):
        result = runner.invoke(app, ["ranks", str(cpu_export), "--format", fmt], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "Imbalance" not in result.stdout and "Straggler" not in result.stdout
        assert " ".join(result.output.split()).count(ONE_RANK) == 1, result.output  # the table's: after it
        outputs[fmt] = result.stdout
    assert outputs["csv"].splitlines()[0] == "# Phase time per rank"
    doc = json.loads(outputs["json"])
    assert list(doc) == ["Phase time per rank", "GPU and communication per rank"]
    forward = next(r for r in doc["Phase time per rank"] if r["Phase"] == "forward")
    assert (forward["Rank"], forward["Steps"], forward["Mean (ns)"]) == (0, 8, 19_376_537.6)
    assert "19.377" in outputs["table"] and "1.000" not in outputs["table"]


def test_imbalance_of_one_rank_is_an_empty_table_with_its_columns() -> None:
    """Store-shaped rows of one rank (a run of one process): no row compares it with itself."""
    rows = [(0, p, s, d) for s in range(3) for p, d in (("forward", 10_000_000), ("backward", 20_000_000))]
    frame = pd.DataFrame(rows, columns=["rank", "phase", "step", "duration_ns"])
    table = imbalance_table(frame)
    assert table.empty and list(table.columns) == [
        "Phase", "Ranks", "Mean (ns)", "Fastest Rank", "Fastest (ns)", "Median (ns)", "Slowest Rank",
        "Slowest (ns)", "Spread (ns)", "Imbalance",
    ]  # fmt: skip
    assert one_rank_note(frame) == [ONE_RANK]
    two = pd.concat([frame, frame.assign(rank=1)], ignore_index=True)
    assert one_rank_note(two) == [] and len(imbalance_table(two)) == 2


def test_one_rank_keeps_its_step_time_in_the_phase_table(cpu_export: Path) -> None:
    """With one rank there is no imbalance table, where the step's mean was: the phase table has a `step`
    row. An export's is its NVTX step ranges (36,428,924.1 ns per step, more than the sum of its phases);
    in-process timers' is the sum of the step's phases (with_step_rows, as a stored run's). Several ranks
    keep it in the imbalance table; a capture without phase ranges has no step to show."""
    result = runner.invoke(app, ["ranks", str(cpu_export), "--format", "json"])
    assert result.exit_code == 0, result.output
    step = [r for r in json.loads(result.stdout)["Phase time per rank"] if r["Phase"] == "step"]
    assert [(r["Rank"], r["Steps"], r["Mean (ns)"]) for r in step] == [(0, 8, 36_428_924.1)]
    rows = [(0, p, s, d) for s in range(3) for p, d in (("forward", 10_000_000), ("backward", 20_000_000))]
    frame = pd.DataFrame(rows, columns=["rank", "phase", "step", "duration_ns"])
    table = phase_table(with_step_rows(frame)).set_index("Phase")
    assert list(table.index) == ["forward", "backward", "step"]
    assert (table.loc["step", "Steps"], table.loc["step", "Mean (ns)"]) == (3, 30_000_000.0)
    two = phase_table(with_step_rows(pd.concat([frame, frame.assign(rank=1)], ignore_index=True)))
    assert "step" not in set(two["Phase"]) and len(two) == 4


def test_a_page_that_cannot_be_written_is_one_line_naming_why(two_ranks: list[Path], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    out = blocker / "ranks.html"
    result = runner.invoke(app, ["ranks", str(two_ranks[0].parent), "--html", str(out), "--format", "csv"])
    assert result.exit_code == 2  # refused before any work, as a usage error
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: cannot write {out}: {blocker} is a file, not a folder; pass --html to a writable path"
    )
    assert blocker.read_text() == "in the way"


def test_cli_refuses_duplicate_ranks(two_ranks: list[Path], tmp_path: Path) -> None:
    other = distinct_copy(two_ranks[0], tmp_path / "job.rank0.sqlite")
    result = runner.invoke(app, ["ranks", str(two_ranks[0]), str(other)])
    assert result.exit_code == 1 and "rank 0 is given twice" in result.stderr


def test_ranks_tells_a_missing_export_from_an_unknown_run(tmp_path: Path, tmp_db: str) -> None:
    from harness.cli.ranks import _is_run_id

    assert _is_run_id(Path("tiny-20261123-182010-3495")) and _is_run_id(Path("latest"))
    assert not _is_run_id(Path("missing.rank0.sqlite")) and not _is_run_id(Path("runs/x"))
    missing = CliRunner().invoke(app, ["ranks", str(tmp_path / "missing.rank0.sqlite")])
    assert missing.exit_code != 0 and "no such export" in missing.output
    unknown = CliRunner().invoke(app, ["ranks", "tiny-nope"])
    assert unknown.exit_code != 0 and "no results database at" in unknown.output
    from harness.store.results import ResultsStore

    ResultsStore(tmp_db).count_runs()  # an empty database
    unknown = CliRunner().invoke(app, ["ranks", "tiny-nope"])
    assert unknown.exit_code != 0 and "no run with id 'tiny-nope'" in unknown.output


def test_nccl_share_is_empty_when_the_gpu_was_never_busy() -> None:
    gpu = pd.DataFrame(
        [{"rank": 0, "kernels": 0, "gpu_busy_ns": 0, "comm_kernels": 0, "comm_ns": 0, "note": ""},
         {"rank": 1, "kernels": 4, "gpu_busy_ns": 8_000_000, "comm_kernels": 1, "comm_ns": 2_000_000,
          "note": ""}]
    )  # fmt: skip
    table = gpu_table(gpu)
    assert pd.isna(table["NCCL Share (%)"].iloc[0]) and table["NCCL Share (%)"].iloc[1] == 25.0
    assert table["GPU Busy (ns)"].tolist() == [0, 8_000_000]


def test_exports_without_harness_phases_give_gpu_and_nccl_per_rank(a100_export: Path, tmp_path: Path) -> None:
    """Third-party exports (no forward/backward/... ranges): the whole capture per rank, said in one line."""
    torchrun = a100_export.parents[1] / "ext" / "torchrun_2gpu" / "report.sqlite"
    shutil.copy(a100_export, tmp_path / "rank0.sqlite")
    shutil.copy(torchrun, tmp_path / "rank1.sqlite")
    result = runner.invoke(app, ["ranks", str(tmp_path)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "note: no harness phase ranges in any export: the whole capture, first kernel to last" in said
    gpu = pd.read_csv(io.StringIO(_csv_table(tmp_path, "GPU and communication per rank"))).set_index("Rank")
    assert gpu["GPU Busy (ns)"].tolist() == pytest.approx([88.573e6, 285.206e6], abs=1e3)
    assert gpu["NCCL Kernels"].tolist() == [0, 66]
    assert gpu.loc[1, "NCCL Time (ns)"] == pytest.approx(25.402e6, abs=1e3)
    times = pd.read_csv(io.StringIO(_csv_table(tmp_path, "Phase time per rank"))).set_index("Rank")
    assert times["Phase"].tolist() == ["capture", "capture"]
    assert times.loc[0, "Total (ns)"] == pytest.approx(1040.574e6, abs=1e3)


def _csv_table(folder: Path, title: str) -> str:
    out = runner.invoke(app, ["ranks", str(folder), "--format", "csv"]).stdout
    block = next(b for b in out.split("\n\n") if b.startswith(f"# {title}"))
    return block.split("\n", 1)[1]


def test_straggler_panel_draws_what_harness_ranks_reports(two_ranks: list[Path]) -> None:
    """The page's straggler panel is `harness ranks`' straggler table: per rank a compute bar and a wait bar
    (ms per step, the table's values), the straggler named on its bar and in the title, and no axis that
    still says "straggler ratio" (the slowest rank in a collective is its victim)."""
    from analysis.dashboard import DashboardData
    from analysis.dashboard.ranks import (
        COMPUTE_TRACE,
        STRAGGLER_AXIS,
        WAIT_TRACE,
        rank_heatmap_panel,
        rank_straggler_panel,
    )

    report = ranks_report(two_ranks, jobs=2)
    data = DashboardData(ranks=report.phases)
    panel = rank_straggler_panel(data)
    table = report.stragglers
    fig = panel.figure
    assert fig is not None and panel.title.startswith("Straggler: rank 1 arrives last")
    assert [t.name for t in fig.data] == [COMPUTE_TRACE, WAIT_TRACE]
    assert (
        fig.layout.xaxis.title.text
        == STRAGGLER_AXIS
        == "ms per step (mean): compute, then the wait in collectives"
    )
    compute, wait = fig.data
    assert list(compute.y) == ["rank 0", "rank 1 (straggler)"]
    assert list(compute.x) == (table["Compute (ns)"] / 1e6).tolist()  # the table's ns drawn in ms
    assert list(wait.x) == (table["Wait (ns)"] / 1e6).tolist()
    cost = table.set_index("Rank").loc[1, "Costs Others (ns)"]
    assert list(wait.text) == ["", f"costs the others {cost / 1e6:,.3f} ms"]
    assert panel.notes == [straggler_note(table)]
    heat = rank_heatmap_panel(data).figure
    assert heat is not None and "ratio" not in (heat.layout.xaxis.title.text or "")
    assert list(heat.data[0].x) == ["forward", "backward", "allreduce", "step"]


PHASE_SQL = (
    "SELECT COALESCE(e.text, s.value) AS name, COUNT(*), AVG(e.end - e.start), SUM(e.end - e.start), "
    "MIN(e.end - e.start), MAX(e.end - e.start) FROM NVTX_EVENTS e "
    "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 "
    "AND COALESCE(e.text, s.value) IN ('forward', 'backward', 'optimizer') GROUP BY name"
)


def test_csv_and_json_carry_the_exports_nanoseconds_the_terminal_shows_in_ms(cpu_export: Path) -> None:
    """Nanoseconds in data, milliseconds for people: `harness ranks -f csv` and `-f json` give each phase's
    steps, mean, total, min and max in ns, equal to those of the export's NVTX ranges written in SQL (the
    cpu-train capture: 8 steps, forward 19,376,537.625 ns on average, kept to one decimal as nsys's Avg);
    the terminal table shows the same times in ms."""
    want = {name: rest for name, *rest in query_rows(cpu_export, PHASE_SQL)}
    assert want["forward"] == [8, 19_376_537.625, 155_012_301, 3_900_359, 120_291_299]
    csv = runner.invoke(app, ["ranks", str(cpu_export), "--format", "csv"])
    listed = runner.invoke(app, ["ranks", str(cpu_export), "--format", "json"])
    assert csv.exit_code == 0 and listed.exit_code == 0, csv.output + listed.output
    blocks = {b.split("\n", 1)[0]: b.split("\n", 1)[1] for b in csv.stdout.strip().split("\n\n")}
    doc = json.loads(listed.stdout)
    as_csv = pd.read_csv(io.StringIO(blocks["# Phase time per rank"]))
    for rows in (as_csv, pd.DataFrame(doc["Phase time per rank"])):
        got = rows.set_index("Phase")
        assert list(got.columns) == ["Rank", "Steps", "Mean (ns)", "Total (ns)", "Min (ns)", "Max (ns)"]
        for name, (count, mean, total, low, high) in want.items():
            assert got.loc[name, "Steps"] == count
            assert got.loc[name, "Mean (ns)"] == pytest.approx(mean, abs=0.05)
            assert (got.loc[name, "Total (ns)"], got.loc[name, "Min (ns)"], got.loc[name, "Max (ns)"]) == (
                total,
                low,
                high,
            )
    assert doc["GPU and communication per rank"][0]["GPU Busy (ns)"] is None  # CUDA not traced: no number
    headers = [h for b in blocks.values() for h in b.split("\n", 1)[0].split(",")]
    headers += [k for rows in doc.values() for row in rows for k in row]
    assert not [h for h in headers if h.endswith("(ms)")] and "Mean (ns)" in headers
    table = runner.invoke(app, ["ranks", str(cpu_export), "--wide"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "(ns)" not in table.stdout and "(ms)" in table.stdout
    forward = next(line for line in table.stdout.splitlines() if "forward" in line and "155.012" in line)
    cells = [c.strip() for c in forward.split("│")[1:-1]]
    assert cells == ["0", "forward", "8", "19.377", "155.012", "3.900", "120.291"]
