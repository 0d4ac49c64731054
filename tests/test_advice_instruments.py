"""The harness is never the user's bottleneck: its phase clock's synchronisations (at the edges of its own
phase ranges), its time between steps and its threads are found in its captures, older ones too, left out of
every finding, and said once, apart (analysis.advice.instruments; docs/advice.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import H100_DIR, need
from export_data import derive
from typer.testing import CliRunner

from analysis.advice.findings import advice
from analysis.advice.where import calls
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "h100"
PHASES = "('forward', 'backward', 'optimizer')"


@pytest.fixture(scope="module")
def gpu_exports(h100_captures: dict[str, Path]) -> dict[str, Path]:
    """Every GPU capture of the repository (tests/data/h100, unpacked) and h100-medium of the corpus."""
    return {"h100-medium": need(H100_DIR / "report.sqlite"), **h100_captures}


def _device_syncs(path: Path) -> int:
    with open_trace(path) as trace:
        cs = calls(trace)
        return int((cs["name"] == "cudaDeviceSynchronize").sum())


@pytest.mark.parametrize(("name", "clock", "all_syncs"), [("tiny-cupti13", 42, 42), ("h100-medium", 66, 70)])
def test_the_phase_clocks_synchronisations_are_found(
    gpu_exports: dict[str, Path], name: str, clock: int, all_syncs: int
) -> None:
    """tiny-cupti13: 7 steps × 3 phases × 2 edges, every cudaDeviceSynchronize of the export. h100-medium:
    66 of its 70; the other 4 sit in warm-up steps 3 and 4, whose phase ranges nsys lost (no edge to be at),
    and no finding reads warm-up steps of a harness run."""
    path = gpu_exports[name]
    with open_trace(path) as trace:
        found = advice(trace)
    syncs = found.instruments.syncs
    assert len(syncs) == clock and _device_syncs(path) == all_syncs
    assert sorted(syncs["edge"].value_counts().items()) == [("close", clock // 2), ("open", clock // 2)]
    assert found.instruments.line().startswith(
        f"harness instruments: {clock} synchronisations at its phases'"
    )


@pytest.mark.parametrize(
    "name",
    [
        "h100-medium",
        "tiny-cupti13",
        "tiny-cupti12.4",
        "selftest-cupti12.4",
        "selftest-cupti13-graph",
        "selftest-cupti13-node",
    ],
)
def test_no_finding_counts_the_harness_or_says_data_loading(gpu_exports: dict[str, Path], name: str) -> None:
    """On every GPU capture here no finding counts a cudaDeviceSynchronize of the harness (before:
    h100-medium's "sync-in-step: 70 blocking calls in 14 steps (70 cudaDeviceSynchronize)") and none names
    data loading: no loader ran in any of them."""
    with open_trace(gpu_exports[name]) as trace:
        found = advice(trace).findings
    said = json.dumps([[f.rule, f.evidence, f.fix, f.data] for f in found])
    assert "cudaDeviceSynchronize" not in said
    assert "data loading" not in said.lower() and "DataLoader(" not in said
    assert {f.rule for f in found} & {"host-sync", "data-loader", "host-gap", "sync-in-step"} == set()


def test_the_host_wait_leaves_out_what_the_clock_caused(gpu_exports: dict[str, Path]) -> None:
    """tiny-cupti13: of the GPU's host-wait in the 5 measured steps (105.052 ms), 0.549 ms is the harness's
    and is left out: 0.355 ms follows the clock's synchronisations (each no longer than the wait it made:
    0.599 ms in all), 0.195 ms lies between its steps."""
    with open_trace(gpu_exports["tiny-cupti13"]) as trace:
        found = advice(trace)
    wait = next(f for f in found.findings if f.rule == "gpu-host-wait")
    assert wait.data["idle (ns)"]["host_wait"] == 105_051_846
    assert wait.data["harness's part (ns)"] == 549_237
    assert wait.at_stake_ns == 105_051_846 - 549_237
    assert found.instruments.sync_ns == 598_852 and found.instruments.idle_ns <= found.instruments.sync_ns


def test_a_synchronisation_away_from_the_phase_edges_is_the_programs(
    gpu_exports: dict[str, Path], tmp_path: Path
) -> None:
    """The same capture with its phase ranges opened 1 ms later and closed 1 ms earlier: the clock's
    signature is gone (kernel launches now sit between each synchronisation and the edge), so its 42
    cudaDeviceSynchronize calls are a program's, and host-sync counts the 30 inside its measured steps."""
    src = gpu_exports["tiny-cupti13"]
    moved = derive(
        src,
        tmp_path / "moved.sqlite",
        "UPDATE NVTX_EVENTS SET start = start + 1000000, end = end - 1000000 WHERE textId IN "
        f"(SELECT id FROM StringIds WHERE value IN {PHASES}) OR text IN {PHASES}",
    )
    with open_trace(moved) as trace:
        found = advice(trace)
    assert found.instruments.syncs.empty
    sync = next(f for f in found.findings if f.rule == "host-sync")
    assert sync.data["calls"][0]["name"] == "cudaDeviceSynchronize" and sync.data["calls"][0]["calls"] == 30


def test_advise_says_the_harness_once_apart(gpu_exports: dict[str, Path]) -> None:
    """The table's notes and the json carry the instruments once, apart from the findings."""
    path = str(gpu_exports["tiny-cupti13"])
    shown = runner.invoke(app, ["advise", path], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("harness instruments: 42 synchronisations at its phases' edges") == 1
    doc = json.loads(runner.invoke(app, ["advise", path, "--format", "json"]).stdout)
    assert doc["instruments"]["synchronisations"] == 42
    assert doc["instruments"]["synchronisation calls (ns)"] == 598_852
    assert doc["instruments"]["gaps between steps"] == 6
    assert [f["Rule"] for f in doc["findings"]] == ["gpu-host-wait", "fp32-gemm"]
    assert all(isinstance(f["Data"], dict) and f["Data"] for f in doc["findings"])


def test_generates_token_ranges_are_counted_as_the_harnesss(gpu_exports: dict[str, Path]) -> None:
    """tiny-generate holds 7 steps, each a prefill and a decode of 4 tokens, and the measured range: the 28
    token ranges the harness pushed were left out of its count (22 ranges, not 50)."""
    with open_trace(gpu_exports["tiny-generate"]) as trace:
        found = advice(trace).instruments
    assert found.nvtx_ranges == 7 + 7 + 7 + 28 + 1


def test_the_instruments_line_says_one_gap_and_one_range_in_the_singular() -> None:
    """A capture of one measured step after one warm-up (--nsys-capture measured) holds one gap between
    steps: `1 gap`, not `1 gaps`."""
    import pandas as pd

    from analysis.advice.instruments import Instruments

    def frame(**columns: list[int]) -> pd.DataFrame:
        return pd.DataFrame({k: pd.Series(v, dtype="int64") for k, v in columns.items()})

    none = frame(start=[], end=[], global_tid=[], pid=[])
    between = frame(start=[1_000_000], end=[1_271_000], pid=[7])
    one = Instruments(none, frame(start=[], end=[], pid=[]), between, {7}, {}, 1)
    assert one.line() == (
        "harness instruments: 1 gap between its steps, 0.271 ms; 1 NVTX range; left out of every finding"
    )
    two = Instruments(none, frame(start=[], end=[], pid=[]), pd.concat([between, between]), {7}, {}, 7)
    assert two.line() == (
        "harness instruments: 2 gaps between its steps, 0.542 ms; 7 NVTX ranges; left out of every finding"
    )


def test_a_stored_runs_torch_trace_leaves_the_harnesss_time_between_steps_out(tmp_path: Path) -> None:
    """`run --profiler torch` on the CPU: its trace holds the harness's steps (record_function `step`, with
    generate's phases and tokens) but no `measured` range and no synchronisation, so nothing in it said the
    0.734 ms between its two steps (the step's timers, the profiler's step hook) was the harness's, and
    `advise RUN -t data_loading_share=0` sent the user to find it as a host-gap. Stored with the run's
    timers it is the harness's; the same trace read as a file of unknown origin keeps its gap a finding."""
    from kineto_data import write_trace

    from analysis.advice.base import RunRecord
    from analysis.advice.findings import Thresholds

    def span(name: str, ts: float, dur: float) -> dict:
        return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 13847, "tid": 13847, "ts": ts,
                "dur": dur}  # fmt: skip

    events = []
    # the first event of each step is its ProfilerStep#N; the times are a real trace's, in µs
    for n, (step, prefill, decode, tokens) in enumerate(
        [
            (
                (81898.833, 886487.574),
                (81943.467, 505719.689),
                (587751.28, 380588.901),
                [(587835.427, 140751.844), (728643.997, 169381.847), (898089.783, 70199.874)],
            ),
            (
                (969120.248, 676471.735),
                (969159.23, 440182.695),
                (1409415.863, 236142.046),
                [(1409491.374, 102223.264), (1511774.64, 75631.758), (1587470.929, 58049.3)],
            ),
        ],
        start=1,
    ):
        events.append(span(f"ProfilerStep#{n}", step[0] - 600, step[1] + 650))
        events += [span("step", *step), span("prefill", *prefill), span("decode", *decode)]
        events += [span("token", *t) for t in tokens]
    trace_file = write_trace(tmp_path / "tiny.pt.trace.json", events)
    anything = Thresholds(data_loading_share=0.0)
    with open_trace(trace_file, cache=False) as trace:
        stored = advice(trace, anything, RunRecord(steps=3, measured_steps=2))
        alone = advice(trace, anything)
    assert [f.rule for f in stored.findings] == []
    assert stored.instruments.line() == (  # a torch.profiler trace's ranges are record_function's
        "harness instruments: 1 gap between its steps, 0.734 ms; 12 record_function ranges; left out "
        "of every finding"
    )
    assert [f.rule for f in alone.findings] == ["host-gap"]
    assert alone.findings[0].at_stake_ns == 733_841


def test_a_host_gap_of_one_gap_says_it_in_the_singular(tmp_path: Path) -> None:
    """Two steps have one gap between them: `1 gap between steps takes`, not `1 gaps … take`."""
    from kineto_data import write_trace

    from analysis.advice.findings import Thresholds

    steps = [(0.0, 1000.0), (1500.0, 1000.0)]  # µs: a 0.5 ms gap between two 1 ms steps
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for ts, dur in steps
    ]
    with open_trace(write_trace(tmp_path / "two.pt.trace.json", events), cache=False) as trace:
        (gap,) = advice(trace, Thresholds(data_loading_share=0.0)).findings
    assert gap.rule == "host-gap"
    assert gap.evidence.startswith(
        "1 gap between steps takes 0.500 ms (no GPU work in the capture) (the 2 steps take 2.000 ms)"
    )


def test_a_torch_traces_ranges_are_said_to_be_record_function_ranges(tmp_path: Path) -> None:
    """torch.profiler records record_function ranges, not NVTX ones: the instruments line of its trace said
    `N NVTX ranges`; an nsys export's stay NVTX ranges."""
    from kineto_data import write_trace

    from analysis.advice.base import RunRecord

    events = [
        {"ph": "X", "cat": "user_annotation", "name": name, "pid": 7, "tid": 7, "ts": ts, "dur": 100.0}
        for name, ts in (("step", 0.0), ("forward", 10.0), ("step", 200.0), ("forward", 210.0))
    ]
    trace_file = write_trace(tmp_path / "tiny.pt.trace.json", events)
    with open_trace(trace_file, cache=False) as trace:
        found = advice(trace, run=RunRecord(steps=2, measured_steps=2)).instruments
    assert found.nvtx_ranges == 4 and found.range_kind == "record_function range"
    assert found.line() == (
        "harness instruments: 1 gap between its steps, 0.100 ms; 4 record_function ranges; left out "
        "of every finding"
    )
