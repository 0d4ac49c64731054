"""The run's own phases in every view of a capture: phase mode and "Do the phases add up?" of a generate
capture (prefill, decode; tests/data/h100/tiny-generate, built from a real H100 capture by
make_tiny_generate.py) and of the CPU's, the phases read from an export's `step` ranges, a program's own
names in ranks and advice; CUDA-graph replays credited to the range open at their cudaGraphLaunch and
counted once by the projection, as nsys counts them; torch.profiler generate runs alike."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import A100_DIR, SHARED_NSYS, need
from export_data import derive, with_harness_ranges
from typer.testing import CliRunner

from analysis.advice.findings import Thresholds, findings
from analysis.front.examine import Measured, Operators, examine_trace
from analysis.joins.nvtx_ranges import phases_of, step_phases
from analysis.ranks.ranks import phase_rows
from analysis.tables.nvtx_gpu import REPLAYED, nvtx_gpu_projection, nvtx_gpu_summary, phase_check
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "h100"
KINETO_ALEXNET = (
    SHARED_NSYS.parent / "kineto" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
)
MEASURE = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"  # alexnet's measured forward annotation


@pytest.fixture(scope="module")
def captures(h100_captures: dict[str, Path]) -> dict[str, Path]:
    return h100_captures


def gpu_busy_within(events: list[dict], ranges: list[tuple[float, float]]) -> tuple[float, float]:
    """(the union of the GPU's work, kernels and copies and sets, inside each of `ranges`, summed; the ranges'
    summed length), counted straight from a Kineto trace's events."""
    kinds = ("kernel", "gpu_memcpy", "gpu_memset")
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in kinds)
    busy = wall = 0.0
    for lo, hi in ranges:
        reach = lo
        for s, e in gpu:
            s, e = max(s, reach), min(e, hi)
            if e > s:
                busy, reach = busy + e - s, e
        wall += hi - lo
    return busy, wall


def test_the_phases_are_read_from_the_steps_of_the_export(captures: dict[str, Path]) -> None:
    assert step_phases(open_trace(captures["tiny-generate"], cache=False)) == ("prefill", "decode")
    assert step_phases(open_trace(captures["tiny-cupti13"], cache=False)) == (
        "forward",
        "backward",
        "optimizer",
    )
    plain = open_trace(need(A100_DIR / "report.sqlite"), cache=False)
    assert step_phases(plain) == phases_of(plain) == ()  # not the harness's: no phases assumed


def test_phase_mode_of_a_generate_capture_credits_prefill_and_decode(captures: dict[str, Path]) -> None:
    check = phase_check(open_trace(captures["tiny-generate"], cache=False)).set_index("Phase")
    assert list(check.index) == ["prefill", "decode", "unattributed", "all kernels"]
    # the 5 measured steps' 2,420 kernels (of 3,444): prefill 830, decode 1,590, none left over
    assert check["Kernels"].to_dict() == {
        "prefill": 830,
        "decode": 1590,
        "unattributed": 0,
        "all kernels": 2420,
    }
    assert check.loc[["prefill", "decode"], "Kernels"].sum() >= 0.99 * check.loc["all kernels", "Kernels"]
    assert check.loc["decode", "Total Time (ns)"] == 13_603_500
    out = runner.invoke(app, ["nvtx-gpu", str(captures["tiny-generate"]), "--mode", "phase", "--no-cache",
                              "--format", "json"], catch_exceptions=False)  # fmt: skip
    assert out.exit_code == 0, out.output
    tables = list(json.loads(out.stdout).values())
    phases, adds_up = (t for t in tables if isinstance(t, list))
    assert [r["Range"] for r in phases] == ["prefill", "decode"]
    assert [r["Phase"] for r in adds_up] == ["prefill", "decode", "unattributed", "all kernels"]
    # --phases still names them: decode alone leaves prefill's kernels unattributed
    named = phase_check(open_trace(captures["tiny-generate"], cache=False), phases=("decode",)).set_index(
        "Phase"
    )
    assert named.loc["unattributed", "Kernels"] == 830


def test_a_training_capture_keeps_its_phases(captures: dict[str, Path]) -> None:
    check = phase_check(open_trace(captures["tiny-cupti13"], cache=False)).set_index("Phase")
    assert list(check.index) == ["forward", "backward", "optimizer", "unattributed", "all kernels"]
    assert check.loc["unattributed", "Kernels"] == 0 and check.loc["all kernels", "Kernels"] == 2420


def test_replayed_kernels_go_to_the_token_open_at_their_graph_launch(captures: dict[str, Path]) -> None:
    trace = open_trace(captures["tiny-generate"], cache=False)
    per_range = nvtx_gpu_summary(trace, mode="thread", exclusive=True).set_index("Range")
    # every decode kernel of every step, the last step's 318 replayed ones too, is inside a token range
    assert per_range.loc["token", "Kern Inst"] == 2280 and per_range.loc["token", "NVTX Inst"] == 28
    projected = nvtx_gpu_projection(trace)
    last_tokens = projected[projected["Name"] == "token"].tail(4)
    assert last_tokens[REPLAYED].tolist() == [80, 79, 79, 80]
    assert last_tokens["NumGPUOps"].tolist() == [4, 5, 4, 4]  # one graph launch each, and copies and sets
    node = nvtx_gpu_projection(open_trace(captures["selftest-cupti13-node"], cache=False)).set_index("Name")
    assert (node.loc["doctor:graph", "NumGPUOps"], node.loc["doctor:graph", REPLAYED]) == (1, 2)
    assert node.loc["doctor:cublas", REPLAYED] == 0
    thread = nvtx_gpu_summary(open_trace(captures["selftest-cupti13-node"], cache=False), mode="thread")
    assert thread.set_index("Range").loc["doctor:graph", "Kern Inst"] == 2


def test_ranks_and_advice_place_time_in_a_programs_own_phases(tmp_path: Path) -> None:
    """A program's own names nested in its `step` ranges are its phases: `transfer` here (the copies after
    each kernel), where the findings fall."""
    harness = with_harness_ranges(need(A100_DIR / "report.sqlite"), tmp_path / "h.sqlite")
    own = derive(
        harness, tmp_path / "own.sqlite", "UPDATE NVTX_EVENTS SET text = 'transfer' WHERE text = 'backward'"
    )
    trace = open_trace(own, cache=False)
    assert step_phases(trace) == ("forward", "transfer")
    assert set(phase_rows(trace)["phase"]) == {"forward", "transfer", "step"}
    wheres = [f.where for f in findings(trace, Thresholds(host_wait_share=0.0))]
    # the measured steps are 1..4; the copies' blocking calls come first, in `transfer`
    assert wheres[0] == "transfer 100%; steps 1–4", wheres
    assert all(w.startswith("transfer 100%") for w in wheres), wheres


def test_a_torch_trace_of_decode_gives_its_gpu_busy_share(tmp_path: Path) -> None:
    """examine_trace's busy share of `busy_of`'s phases: alexnet's measured forward renamed `decode`."""
    with gzip.open(need(KINETO_ALEXNET)) as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if e.get("name") == MEASURE:
            e["name"] = "decode"
    path = tmp_path / "decode.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    seen = examine_trace(path, Measured(phases=("decode",), busy_of=("decode",)), Operators(5))
    ranges = [(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e.get("name") == "decode"]
    busy, wall = gpu_busy_within(doc["traceEvents"], ranges)
    assert len(ranges) == 2 and 0 < busy < wall
    assert seen.busy["decode"] == pytest.approx(busy / wall, rel=1e-3)


def test_a_phase_is_its_ranges_on_the_cpu_not_their_gpu_copies(tmp_path: Path) -> None:
    """nccl's `## backward ##` ranges as the decode phase: 3 on the CPU and, as on every CUDA trace, 3 GPU
    copies (gpu_user_annotation, on the GPU's timeline). The ranges table said 6 instances and the busy share
    counted the copies' time (0.3735 where the CPU's ranges give 0.3756)."""
    from kineto_data import raw_events, write_trace

    events = raw_events("nccl")
    for e in events:
        if e.get("name") == "## backward ##":
            e["name"] = "decode"
    path = write_trace(tmp_path / "decode.json", events)
    seen = examine_trace(path, Measured(phases=("decode",), busy_of=("decode",)), Operators(5))
    assert seen.nvtx is not None
    assert seen.nvtx.set_index("Range").loc["decode", "Instances"] == 3
    ranges = [(e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("cat") == "user_annotation" and e["name"] == "decode"]  # fmt: skip
    busy, wall = gpu_busy_within(events, ranges)
    assert seen.busy["decode"] == pytest.approx(busy / wall, rel=1e-6) == pytest.approx(0.3756, abs=1e-4)


def _run(tmp: Path, *args: str) -> dict:
    args = (
        "--device",
        "cpu",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--new-tokens",
        "4",
        "--format",
        "json",
        *args,
    )
    out = runner.invoke(app, ["run", "char", "--mode", "generate", *args], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


@pytest.mark.slow
def test_a_cpu_generate_capture_has_prefill_and_decode_everywhere(in_tmp: Path) -> None:
    """`harness run … --mode generate --device cpu --nsys`: its export's phases, ranks and summary are
    prefill and decode, never training's."""
    doc = _run(in_tmp, "--nsys", "--no-nsys-baseline")
    (export,) = (in_tmp / "nsys_profiles").glob("*.sqlite")
    trace = open_trace(export, cache=False)
    assert step_phases(trace) == ("prefill", "decode")
    rows = phase_rows(trace)
    assert set(rows["phase"]) == {"prefill", "decode", "step"} and (rows["phase"] == "decode").sum() == 2
    agreement = next(v for k, v in doc.items() if k.startswith("NVTX vs"))
    assert [r["Phase"] for r in agreement] == ["prefill", "decode"]
    out = runner.invoke(app, ["ranks", str(export), "--format", "json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    phases = [r["Phase"] for r in json.loads(out.stdout)["Phase time per rank"]]
    assert phases == ["prefill", "decode", "step"]
    summary = runner.invoke(app, ["summary", str(export), "--format", "json"], catch_exceptions=False)
    assert "forward" not in summary.output and "optimizer" not in summary.output


@pytest.mark.slow
def test_a_torch_profiler_generate_run_has_its_phases_and_serving_figures(
    tmp_db: str, tmp_path: Path
) -> None:
    doc = _run(tmp_path, "--profiler", "torch", "--profile-dir", str(tmp_path / "prof"))
    serving = {r["metric"]: r["value"] for r in doc["serving (measured steps)"]}
    assert serving["TPOT tokens timed"] == 2 * 3 and serving["TTFT mean (ns)"] > 0
    assert serving["output tokens/s"] > 0
    (trace,) = [Path(r["path"]) for r in doc["files"] if r["kind"] == "trace"]
    with open_trace(trace) as t:
        assert step_phases(t) == ("prefill", "decode")
        rows = phase_rows(t)
    assert set(rows["phase"]) == {"prefill", "decode", "step"}
    assert np.all(rows.loc[rows["phase"] == "decode", "duration_ns"] > 0)
