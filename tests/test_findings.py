"""`harness advise`: each rule fires on a real trace with the time at stake from that trace's numbers, and
stays silent on one where it must."""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import CPU_DIR, need
from export_data import derive
from kineto_data import expected, trace_path
from typer.testing import CliRunner

from analysis.advice.findings import Thresholds, findings, phase_of
from analysis.errors import OptionsError
from analysis.hta.hta_rules import hta_view
from analysis.trace.opening import open_trace
from analysis.trace.trace import Trace
from harness.cli import app

runner = CliRunner()
ALWAYS = Thresholds(host_wait_share=0.0)


@pytest.fixture(scope="module")
def nccl() -> Trace:
    return open_trace(trace_path("nccl"))


def _rule(found, rule: str):  # type: ignore[no-untyped-def]
    hits = [f for f in found if f.rule == rule]
    return hits[0] if hits else None


def _ranges(trace: Trace, phase: str) -> pd.DataFrame:
    nv = trace.frame("nvtx", ["start", "end", "name"])
    return nv[nv["name"].astype(str) == f"## {phase} ##"]


def _gpu_union(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    ev = pd.concat([trace.frame(f, ["start", "end"]) for f in ("kernels", "memcpy", "memset")])
    ev = ev.sort_values("start")
    spans: list[list[int]] = []
    for s, e in zip(ev["start"], ev["end"], strict=True):
        if spans and s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], e)
        else:
            spans.append([s, e])
    arr = np.array(spans)
    return arr[:, 0], arr[:, 1]


def _idle_in(trace: Trace, ranges: pd.DataFrame) -> int:
    """Wall time of `ranges` minus the GPU's busy time inside them."""
    us, ue = _gpu_union(trace)
    pairs = zip(ranges["start"], ranges["end"], strict=True)
    busy = sum(int((np.clip(ue, s, e) - np.clip(us, s, e)).sum()) for s, e in pairs)
    return int((ranges["end"] - ranges["start"]).sum()) - busy


@pytest.mark.parametrize("fixture", ["alexnet", "nccl", "diff-control", "diff-test"])
def test_host_wait_split_equals_hta(fixture: str) -> None:
    """The finding's idle split (host-wait / kernel-wait / other per stream) is HTA's idle_time_breakdown."""
    found = _rule(findings(hta_view(open_trace(trace_path(fixture))), ALWAYS), "gpu-host-wait")
    ours = found.table.sort_values(["Rank", "Stream", "Idle Category"], ignore_index=True)
    theirs = expected(fixture, "idle_time_breakdown").sort_values(["rank", "stream", "idle_category"])
    assert ours[["Rank", "Stream", "Idle Category"]].values.tolist() == theirs.iloc[:, :3].values.tolist()
    assert ours["Idle Time (ns)"].tolist() == [round(v * 1000) for v in theirs["idle_time"]]


def test_host_wait_fires_on_nccl(nccl: Trace) -> None:
    """Stream 7 (the compute stream) waits for the host 540.091 ms of a 660.551 ms GPU span; with HTA's
    rules (last step dropped, µs rounded inward) 357.247 ms, HTA's own figure."""
    found = _rule(findings(nccl), "gpu-host-wait")
    assert found.at_stake_ns == 540_091_317
    assert found.evidence.startswith("stream 7 (the busiest: 118.309 ms of GPU work in a 660.551 ms span)")
    assert found.where == "forward 47%, backward 45%, optimizer 7%; steps 4–6"
    hta = expected("nccl", "idle_time_breakdown")
    their = hta[(hta["stream"] == 7) & (hta["idle_category"] == "host_wait")]["idle_time"].item()
    assert _rule(findings(hta_view(nccl)), "gpu-host-wait").at_stake_ns == round(their * 1000) == 357_247_000


def test_host_wait_computes_the_idle_intervals_once(nccl: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gpu-host-wait rule computed every stream's idle intervals twice (for its idle time table, then
    for the gaps it splits by phase): once now, and its table is still idle_time_breakdown's."""
    from analysis.hta import breakdown

    computed: list[int] = []
    launch_start = breakdown._launch_start  # one call per computation of a trace's idle intervals
    monkeypatch.setattr(
        breakdown, "_launch_start", lambda trace, ev: computed.append(len(ev)) or launch_start(trace, ev)
    )
    found = _rule(findings(nccl), "gpu-host-wait")
    assert computed == [3_774]  # nccl's kernels, copies and sets (2,700 + 960 + 114)
    assert found.at_stake_ns == 540_091_317
    pd.testing.assert_frame_equal(found.table, breakdown.idle_time_breakdown(nccl))


def test_host_wait_silent_on_diff_test() -> None:
    """diff-test's compute stream waits for the host 2.960 ms of a 745.239 ms span: below 10%."""
    trace = open_trace(trace_path("diff-test"))
    assert _rule(findings(trace), "gpu-host-wait") is None
    assert _rule(findings(trace, ALWAYS), "gpu-host-wait").at_stake_ns == 2_960_000


def test_host_sync_fires_on_nccl(nccl: Trace) -> None:
    calls = nccl.frame("runtime", ["start", "end", "name_id"])
    calls = calls[calls["name_id"].map(nccl.strings(calls["name_id"].unique())) == "cudaEventSynchronize"]
    nv = nccl.frame("nvtx", ["start", "end", "name"])
    steps = nv[nv["name"].astype(str).str.startswith("ProfilerStep#")]
    inside = np.zeros(len(calls), dtype=bool)
    for s, e in zip(steps["start"], steps["end"], strict=True):
        inside |= (calls["start"] >= s).to_numpy() & (calls["start"] < e).to_numpy()
    want = int((calls["end"] - calls["start"])[inside].sum())
    found = _rule(findings(nccl), "host-sync")
    assert (int(inside.sum()), found.at_stake_ns) == (24, want) == (24, 78_736)
    assert found.evidence.startswith("24 blocking calls in 3 steps (24 cudaEventSynchronize)")
    assert found.where == "forward 100%; steps 4–6"


def test_host_sync_silent_without_steps() -> None:
    """alexnet makes 21 synchronising calls, but has no steps to be inside of."""
    trace = open_trace(trace_path("alexnet"))
    calls = trace.frame("runtime", ["name_id"])
    names = calls["name_id"].map(trace.strings(calls["name_id"].unique()))
    assert names.str.endswith("Synchronize").sum() == 21
    assert _rule(findings(trace), "host-sync") is None


def test_launch_bound_silent_on_nccl_and_fires_with_a_lower_threshold(nccl: Trace) -> None:
    """nccl's forward keeps the GPU busy 13% of its time but launches take only 4% of it: the host is busy
    elsewhere, not launch-bound. Asked to fire from 3% of launch time, the time at stake is the forward
    ranges' time the GPU is idle."""
    assert _rule(findings(nccl), "launch-bound") is None
    found = [f for f in findings(nccl, Thresholds(launch_share_above=0.03)) if f.rule == "launch-bound"]
    forward = next(f for f in found if f.where.startswith("forward"))
    assert forward.at_stake_ns == _idle_in(nccl, _ranges(nccl, "forward")) == 270_812_205
    assert "GPU busy 38.768 ms (13%)" in forward.evidence and "take 13.592 ms (4%)" in forward.evidence


def test_optimizer_loop_silent_on_nccl_and_fires_with_lower_thresholds(nccl: Trace) -> None:
    """nccl's SGD runs 9 kernels a step (median 70 µs): already multi-tensor. From 5 kernels under 100 µs
    the rule fires, with the optimizer ranges' GPU idle time at stake."""
    assert _rule(findings(nccl), "optimizer-loop") is None
    found = _rule(
        findings(nccl, Thresholds(optimizer_kernels=5, optimizer_median_ns=100_000)),
        "optimizer-loop",
    )
    assert found.at_stake_ns == _idle_in(nccl, _ranges(nccl, "optimizer")) == 42_427_323
    assert found.evidence.startswith("3 optimizer steps launch 9 kernels each, median 69.9 µs")


def test_phase_names() -> None:
    assert [phase_of(n) for n in ("forward", "## backward ##", "Optimizer.step#SGD.step", "decode")] == [
        "forward",
        "backward",
        None,
        "decode",
    ]


def test_advise_cli_ranks_by_time_at_stake() -> None:
    result = runner.invoke(app, ["advise", str(trace_path("nccl")), "--format", "csv"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(io.StringIO(result.stdout))
    assert table.columns.tolist() == ["Rule", "Time at stake (ns)", "Where", "Evidence", "Fix", "Data"]
    assert table["Rule"].tolist() == ["gpu-host-wait", "host-sync"]
    assert json.loads(table["Data"][1])["calls"] == [
        {"name": "cudaEventSynchronize", "calls": 24, "time (ns)": 78_736}
    ]
    assert table["Time at stake (ns)"].tolist() == [540_091_317, 78_736]


def test_advise_cli_no_findings_on_a_cpu_capture() -> None:
    from conftest import CPU_DIR

    result = runner.invoke(app, ["advise", str(CPU_DIR / "report.sqlite"), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert "no findings" in result.stderr


def test_nsys_overhead_in_phase_silent_on_cpu_train_and_fires_from_one_percent() -> None:
    """cpu-train: nsys's OS runtime initialisation puts 2.685 ms of its own work inside the forward ranges,
    1.7% of their 155.012 ms: under the 2% default; from 1% on it is a finding."""
    from conftest import CPU_DIR

    trace = open_trace(CPU_DIR / "report.sqlite")
    assert _rule(findings(trace), "nsys-overhead-in-phase") is None
    found = _rule(findings(trace, Thresholds(overhead_share=0.01)), "nsys-overhead-in-phase")
    table = found.table.set_index("Phase")
    assert found.at_stake_ns == table.loc["forward", "Overhead (ns)"]
    assert found.at_stake_ns // 1000 == 2_685  # µs
    assert found.where == "forward 100%"
    assert table.loc["forward", "Phase time (ns)"] // 1_000_000 == 155


def test_nsys_overhead_in_phase_at_a_zero_threshold_names_only_phases_holding_some(tmp_path: Path) -> None:
    """`-t overhead_share=0` asks for every share of nsys's own time: a phase with none of it is no finding
    (cpu-train's backward and optimizer hold 0 ns), and a capture with none in any phase (a CPU generate
    run's, here cpu-train without the overhead inside its ranges) has no finding at all, where it divided by
    the nothing at stake."""
    zero = Thresholds(overhead_share=0.0)
    trace = open_trace(CPU_DIR / "report.sqlite")
    found = _rule(findings(trace, zero), "nsys-overhead-in-phase")
    assert found.where == "forward 100%"
    assert list(found.data) == ["forward"]
    assert found.at_stake_ns // 1000 == 2_685
    export = tmp_path / "none-inside.sqlite"
    shutil.copyfile(CPU_DIR / "report.sqlite", export)
    with sqlite3.connect(export) as con:
        con.execute(
            "DELETE FROM PROFILER_OVERHEAD AS o WHERE EXISTS (SELECT 1 FROM NVTX_EVENTS n"
            ' WHERE n."end" IS NOT NULL AND n.start < o."end" AND n."end" > o.start)'
        )
        assert con.execute("SELECT COUNT(*) FROM PROFILER_OVERHEAD").fetchone()[0] > 0
    con.close()
    with open_trace(export, cache=False) as none_inside:
        assert _rule(findings(none_inside, zero), "nsys-overhead-in-phase") is None


def test_thresholds_from_the_command_line() -> None:
    """--threshold changes when a rule fires; the thresholds in force are stated; a bad one is one line."""
    path = str(trace_path("nccl"))
    result = runner.invoke(app, ["advise", path, "-t", "launch_share_above=0.03", "--format", "csv"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(io.StringIO(result.stdout))
    assert table["Rule"].tolist()[:3] == ["gpu-host-wait", "launch-bound", "launch-bound"]
    assert table["Time at stake (ns)"].tolist()[1] == 270_812_205
    assert "launch_share_above=0.03" in result.stderr and "host_wait_share=0.1" in result.stderr
    bad = runner.invoke(app, ["advise", path, "-t", "host_wait=0.2"])
    assert bad.exit_code != 0 and "threshold 'host_wait=0.2': use NAME=VALUE" in bad.stderr
    assert "Traceback" not in bad.output
    # nan compares false with every share, so `stake < nan * steps` never silenced a rule: refused, as a
    # negative one is; inf (a rule that never fires) stands
    for value in ("nan", "-0.5"):
        refused = runner.invoke(app, ["advise", path, "-t", f"data_loading_share={value}", "--format", "csv"])
        assert refused.exit_code != 0 and refused.stdout == ""
        assert f"threshold data_loading_share takes a number, 0 or more, not '{value}'" in refused.stderr
    never = runner.invoke(app, ["advise", path, "-t", "host_wait_share=inf", "--format", "csv"])
    assert never.exit_code == 0 and "gpu-host-wait" not in never.stdout


def test_a_share_threshold_above_one_is_refused() -> None:
    """A share written as a percent (host_wait_share=10 for 10%) would never let its rule fire (or, for a
    `_below` one, fire it whatever it saw): refused, a usage error, naming the range and what it reads as;
    thresholds that are not shares take any number, 0 or more."""
    path = str(trace_path("nccl"))
    refused = runner.invoke(app, ["advise", path, "-t", "host_wait_share=10", "--format", "csv"])
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.strip() == (
        "error: threshold host_wait_share is a share, 0 to 1 (0.1 is 10%), not '10': that reads as 1000%"
    )
    shares = [f.name for f in fields(Thresholds) if "share" in f.metadata]
    assert shares == [
        "host_wait_share",
        "launch_busy_below",
        "launch_share_above",
        "optimizer_roof_below",
        "overhead_share",
        "data_loading_share",
        "exposed_comm_share",
        "fp32_gemm_share",
    ]
    for name in shares:
        with pytest.raises(OptionsError, match=rf"^threshold {name} is a share, 0 to 1 .*'1.5': .* 150%$"):
            Thresholds().with_options([f"{name}=1.5"])
        assert getattr(Thresholds().with_options([f"{name}=1"]), name) == 1
    for name in ("launch_busy_below", "optimizer_roof_below"):  # inf would fire these whatever they see
        with pytest.raises(OptionsError, match=r"not 'inf'$"):
            Thresholds().with_options([f"{name}=inf"])
    others = Thresholds().with_options(["syncs_per_step=10", "copies_per_step=3", "optimizer_kernels=200"])
    assert (others.syncs_per_step, others.copies_per_step, others.optimizer_kernels) == (10, 3, 200)
    fired = runner.invoke(app, ["advise", path, "-t", "host_wait_share=0.1", "--format", "csv"])
    assert fired.exit_code == 0 and "gpu-host-wait" in fired.stdout


def test_several_rules_as_json() -> None:
    from conftest import A100_DIR

    args = [
        "advise",
        str(A100_DIR / "report.sqlite"),
        "-r",
        "cuda-sync-memcpy:rows=3",
        "-r",
        "gpu-starv:gap=1",
    ]
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    oracle = pd.read_csv(A100_DIR / "expected" / "analyze" / "cuda-sync-memcpy.csv")
    assert [r["Duration (ns)"] for r in doc["cuda-sync-memcpy:rows=3"]] == oracle["Duration (ns)"][
        :3
    ].tolist()
    assert [r["API Name"] for r in doc["cuda-sync-memcpy:rows=3"]] == [
        "cudaMemcpy",
        "cudaMemcpy_v3020",
        "cudaMemcpy",
    ]
    assert [r["Row#"] for r in doc["gpu-starv:gap=1"]] == [1, 2, 3, 4]


def test_data_loader_and_host_gap_silent_on_diff_control_and_fire_from_a_lower_share() -> None:
    """diff-control's loader (enumerate(DataLoader), 6 ranges, inside its steps) holds the GPU idle 0.420 ms
    and the gaps between its 6 steps 0.178 ms, of 465 ms of steps: far under 5%. From 0.01% each is a
    finding with its own time at stake: the loader's ranges a data loader's, the gaps (no loader in them) a
    host gap, never "data loading"."""
    trace = open_trace(trace_path("diff-control"))
    assert {f.rule for f in findings(trace)} & {"data-loader", "host-gap"} == set()
    nv = trace.frame("nvtx", ["start", "end", "name"])
    names = nv["name"].astype(str)
    loads = nv[names.str.startswith("enumerate(DataLoader)")][["start", "end"]]
    steps = nv[names.str.startswith("ProfilerStep#")].sort_values("start")
    gaps = pd.DataFrame({"start": steps["end"].to_numpy()[:-1], "end": steps["start"].to_numpy()[1:]})
    found = findings(trace, Thresholds(data_loading_share=0.0001))
    loader, gap = _rule(found, "data-loader"), _rule(found, "host-gap")
    assert loader.at_stake_ns == _idle_in(trace, loads) == 420_000
    assert loader.evidence.startswith("6 loader ranges (enumerate(DataLoader)#")
    assert gap.at_stake_ns == _idle_in(trace, gaps) == 178_000
    assert gap.evidence.startswith("5 gaps between steps leave the GPU idle 0.178 ms")
    assert "data loading" not in gap.evidence and gap.data["gaps"] == 5


def test_a_loader_on_a_cpu_capture_is_not_said_to_idle_a_gpu(tmp_path: Path) -> None:
    """cpu-train (a CPU run) with a `data` range over the first half of each forward: the loader's whole
    time is at stake, said so, and its fix is not a GPU's (pinned memory, non_blocking copies); the same
    rule on a GPU trace keeps both (diff-control, above)."""
    export = derive(
        need(CPU_DIR / "report.sqlite"),
        tmp_path / "cpu-data.sqlite",
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, domainId, "
        "int64Value) SELECT start, start + (end - start) / 2, eventType, 'data', globalTid, endGlobalTid, "
        "domainId, int64Value FROM NVTX_EVENTS WHERE textId = (SELECT id FROM StringIds WHERE value = "
        "'forward')",
    )
    with open_trace(export, cache=False) as trace:
        loader = _rule(findings(trace), "data-loader")
        data = trace.frame("nvtx", ["start", "end", "name"])
    data = data[data["name"] == "data"]
    assert loader.at_stake_ns == int((data["end"] - data["start"]).sum()) == 77_506_147
    assert loader.evidence.startswith(
        "8 loader ranges (data), 77.506 ms in them (no GPU work in the capture: their whole time)"
    )
    assert "GPU idle" not in loader.evidence
    assert "pin_memory" not in loader.fix and "non_blocking" not in loader.fix
    gap = _rule(findings(open_trace(export, cache=False), Thresholds(data_loading_share=0.0001)), "host-gap")
    assert gap.evidence.startswith("7 gaps between steps take 0.167 ms (no GPU work in the capture) (the 8 ")
    gpu = _rule(
        findings(open_trace(trace_path("diff-control")), Thresholds(data_loading_share=0.0001)), "data-loader"
    )
    assert "with the GPU idle" in gpu.evidence and "pin_memory=True" in gpu.fix


def test_another_programs_loader_workers_are_not_this_programs_loader(tmp_path: Path) -> None:
    """nsys names every process of the machine, another program's DataLoader workers too (pids below the
    program's, started before it): they made the gaps between cpu-train's steps "data loading" in a program
    with no loader. A worker the program forked (a pid above its own, 26286) is its loader's."""

    def with_worker(pid: int) -> Path:
        return derive(
            need(CPU_DIR / "report.sqlite"),
            tmp_path / f"worker-{pid}.sqlite",
            "INSERT INTO StringIds (id, value) VALUES (1000000, 'pt_data_worker')",
            "INSERT INTO ThreadNames (nameId, priority, globalTid) "
            f"VALUES (1000000, 0, {(1 << 48) | (pid << 24) | pid})",
        )

    low = Thresholds(data_loading_share=0.0001)
    with open_trace(with_worker(26200), cache=False) as trace:
        found = findings(trace, low)
    assert "data-loader" not in {f.rule for f in found}
    assert _rule(found, "host-gap").evidence.startswith("7 gaps between steps take 0.167 ms")
    with open_trace(with_worker(26300), cache=False) as trace:
        loader = _rule(findings(trace, low), "data-loader")
    assert loader.evidence.startswith("7 gaps between steps with DataLoader workers alive")
    assert loader.evidence.endswith("; 1 DataLoader threads (pt_data_worker)")


def test_exposed_communication_fires_on_diff_control_and_silent_on_nccl(nccl: Trace) -> None:
    """diff-control: NCCL kernels run 163.535 ms, 87.921 ms of it with no compute kernel beside them, 18.9%
    of the GPU's span: a finding. The share overlapped agrees with comm_comp_overlap (HTA's table).
    nccl: 39.559 ms exposed, 6.0% of its span: under 10%, silent."""
    from analysis.hta.breakdown import comm_comp_overlap

    trace = open_trace(trace_path("diff-control"))
    found = _rule(findings(trace), "exposed-communication")
    assert found.at_stake_ns == 87_921_000
    assert "communication kernels run 163.535 ms, 87.921 ms of it (53.8%)" in found.evidence
    overlap = comm_comp_overlap(trace)["Comm/Comp Overlap (%)"].item()
    assert overlap == round(100 * (163_535_000 - 87_921_000) / 163_535_000, 2)
    assert _rule(findings(nccl), "exposed-communication") is None
    assert _rule(
        findings(nccl, Thresholds(exposed_comm_share=0.05)), "exposed-communication"
    ).at_stake_ns == (39_559_468)
