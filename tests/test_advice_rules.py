"""The rules for planted causes, each on a real capture where it shows (the GPU captures' fp32 GEMMs) and on
copies of them changed by a few SQL statements to hold the cause (pageable and device-to-host copies in the
steps, bf16 GEMMs, attention as softmax kernels), silent where the cause is not; the rules that read a
stored run's record (torch.compile's counters, the optimizer's memory roof); what an export alone cannot
judge; the recorded backtraces."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import CPU_DIR, H100_DIR, SHARED_NSYS, need
from export_data import derive
from reading import flat
from typer.testing import CliRunner

from analysis.advice.findings import OptimizerRoof, RunRecord, Thresholds, advice, findings
from analysis.advice.health import capture_health
from analysis.advice.record import advice_record, findings_lines
from analysis.trace.opening import open_trace
from harness.cli import app

DATA = Path(__file__).parent / "data" / "h100"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
STEP_IDS = "(SELECT id FROM StringIds WHERE value = 'step')"
NEW_CORRELATION = 10_000_000  # above every correlation id of the capture: a copy whose call is not recorded
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(h100_captures: dict[str, Path]) -> Path:
    """`harness run tiny --device cuda` (fp32, 2 warm-up and 5 measured steps) on an H100, nsys 2023.4."""
    return h100_captures["tiny-cupti13"]


def _rule(found, rule: str):  # type: ignore[no-untyped-def]
    return next((f for f in found if f.rule == rule), None)


def _rules(path: Path, **kw) -> list:  # type: ignore[no-untyped-def, type-arg]
    with open_trace(path) as trace:
        return findings(trace, **kw)


def _copies_in_steps(copy_kind: int, src_kind: int, dst_kind: int, size: int) -> str:
    """One copy 1 µs into every step range (of a copy of the first memcpy row), its call not recorded."""
    return (
        f"INSERT INTO {MEMCPY} (start, end, deviceId, contextId, greenContextId, streamId, correlationId, "
        "globalPid, bytes, copyKind, deprecatedSrcId, srcKind, dstKind, srcDeviceId, srcContextId, "
        "dstDeviceId, dstContextId, migrationCause, graphNodeId, virtualAddress) "
        f"SELECT n.start + 1000, n.start + 51000, m.deviceId, m.contextId, m.greenContextId, m.streamId, "
        f"{NEW_CORRELATION} + n.rowid, m.globalPid, {size}, {copy_kind}, m.deprecatedSrcId, {src_kind}, "
        f"{dst_kind}, "
        "m.srcDeviceId, m.srcContextId, m.dstDeviceId, m.dstContextId, m.migrationCause, m.graphNodeId, "
        f"m.virtualAddress FROM NVTX_EVENTS AS n, (SELECT * FROM {MEMCPY} LIMIT 1) AS m "
        f"WHERE n.textId IN {STEP_IDS} OR n.text = 'step'"
    )


def test_fp32_gemms_on_the_gpu_captures(tiny: Path) -> None:
    """Both H100 captures ran fp32 without TF32: cuBLAS's `sm80_xmma_gemm_f32f32_f32f32_f32 … ffma` and
    CUTLASS's `simt_sgemm`. tiny-cupti13: 415 of them in its 5 measured steps, 8.405 ms of their 18.437 ms
    of kernel time; h100-medium: 1,450, 99.559 ms of 492.171 ms (12,210 kernels nsys could not name)."""
    found = _rule(_rules(tiny), "fp32-gemm")
    assert (found.data["fp32 GEMM kernels"], found.at_stake_ns) == (415, 8_404_882)
    assert found.data["kernel time (ns)"] == 18_436_816 and found.data["low-precision GEMM kernels"] == 0
    assert "sm80_xmma_gemm_f32f32_f32f32_f32" in found.data["top"][0]["name"]
    medium = _rule(_rules(need(H100_DIR / "report.sqlite")), "fp32-gemm")
    assert (medium.data["fp32 GEMM kernels"], medium.at_stake_ns) == (1_450, 99_559_276)
    assert medium.data["unnamed kernels"] == 12_210


def test_bf16_gemms_are_not_fp32(tiny: Path, tmp_path: Path) -> None:
    """The same capture with its GEMMs named as bf16 ones (xmma's bf16bf16, CUTLASS's tensor-op s16816)."""
    bf16 = derive(
        tiny,
        tmp_path / "bf16.sqlite",
        "UPDATE StringIds SET value = replace(replace(replace(value, 'f32f32_f32f32_f32', "
        "'bf16bf16_bf16f32_f32'), 'simt_sgemm', 'tensorop_bf16_s16816gemm'), '_ffma_', '_hmma_')",
    )
    assert _rule(_rules(bf16), "fp32-gemm") is None


def test_no_fp32_gemm_without_a_gpu() -> None:
    assert _rule(_rules(need(CPU_DIR / "report.sqlite")), "fp32-gemm") is None


# every kernel of torchrun_2gpu but NCCL's named as a cuBLAS fp32 GEMM (its names, short and full)
AS_SGEMM = (
    "UPDATE StringIds SET value = 'ampere_sgemm_128x64_tn' WHERE id IN (SELECT n FROM (SELECT shortName AS "
    "n, shortName AS s FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT demangledName, shortName FROM "
    "CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT mangledName, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL) "
    "WHERE s NOT IN (SELECT id FROM StringIds WHERE value LIKE 'nccl%'))"
)


def _busy(intervals: list[tuple[int, int]]) -> int:
    """The time covered by `intervals`, overlaps once."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


@pytest.mark.parametrize("one_gpu", [False, True])
def test_fp32_gemm_at_stake_is_one_gpus(tmp_path: Path, one_gpu: bool) -> None:
    """torchrun_2gpu (two processes, one H100 each, 300 ms of kernels) with its kernels named as fp32
    GEMMs: the time at stake summed both GPUs' (509.799 ms, more than the span the kernels ran in). It is
    the GPU with the most, the union of its fp32 GEMMs (counted here), within that GPU's span; with every
    kernel put on one GPU of one process, their streams overlap and count once."""
    src = need(SHARED_NSYS / "ext" / "torchrun_2gpu" / "report.sqlite")
    one = "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 0, globalPid = (SELECT min(globalPid) FROM "
    one += "CUPTI_ACTIVITY_KIND_KERNEL)"
    path = derive(src, tmp_path / "sgemm.sqlite", AS_SGEMM, *([one] if one_gpu else []))
    con = sqlite3.connect(path)
    rows = con.execute(
        "SELECT (k.globalPid >> 24) & 16777215, k.deviceId, k.start, k.end, s.value LIKE '%sgemm%' "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName"
    ).fetchall()
    con.close()
    lanes = {lane: [r[2:] for r in rows if r[:2] == lane] for lane in {r[:2] for r in rows}}
    fp32 = {lane: _busy([(s, e) for s, e, f in rs if f]) for lane, rs in lanes.items()}
    (pid, device), stake = max(fp32.items(), key=lambda kv: kv[1])
    span = max(e for _, e, _ in lanes[(pid, device)]) - min(s for s, _, _ in lanes[(pid, device)])
    found = _rule(_rules(path), "fp32-gemm")
    assert found.at_stake_ns == stake == found.data["fp32 GEMM time (ns)"]
    assert stake <= span < 300_000_000
    if one_gpu:
        assert sum(e - s for s, e, f in lanes[(pid, device)] if f) == 509_798_898  # the sum, over the span
        assert found.evidence.startswith("3,944 fp32 GEMM kernels take ") and "GPUs" not in found.data
    else:
        assert (found.data["process"], found.data["device"], found.data["GPUs"]) == (pid, device, 2)
        assert found.evidence.startswith(
            f"on device {device} of process {pid} (the most fp32 GEMM time of 2 GPUs): 1,984 fp32 GEMM "
        )


def test_math_attention_by_its_kernels(tiny: Path, tmp_path: Path) -> None:
    """tiny ran sdpa (cutlass's fmha kernels): silent. With those kernels named as softmax kernels (forward
    4 a step: one a layer and head group) and no fused attention kernel left, it fires."""
    assert _rule(_rules(tiny), "math-attention") is None
    math = derive(
        tiny,
        tmp_path / "math.sqlite",
        "UPDATE StringIds SET value = CASE WHEN value LIKE 'fmha_cutlassF%' "
        "THEN 'softmax_warp_forward<float>' WHEN value LIKE 'fmha_cutlassB%' "
        "THEN 'softmax_warp_backward<float>' ELSE value END",
    )
    found = _rule(_rules(math), "math-attention")
    assert found.data["softmax kernels"] == 40 and found.data["steps"] == 5  # 4 forward + 4 backward a step


def test_pageable_copies_before_the_steps_are_not_a_finding(tiny: Path) -> None:
    """tiny-cupti13's 29 pageable host-to-device copies load the model before its first step."""
    with sqlite3.connect(f"file:{tiny}?mode=ro", uri=True) as con:
        assert con.execute(
            f"SELECT count(*) FROM {MEMCPY} WHERE copyKind = 1 AND srcKind = 0"
        ).fetchone() == (29,)
    found = _rules(tiny)
    assert _rule(found, "pageable-copy") is None and _rule(found, "d2h-copy") is None


def test_a_pageable_copy_every_step(tiny: Path, tmp_path: Path) -> None:
    """A 1 MB host-to-device copy from pageable memory (nsys's srcKind 0) in each of the 7 steps; the 5
    measured ones count. Pinned (srcKind 1): silent."""
    pageable = derive(tiny, tmp_path / "pageable.sqlite", _copies_in_steps(1, 0, 2, 1 << 20))
    found = _rule(_rules(pageable), "pageable-copy")
    assert (found.data["copies"], found.data["bytes"], found.at_stake_ns) == (5, 5 << 20, 5 * 50_000)
    assert found.where.endswith("steps 2–6")
    pinned = derive(tiny, tmp_path / "pinned.sqlite", _copies_in_steps(1, 1, 2, 1 << 20))
    assert _rule(_rules(pinned), "pageable-copy") is None


def test_a_device_to_host_copy_every_step(tiny: Path, tmp_path: Path) -> None:
    """Logits-sized device-to-host copies in every step fire d2h-copy; a 4-byte one (a loss read by .item())
    does not: that is host-sync's."""
    d2h = derive(tiny, tmp_path / "d2h.sqlite", _copies_in_steps(2, 2, 0, 4 * 64 * 65 * 4))
    found = _rule(_rules(d2h), "d2h-copy")
    assert (found.data["copies"], found.data["largest (bytes)"]) == (5, 4 * 64 * 65 * 4)
    scalar = derive(tiny, tmp_path / "scalar.sqlite", _copies_in_steps(2, 2, 0, 4))
    assert _rule(_rules(scalar), "d2h-copy") is None


def test_recompiles_from_the_runs_record() -> None:
    """cpu-train's 8 steps with torch.compile's counters as a stored run records them: a frame compiled each
    step is a recompile each step, at stake the forward time the record holds; a compile once is not."""
    export = need(CPU_DIR / "report.sqlite")
    every = RunRecord(steps=8, measured_steps=5, dynamo={"frames": 8, "graphs": 8, "graph_breaks": 0},
                      forward_ns=96_000_000.0)  # fmt: skip
    found = _rule(_rules(export, run=every), "recompile")
    assert found.at_stake_ns == 96_000_000 and found.data["dynamo"]["frames"] == 8
    assert found.evidence.startswith("torch.compile compiled 8 frames into 8 graphs in 8 steps")
    once = RunRecord(steps=8, measured_steps=5, dynamo={"frames": 1, "graphs": 1, "graph_breaks": 0})
    assert _rule(_rules(export, run=once), "recompile") is None


def test_recompiles_until_dynamos_limit_from_the_runs_record() -> None:
    """A run longer than Dynamo's recompile limit (8): 8 frames compiled in 15 steps, then Dynamo gave up and
    ran the function eagerly. Fewer frames than steps, yet a compile a step: the limit hits say so."""
    export = need(CPU_DIR / "report.sqlite")
    counters = {"frames": 8, "graphs": 8, "graph_breaks": 0, "recompile_limit_hits": 1}
    limited = RunRecord(steps=15, measured_steps=10, dynamo=counters, forward_ns=50_000_000.0)
    found = _rule(_rules(export, run=limited), "recompile")
    assert found.at_stake_ns == 50_000_000 and found.data["dynamo"]["recompile_limit_hits"] == 1
    assert found.evidence.startswith(
        "torch.compile compiled 8 frames into 8 graphs in 15 steps (0 graph breaks): a compile a step until "
        "Dynamo hit its recompile limit and ran the function eagerly after, in forward"
    )
    unlimited = RunRecord(steps=15, measured_steps=10, dynamo={**counters, "recompile_limit_hits": 0})
    assert _rule(_rules(export, run=unlimited), "recompile") is None


def test_the_optimizer_against_its_memory_roof() -> None:
    """With the run's roofline, the optimizer at 26% of its memory roof (the AdamW step of 2.7B in bf16 on an
    H200) is a finding, its stake the time above what the roof allows over the measured steps; at 60% not."""
    export = need(CPU_DIR / "report.sqlite")
    roof = OptimizerRoof(26.0, 76_000_000.0, 19_760_000.0, 95.4e9, 1255.0, "NVIDIA H200 (datasheet)")
    found = _rule(
        _rules(export, run=RunRecord(steps=8, measured_steps=5, optimizer_roof=roof)), "optimizer-loop"
    )
    assert found.at_stake_ns == 5 * (76_000_000 - 19_760_000)
    assert "26% of its memory roof (NVIDIA H200 (datasheet))" in found.evidence
    fine = OptimizerRoof(60.0, 76_000_000.0, 45_600_000.0, 95.4e9, 1255.0, "NVIDIA H200 (datasheet)")
    assert (
        _rule(_rules(export, run=RunRecord(steps=8, measured_steps=5, optimizer_roof=fine)), "optimizer-loop")
        is None
    )


NO_CUDA_LINE = (
    "gpu-host-wait, host-sync, launch-bound, optimizer-loop, exposed-communication, fp32-gemm, "
    "math-attention, pageable-copy, d2h-copy: read CUDA's kernels, copies and runtime calls, and the capture "
    "holds none: they had nothing to judge"
)


def test_an_export_says_what_it_cannot_judge() -> None:
    """What the export alone cannot judge (the run's record judges it), then (cpu-train traced no CUDA) the
    rules that read CUDA, which had nothing to read with the record or without it."""
    with open_trace(need(CPU_DIR / "report.sqlite")) as trace:
        alone, stored = advice(trace), advice(trace, run=RunRecord(steps=8))
    *needs, cuda = alone.not_judged
    assert [line.split(":")[0] for line in needs] == ["recompile", "optimizer-loop"]
    assert all("`harness advise RUN` judges it" in line for line in needs)
    assert cuda == NO_CUDA_LINE
    assert stored.not_judged == [NO_CUDA_LINE]


def test_a_capture_without_cuda_says_its_gpu_rules_had_nothing_to_read(tmp_path: Path) -> None:
    """cpu-train (NVTX and OS runtime only): "no rule fired" read as a clean GPU, where the rules that read
    CUDA had nothing to read; said in a note. A run's roofline judges optimizer-loop without kernels; a
    capture with CUDA (h100-medium, weatherbench2's runtime calls and memset without a kernel) says
    nothing of it."""
    export = need(CPU_DIR / "report.sqlite")
    result = runner.invoke(app, ["advise", str(export)])
    assert result.exit_code == 0, result.output
    said = flat(result.stderr)
    assert "no findings in report.sqlite: no rule fired" in said
    assert f"note: {NO_CUDA_LINE}" in said
    roof = OptimizerRoof(60.0, 76_000_000.0, 45_600_000.0, 95.4e9, 1255.0, "NVIDIA H200 (datasheet)")
    with open_trace(export) as trace:
        (line,) = advice(trace, run=RunRecord(steps=8, optimizer_roof=roof)).not_judged
    assert line == NO_CUDA_LINE.replace("optimizer-loop, ", "")
    for gpu in (H100_DIR, SHARED_NSYS / "ext" / "weatherbench2"):
        with open_trace(need(gpu / "report.sqlite")) as trace:
            assert not any("capture holds none" in line for line in advice(trace).not_judged)


def test_a_capture_without_steps_says_what_it_could_not_judge() -> None:
    """llama3_realsim (a program's capture, no step ranges): the rules judged in steps had nothing to judge,
    said so ("no rule fired" read as a clean capture); fp32-gemm, judged on every kernel, says it read the
    whole capture, not "the steps"."""
    with open_trace(need(SHARED_NSYS / "ext" / "llama3_realsim" / "report.sqlite")) as trace:
        found = advice(trace)
    (line,) = found.not_judged
    assert line.startswith("host-sync, launch-bound, optimizer-loop, data-loader, host-gap, math-attention, ")
    assert "judged in steps, and the capture has none (NVTX `step` ranges or ProfilerStep#N)" in line
    gemm = _rule(found.findings, "fp32-gemm")
    assert gemm.evidence.startswith(
        "512 fp32 GEMM kernels take 13.738 ms of the 18.598 ms of kernel time in the capture (74%; it has no "
        "steps)"
    )
    with open_trace(need(H100_DIR / "report.sqlite")) as trace:  # a harness run: steps, no such line
        assert not any("judged in steps" in line for line in advice(trace).not_judged)


def test_a_capture_without_an_optimizer_is_not_sent_to_have_it_judged(h100_captures: dict[str, Path]) -> None:
    """A generate capture's steps are prefill and decode: no optimizer step for a roof to judge, so only
    what the run's record would add to its capture (torch.compile's counters) is said not judged."""
    with open_trace(h100_captures["tiny-generate"], cache=False) as trace:
        alone = advice(trace)
    assert [line.split(":")[0] for line in alone.not_judged] == ["recompile"]


def test_the_recorded_backtraces_of_calls(tmp_path: Path) -> None:
    """h100-medium recorded native backtraces of its OS runtime calls (OSRT_CALLCHAINS): read per call,
    innermost first; an export without call chains has none."""
    export = need(H100_DIR / "report.sqlite")
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as con:
        tid, start = con.execute("SELECT globalTid, start FROM OSRT_API WHERE callchainId = 1").fetchone()
    with open_trace(export) as trace:
        frames = trace.reader.backtraces("osrt", [(tid, start)])[(tid, start)]
    assert frames[:2] == ["__read (libc.so.6)", "_Py_read (python3.12)"]
    with open_trace(need(CPU_DIR / "report.sqlite")) as trace:
        assert trace.reader.backtraces("runtime", [(1, 1)]) == {}


def test_thresholds_of_the_new_rules() -> None:
    th = Thresholds().with_options(["fp32_gemm_share=0.5", "copies_per_step=2", "optimizer_roof_below=0.3"])
    assert (th.fp32_gemm_share, th.copies_per_step, th.optimizer_roof_below) == (0.5, 2.0, 0.3)


def test_a_stepless_capture_stored_with_a_run_says_why_none_fired() -> None:
    """`profile -- CMD` of a program that marks no steps prints its findings line: "none fired" alone read as
    a clean program; it says the rules judged in steps had nothing to judge."""
    with open_trace(need(SHARED_NSYS / "ext" / "weatherbench2" / "report.sqlite")) as trace:
        record = advice_record(capture_health(trace), advice(trace))
    assert record["findings"] == []
    assert findings_lines(record)[0] == (
        "findings: none fired (the capture has no step ranges: the rules judged in steps had nothing to "
        "judge)"
    )
    with open_trace(need(CPU_DIR / "report.sqlite")) as trace:  # steps, no CUDA: its rules judged nothing
        assert findings_lines(advice_record(capture_health(trace), advice(trace)))[0] == (
            "findings: none fired (the capture has no CUDA: the rules that read CUDA had nothing to judge)"
        )


def test_a_capture_without_steps_or_cuda_says_both(tmp_path: Path) -> None:
    """cpu-train with its `step` ranges renamed: neither the rules judged in steps nor those that read CUDA
    had anything to judge."""
    export = derive(
        need(CPU_DIR / "report.sqlite"), tmp_path / "stepless.sqlite",
        "UPDATE StringIds SET value = 'iteration' WHERE value = 'step'",
    )  # fmt: skip
    with open_trace(export) as trace:
        record = advice_record(capture_health(trace), advice(trace))
    assert findings_lines(record)[0] == (
        "findings: none fired (the capture has no step ranges and no CUDA: the rules judged in steps and the "
        "rules that read CUDA had nothing to judge)"
    )


def test_a_capture_without_kernels_is_not_said_to_have_them() -> None:
    """What optimizer-loop needs of the stored run, said of cpu-train (steps, an optimizer phase, no CUDA):
    the run's roofline, and the capture holds no kernels for the rule to judge on its own."""
    with open_trace(need(CPU_DIR / "report.sqlite")) as trace:
        not_judged = advice(trace).not_judged
    assert (
        "optimizer-loop: needs the optimizer against its memory roof (the run's roofline; the capture holds "
        "no kernels): `harness advise RUN` judges it"
    ) in not_judged
    assert not any("an export has its kernels" in line for line in not_judged)
