"""One capture of a 2-rank torchrun job (analysis.ranks.capture_ranks): the processes that launched kernels
are the
ranks, with GPU busy and NCCL times equal to sums computed here in SQL."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import SHARED_NSYS, need
from export_data import query_rows
from typer.testing import CliRunner

from analysis.ranks.capture_ranks import kernel_processes, one_capture
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()

# union of kernel intervals per process: a new group where a kernel starts after every earlier one ended
BUSY_SQL = """
WITH k AS (SELECT (globalPid >> 24) & 0xFFFFFF AS pid, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL),
r AS (SELECT pid, start, end, MAX(end) OVER (PARTITION BY pid ORDER BY start, end
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach FROM k),
g AS (SELECT pid, start, end, SUM(CASE WHEN reach IS NULL OR start > reach THEN 1 ELSE 0 END)
      OVER (PARTITION BY pid ORDER BY start, end ROWS UNBOUNDED PRECEDING) AS grp FROM r)
SELECT pid, SUM(e - s) FROM (SELECT pid, grp, MIN(start) AS s, MAX(end) AS e FROM g GROUP BY pid, grp)
GROUP BY pid ORDER BY pid
"""
NCCL_SQL = """
SELECT (k.globalPid >> 24) & 0xFFFFFF AS pid, COUNT(*), SUM(k.end - k.start)
FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
WHERE s.value LIKE 'nccl%' GROUP BY pid ORDER BY pid
"""
KERNELS_SQL = """
SELECT (globalPid >> 24) & 0xFFFFFF AS pid, MIN(deviceId), COUNT(*), MIN(start), MAX(end)
FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY pid ORDER BY pid
"""


@pytest.fixture(scope="module")
def capture() -> Path:
    path = SHARED_NSYS / "ext" / "torchrun_2gpu" / "report.sqlite"
    need(path)
    return path


def test_each_process_that_launched_kernels_is_a_rank(capture: Path) -> None:
    procs = kernel_processes(open_trace(capture))
    assert procs.to_dict("records") == [
        {"rank": 0, "pid": 144, "device": 0, "kernels": 1993},
        {"rank": 1, "pid": 145, "device": 1, "kernels": 2017},
    ]
    assert [(p, d, n) for p, d, n, _, _ in query_rows(capture, KERNELS_SQL)] == [
        (144, 0, 1993),
        (145, 1, 2017),
    ]


def test_gpu_busy_and_nccl_per_rank_equal_sql(capture: Path) -> None:
    report = one_capture([capture])
    gpu = report.gpu.sort_values("rank")
    busy = query_rows(capture, BUSY_SQL)
    nccl = query_rows(capture, NCCL_SQL)
    assert busy == [(144, 270_863_484), (145, 264_324_724)]
    assert nccl == [(144, 33, 17_172_652), (145, 33, 8_229_100)]
    assert gpu["gpu_busy_ns"].tolist() == [b for _, b in busy]
    assert gpu["comm_kernels"].tolist() == [n for _, n, _ in nccl]
    assert gpu["comm_ns"].tolist() == [t for _, _, t in nccl]
    table = report.per_rank
    assert table["GPU Busy (ns)"].tolist() == [b for _, b in busy]
    assert table["NCCL Time (ns)"].tolist() == [t for _, _, t in nccl]
    assert report.labels == {0: "PID 144 (device 0)", 1: "PID 145 (device 1)"}


def test_no_phase_ranges_means_the_whole_capture(capture: Path) -> None:
    report = one_capture([capture])
    spans = {pid: end - start for pid, _, _, start, end in query_rows(capture, KERNELS_SQL)}
    phases = report.phases.set_index("rank")
    assert phases["phase"].tolist() == ["capture", "capture"]
    assert phases["duration_ns"].tolist() == [spans[144], spans[145]]
    assert any(n.startswith("no phase ranges") and "whole capture" in n for n in report.notes)


def test_collectives_line_up_by_order(capture: Path) -> None:
    report = one_capture([capture])
    rows = report.collectives
    assert len(rows) == 66 and rows["Collective"].max() == 32
    # wait: the later rank's start minus this rank's, at most its duration; one rank of each waits 0
    first = rows[rows["Collective"] == 0].set_index("Rank")
    sql = query_rows(
        capture,
        "SELECT (k.globalPid >> 24) & 0xFFFFFF, MIN(k.start), MIN(k.end) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'nccl%' GROUP BY 1 ORDER BY 1",
    )
    (_, s0, _), (_, s1, e1) = sql
    assert s0 > s1  # rank 0 arrived last at the first collective
    assert first.loc[1, "Wait (ns)"] == min(s0 - s1, e1 - s1) and first.loc[0, "Wait (ns)"] == 0
    assert bool(first.loc[0, "Last"]) and not bool(first.loc[1, "Last"])
    around = report.around.set_index("Rank")
    assert around["Collectives"].tolist() == [33, 33]
    assert around["NCCL Time (ns)"].tolist() == [17_172_652, 8_229_100]
    assert around["Last to Arrive"].sum() == 33
    assert around["Wait (ns)"].tolist() == rows.groupby("Rank")["Wait (ns)"].sum().tolist()


def test_collective_starts_count_from_the_session_start(capture: Path) -> None:
    """Start (ns) is on the clock of Nsight Systems' timeline, `health` and `timeline --start/--end`: the
    export's own kernel starts (ns from the session's start), not the ranks' first kernel (then 9,094,312
    ns for rank 1's first collective, 60,120,607,425 ns into the session), and a note says which clock."""
    sql = query_rows(
        capture,
        "SELECT (k.globalPid >> 24) & 0xFFFFFF, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'nccl%' ORDER BY 1, 2",
    )
    want = {pid: [t for p, t in sql if p == pid] for pid in (144, 145)}
    assert want[144][:2] == [60_120_634_200, 60_127_005_302] and want[145][0] == 60_120_607_425
    csv = runner.invoke(app, ["ranks", str(capture), "--format", "csv"])
    assert csv.exit_code == 0, csv.output
    blocks = {b.split("\n", 1)[0]: b.split("\n", 1)[1] for b in csv.stdout.strip().split("\n\n")}
    each = pd.read_csv(io.StringIO(blocks["# Each collective on each rank"]))
    for rank, pid in ((0, 144), (1, 145)):
        assert each[each["Rank"] == rank].sort_values("Collective")["Start (ns)"].tolist() == want[pid]
    said = " ".join(csv.stderr.split())
    assert "each collective's Start counts from the session's start" in said
    assert "the session's start" in " ".join(runner.invoke(app, ["ranks", "--help"]).stdout.split())


def test_cli_names_two_ranks(capture: Path) -> None:
    result = runner.invoke(app, ["ranks", str(capture), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    gpu = doc["GPU and communication per rank"]
    assert [(r["Rank"], r["Kernels"], r["GPU Busy (ns)"], r["NCCL Time (ns)"]) for r in gpu] == [
        (0, 1993, 270_863_484, 17_172_652),
        (1, 2017, 264_324_724, 8_229_100),
    ]
    assert "rank 0 = PID 144 (device 0), rank 1 = PID 145 (device 1)" in result.stderr
    table = runner.invoke(app, ["ranks", str(capture)], env={"COLUMNS": "120"})
    assert table.exit_code == 0, table.output
    assert "Around the collectives" in table.stdout
    csv = runner.invoke(app, ["ranks", str(capture), "--format", "csv"])
    blocks = {b.split("\n", 1)[0]: b.split("\n", 1)[1] for b in csv.stdout.strip().split("\n\n")}
    each = pd.read_csv(io.StringIO(blocks["# Each collective on each rank"]))
    assert len(each) == 66  # csv keeps every row


def test_by_rank_splits_one_capture_by_process(capture: Path) -> None:
    kernels = runner.invoke(app, ["kernels", str(capture), "--by-rank", "--format", "csv"])
    assert kernels.exit_code == 0, kernels.output
    table = pd.read_csv(io.StringIO(kernels.stdout))
    per_rank = table.groupby("Rank")[["Total Time (ns)", "Instances"]].sum()
    sql = query_rows(
        capture,
        "SELECT (globalPid >> 24) & 0xFFFFFF, SUM(end - start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "GROUP BY 1 ORDER BY 1",
    )
    assert sql == [(144, 270_875_926, 1993), (145, 264_324_724, 2017)]
    assert per_rank["Total Time (ns)"].tolist() == [270_875_926, 264_324_724]
    assert per_rank["Instances"].tolist() == [1993, 2017]
    api = runner.invoke(app, ["api", str(capture), "--by-rank", "--format", "csv"])
    calls = pd.read_csv(io.StringIO(api.stdout)).set_index(["Rank", "Name"])
    launches = query_rows(
        capture,
        "SELECT (r.globalTid >> 24) & 0xFFFFFF, COUNT(*), SUM(r.end - r.start) "
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value = 'cuLaunchKernelEx' GROUP BY 1 ORDER BY 1",
    )
    assert [(n, t) for _, n, t in launches] == [
        tuple(calls.loc[(r, "cuLaunchKernelEx"), ["Num Calls", "Total Time (ns)"]]) for r in (0, 1)
    ]
    assert sum(n for _, n, _ in launches) == 402
    assert "rank 0 = PID 144 (device 0), rank 1 = PID 145 (device 1)" in api.stderr


def test_by_rank_on_one_process_is_one_line(a100_export: Path) -> None:
    result = runner.invoke(app, ["kernels", str(a100_export), "--by-rank"])
    assert result.exit_code == 1
    assert "--by-rank on one export splits it by the processes that launched kernels" in result.stderr


def test_breakdown_of_one_capture_named_for_a_rank_keeps_each_process_s_rank(
    capture: Path, tmp_path: Path
) -> None:
    """One capture of the 2-rank job, its file named rank0: each process keeps the rank its view records
    (0 and 1, by device), where the file name made both rank 0 and the two were refused as one rank twice."""
    import shutil

    named = tmp_path / "job.rank0.sqlite"
    shutil.copyfile(capture, named)
    tables = []
    for path in (capture, named):
        result = runner.invoke(app, ["breakdown", str(path), "--format", "csv"])
        assert result.exit_code == 0, result.output
        first = result.stdout.split("\n\n")[0].splitlines()
        tables.append(pd.read_csv(io.StringIO("\n".join(first[1:]))))
    assert tables[1]["Rank"].tolist() == [0, 1]
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert tables[1]["Compute Time (ns)"].tolist() == [253_690_832, 256_095_624]


def test_a_narrow_terminal_keeps_each_collective_s_wait_and_last(capture: Path) -> None:
    """ "Each collective on each rank" on 80 columns left out Compute Before, Wait and Last (the figures it
    is for) and kept the NCCL kernel's name, which every row of this capture shares."""
    result = runner.invoke(app, ["ranks", str(capture), "--limit", "0"], env={"COLUMNS": "80", "LINES": "60"})
    assert result.exit_code == 0, result.output
    block = result.stdout.split("Each collective on each rank\n")[1]
    header = " ".join(line for line in block.splitlines()[:5] if line.startswith("┃"))
    for column in ("Collective", "Rank", "Wait", "Last", "Before"):
        assert column in header, header
    first = [c.strip() for c in next(ln for ln in block.splitlines() if ln.startswith("│")).split("│")[1:-1]]
    assert first[:2] == ["0", "0"] and first[-2:] == ["0.000", "yes"]  # rank 0 reached collective 0 last
    assert "left out to fit 80 columns: Start (ms), Duration (ms);" in " ".join(result.output.split())
