"""HTA's breakdown tables against every CSV HTA 0.5.0 computed for every Kineto fixture, cell for cell.

HTA's columns are µs: ours are ns, so theirs × 1000. Values HTA rounds (percentages, ratios, idle-gap
statistics) are compared to the digits it printed. Rows whose order is an artifact of HTA's code (the
streams of the idle-time tables come in the order their first kept event has in the file) are compared
after sorting both by rank, stream and category.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import H100_DIR, need
from export_data import derive
from kineto_data import TRACES, expected, trace_path
from typer.testing import CliRunner

from analysis.hta import breakdown as b
from analysis.hta.gpu_events import kernel_type, merge
from analysis.hta.hta_rules import hta_view
from analysis.trace.opening import open_trace
from analysis.trace.trace import Trace
from harness.cli import app

FIXTURES = list(TRACES)
FULL = {"duration_ratio": 1.0, "num_kernels": 10**9}
runner = CliRunner()


@pytest.fixture(scope="module", params=FIXTURES)
def case(request: pytest.FixtureRequest) -> tuple[str, Trace]:
    """Each fixture opened once for the module, as HTA loads it."""
    return request.param, hta_view(open_trace(trace_path(request.param)))


def ns(us: pd.Series) -> list[int]:
    return (us * 1000).round().astype(np.int64).tolist()


def test_temporal_breakdown(case: tuple[str, Trace]) -> None:
    fixture, trace = case
    ours = b.temporal_breakdown(trace)
    theirs = expected(fixture, "temporal_breakdown")
    assert ours["Rank"].tolist() == theirs["rank"].tolist()
    times = {
        "Idle Time (ns)": "idle_time(us)",
        "Compute Time (ns)": "compute_time(us)",
        "Non-compute Time (ns)": "non_compute_time(us)",
        "Kernel Time (ns)": "kernel_time(us)",
    }
    for col, their in times.items():
        assert ours[col].tolist() == ns(theirs[their]), col
    for col, their in (("Idle (%)", "idle_time_pctg"), ("Compute (%)", "compute_time_pctg"),
                       ("Non-compute (%)", "non_compute_time_pctg")):  # fmt: skip
        assert ours[col].tolist() == theirs[their].tolist(), col
    assert list(ours.columns)[1] == "Idle Time (ns)"  # idle first: where users look first


def test_kernel_type_breakdown(case: tuple[str, Trace]) -> None:
    fixture, trace = case
    ours = b.kernel_type_breakdown(trace)
    theirs = expected(fixture, "kernel_type_breakdown")
    assert ours["Kernel Type"].tolist() == theirs["kernel_type"].tolist()
    assert ours["Total Time (ns)"].tolist() == ns(theirs["sum"])
    assert ours["Time (%)"].tolist() == theirs["percentage"].tolist()


@pytest.mark.parametrize("table", ["kernel_breakdown", "kernel_breakdown_full"])
def test_kernel_breakdown(case: tuple[str, Trace], table: str) -> None:
    """Per type and name, with HTA's folding into `others` (kernel_breakdown) or none (_full)."""
    fixture, trace = case
    ours = b.kernel_breakdown(trace, **(FULL if table.endswith("full") else {}))
    theirs = expected(fixture, table)
    assert ours["Name"].tolist() == theirs["name"].tolist()
    assert ours["Kernel Type"].tolist() == theirs["kernel_type"].tolist()
    assert ours["Rank"].tolist() == theirs["rank"].tolist()
    for col, their in (("Total Time (ns)", "sum (us)"), ("Max (ns)", "max (us)"), ("Min (ns)", "min (us)")):
        assert ours[col].tolist() == ns(theirs[their]), col
    np.testing.assert_allclose(ours["Avg (ns)"] / 1000, theirs["mean (us)"], rtol=1e-12)
    np.testing.assert_allclose(ours["StdDev (ns)"] / 1000, theirs["stddev"], rtol=1e-12, atol=1e-9)


def test_idle_time_breakdown(case: tuple[str, Trace]) -> None:
    fixture, trace = case
    ours = b.idle_time_breakdown(trace).sort_values(["Rank", "Stream", "Idle Category"], ignore_index=True)
    theirs = expected(fixture, "idle_time_breakdown")
    theirs = theirs.sort_values(["rank", "stream", "idle_category"], ignore_index=True)
    assert ours[["Rank", "Stream", "Idle Category"]].values.tolist() == theirs.iloc[:, :3].values.tolist()
    assert ours["Idle Time (ns)"].tolist() == ns(theirs["idle_time"])
    np.testing.assert_allclose(ours["Share (%)"] / 100, theirs["idle_time_ratio"], rtol=0, atol=0.005)


def test_idle_interval_stats(case: tuple[str, Trace]) -> None:
    fixture, trace = case
    ours = b.idle_interval_stats(trace).sort_values(["Rank", "Stream", "Idle Category"], ignore_index=True)
    theirs = expected(fixture, "idle_interval_stats")
    theirs = theirs.sort_values(["rank", "stream", "idle_category"], ignore_index=True)
    assert ours[["Rank", "Stream", "Idle Category"]].values.tolist() == (
        theirs[["rank", "stream", "idle_category"]].values.tolist()
    )
    assert ours["Count"].tolist() == theirs["count"].astype(int).tolist()
    for col, their in (("Avg (ns)", "mean"), ("StdDev (ns)", "std"), ("Min (ns)", "min"), ("25% (ns)", "25%"),
                       ("Med (ns)", "50%"), ("75% (ns)", "75%"), ("Max (ns)", "max")):  # fmt: skip
        np.testing.assert_allclose(ours[col] / 1000, theirs[their], rtol=0, atol=0.005 + 1e-9, err_msg=col)


def test_comm_comp_overlap(case: tuple[str, Trace]) -> None:
    fixture, trace = case
    ours = b.comm_comp_overlap(trace)
    theirs = expected(fixture, "comm_comp_overlap")
    assert ours["Rank"].tolist() == theirs["rank"].tolist()
    np.testing.assert_array_equal(ours["Comm/Comp Overlap (%)"], theirs["comp_comm_overlap_pctg"])


def test_queue_length_summary(case: tuple[str, Trace]) -> None:
    """Counts, extremes and quartiles equal HTA's. Avg and StdDev depend on the order of a launch and a GPU
    start at the same µs, which HTA leaves to an unstable sort (the oracle machine's and this one's
    differ): HTA's values lie between ours with launches first and with GPU starts first."""
    fixture, trace = case
    first = b.queue_length_summary(trace)
    after = b.queue_length_summary(trace, launches_first=False)
    theirs = expected(fixture, "queue_length_summary")
    assert first[["Rank", "Stream"]].values.tolist() == theirs[["rank", "stream"]].values.tolist()
    assert first["Count"].tolist() == theirs["count"].astype(int).tolist()
    for col, their in (("Min", "min"), ("25%", "25%"), ("Med", "50%"), ("75%", "75%"), ("Max", "max")):
        assert first[col].tolist() == theirs[their].tolist() == after[col].tolist(), col
    for col, their in (("Avg", "mean"), ("StdDev", "std")):
        low = np.minimum(first[col], after[col]) - 1e-12
        high = np.maximum(first[col], after[col]) + 1e-12
        assert ((low <= theirs[their]) & (theirs[their] <= high)).all(), col


def test_without_hta_rules_every_event_counts() -> None:
    """The default: exact times, the last step kept. alexnet (integer µs, no steps) is the same either way."""
    alexnet = open_trace(trace_path("alexnet"))
    pd.testing.assert_frame_equal(
        b.temporal_breakdown(alexnet), b.temporal_breakdown(alexnet, hta_rules=True)
    )
    nccl = open_trace(trace_path("nccl"))
    exact, ruled = b.temporal_breakdown(nccl), b.temporal_breakdown(nccl, hta_rules=True)
    assert exact["Kernel Time (ns)"].iloc[0] > ruled["Kernel Time (ns)"].iloc[0]  # step #6 kept
    assert exact["Idle Time (ns)"].iloc[0] % 1000 != 0  # nanoseconds, not rounded µs
    kernels = b.kernel_breakdown(nccl, **FULL)
    assert kernels.loc[kernels["Kernel Type"] != "MEMORY", "Instances"].sum() == 2700
    assert not any("HTA" in n for n in kernels.attrs["notes"])  # the view's notes stay the view's
    assert any("ProfilerStep#6" in n for n in ruled.attrs["notes"])


def test_kernel_types_and_union() -> None:
    assert kernel_type("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)") == "COMMUNICATION"
    assert kernel_type("Memcpy HtoD (Pageable -> Device)") == "MEMORY"
    assert kernel_type("Stream Wait Event") == "COMPUTATION"  # HTA 0.5.0's regex lets it through
    assert kernel_type("Context Sync") == "OTHER" and kernel_type("sgemm") == "COMPUTATION"
    s, e = merge(np.array([5, 0, 10, 12]), np.array([10, 3, 11, 20]))
    assert s.tolist() == [0, 5, 12] and e.tolist() == [3, 11, 20]  # touching intervals merge


def test_breakdown_of_an_nsys_export(a100_export: Path) -> None:
    """Kernels and copies on streams from an nsys export (memory kinds translated to Kineto's names); no
    sync events there. The 5 saxpy kernels never overlap: compute time is their sum."""
    trace = open_trace(a100_export)
    kernels = b.kernel_breakdown(trace, **FULL)
    assert kernels[["Kernel Type", "Name", "Instances"]].values.tolist() == [
        ["COMPUTATION", "saxpy(double *, double *, double *, double, int)", 5],
        ["MEMORY", "Memcpy DtoH (Device -> Pageable)", 5],
        ["MEMORY", "Memcpy HtoD (Pageable -> Device)", 10],
    ]
    temporal = b.temporal_breakdown(trace)
    assert temporal["Compute Time (ns)"].iloc[0] == 88_573_480
    span = temporal["Kernel Time (ns)"].iloc[0]
    assert (
        temporal[["Idle Time (ns)", "Compute Time (ns)", "Non-compute Time (ns)"]].sum(axis=1).iloc[0] == span
    )
    idle = b.idle_time_breakdown(trace)
    assert idle["Idle Time (ns)"].sum() == temporal["Idle Time (ns)"].iloc[0]  # one stream: gaps are idle


def test_breakdown_cli() -> None:
    path = trace_path("diff-control")
    result = runner.invoke(app, ["breakdown", str(path), "--hta", "--format", "csv"])
    assert result.exit_code == 0, result.output
    first = result.stdout.split("\n\n")[0].splitlines()
    assert first[0].startswith("# GPU time per rank") and first[1].startswith("Rank,Idle Time (ns)")
    temporal = pd.read_csv(io.StringIO("\n".join(first[1:])))
    assert temporal["Idle Time (ns)"].tolist() == [62_119_000]
    assert "ProfilerStep#1014" in result.output
    folder = runner.invoke(app, ["breakdown", str(path.parent), "--all", "--format", "json"])
    assert folder.exit_code == 0, folder.output
    assert "Queue length per stream" in folder.stdout and '"Rank":3' in folder.stdout.replace(" ", "")
    empty = runner.invoke(app, ["breakdown", str(path.parent / "expected")])
    assert empty.exit_code == 1 and "no .json or .json.gz traces" in empty.output


def test_breakdown_all_computes_the_idle_intervals_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`breakdown --all` computed each trace's idle intervals twice, once for the idle time table and again
    for the idle gaps' statistics: once now, and both tables are those the two functions give."""
    from harness.cli.terminal.output import to_json

    path = trace_path("nccl")
    computed: list[int] = []
    launch_start = b._launch_start  # one call per computation of a trace's idle intervals
    monkeypatch.setattr(
        b, "_launch_start", lambda trace, ev: computed.append(len(ev)) or launch_start(trace, ev)
    )
    result = runner.invoke(app, ["breakdown", str(path), "--all", "--hta", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(computed) == 1
    doc = json.loads(result.stdout)
    with open_trace(path) as trace:
        idle = b.idle_time_breakdown(trace, hta_rules=True)
        stats = b.idle_interval_stats(trace, hta_rules=True)
    assert doc["Idle time per stream, by cause"] == json.loads(json.dumps(to_json(idle)))
    assert doc["Idle gaps per stream and cause"] == json.loads(json.dumps(to_json(stats)))


def test_default_breakdown_says_how_far_and_why_it_differs_from_hta() -> None:
    """nccl: 503.051 ms idle on the exact trace, 338.781 ms in HTA (its last profiler step dropped)."""
    result = runner.invoke(app, ["breakdown", str(trace_path("nccl"))], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert (
        "note: rank 0: HTA reports 338.781 ms idle, 164.270 ms less than 503.051 ms here, because HTA's "
        "loader changes the trace (the last profiler step (ProfilerStep#6) is left out; times rounded "
        "inward to whole µs); this table keeps every event at its exact time, --hta applies HTA's rules"
    ) in said
    ruled = runner.invoke(app, ["breakdown", str(trace_path("nccl")), "--hta"], env={"COLUMNS": "80"})
    assert "HTA reports" not in ruled.stdout and "338.781" in ruled.stdout
    alexnet = runner.invoke(app, ["breakdown", str(trace_path("alexnet"))], env={"COLUMNS": "80"})
    assert alexnet.exit_code == 0 and "HTA reports" not in alexnet.stdout  # one step, int µs: the same


def test_a_trace_s_own_rank_wins_over_its_file_name(a100_export: Path, tmp_path: Path) -> None:
    """The Kineto trace records rank 3 (distributedInfo.rank): a copy named rank0 is still rank 3. An nsys
    export records none: its file name gives it."""
    import shutil

    kineto = tmp_path / "run.rank0.json.gz"
    shutil.copyfile(trace_path("diff-control"), kineto)
    assert open_trace(trace_path("diff-control")).meta["rank"] == 3
    assert b.temporal_breakdown(open_trace(kineto))["Rank"].tolist() == [3]
    nsys = tmp_path / "saxpy.rank5.sqlite"
    shutil.copyfile(a100_export, nsys)
    assert b.temporal_breakdown(open_trace(nsys))["Rank"].tolist() == [5]
    result = runner.invoke(app, ["breakdown", str(kineto), str(nsys), "--format", "csv"])
    assert result.exit_code == 0, result.output
    first = result.stdout.split("\n\n")[0].splitlines()
    assert pd.read_csv(io.StringIO("\n".join(first[1:])))["Rank"].tolist() == [3, 5]


def test_gpu_event_names_are_every_row_named_then_made_categorical(case: tuple[str, Trace]) -> None:
    """gpu_events builds its names from codes, each name looked up once: the same categorical as naming
    every row and making that categorical (its categories sorted)."""
    from analysis.hta.gpu_events import gpu_events, memcpy_name, memset_name

    _, trace = case
    ev = gpu_events(trace)
    named: list[pd.Series] = []
    for frame in ("kernels", "memcpy", "memset", "syncs"):
        if not trace.has(frame):
            continue
        f = trace.frame(frame)
        if frame in ("kernels", "syncs"):
            named.append(f["name_id"].map(trace.strings(f["name_id"].unique())))
        elif frame == "memcpy":
            keys = zip(f["copy_kind"], f["src_kind"], f["dst_kind"], strict=True)
            named.append(pd.Series([memcpy_name(*k) for k in keys], dtype=object))
        else:
            named.append(f["mem_kind"].map(memset_name))
        named[-1] = named[-1][((f["stream_id"] != b.NULL) & (f["stream_id"] != -1)).to_numpy()]
    rows = pd.concat(named, ignore_index=True).fillna("").astype(str)
    assert ev["name"].astype(str).tolist() == rows.tolist()
    assert len(ev) and list(ev["name"].cat.categories) == sorted(ev["name"].cat.categories)


def test_idle_shares_of_a_stream_idle_for_4e18_ns_stay_shares(tmp_path: Path) -> None:
    """h100-medium's last kernel moved to start at 4e18 ns (within 2**62, so read): its stream is idle for
    4e18 ns before it, and 100 times that wrapped round int64, a share of -1.5%."""
    src = need(H100_DIR / "report.sqlite")
    late = (
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 4000000000000000000, end = 4000000000000001000 WHERE "
        "rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    )
    path = derive(src, tmp_path / "late.sqlite", late)
    table = b.idle_time_breakdown([open_trace(path, cache=False)])
    assert (table["Share (%)"] >= 0).all() and (table["Share (%)"] <= 100).all()
    assert table.groupby("Stream")["Share (%)"].sum().round(6).tolist() == [100.0]
