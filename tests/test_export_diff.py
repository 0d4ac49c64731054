"""`harness diff A.sqlite B.sqlite`: the headline, the verdict, comparability, the gate, on pairs built
from the real fixtures (a copy changed by SQL, tests/export_data.py `derive`), with expected figures from
SQL on the two files themselves."""

from __future__ import annotations

import json
import sqlite3
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import need
from export_data import derive
from typer.testing import CliRunner

from analysis.compare.export_diff import diff_exports
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
TORCHRUN = SHARED / "nsys" / "ext" / "torchrun_2gpu" / "report.sqlite"
CPU_TRAIN = SHARED / "nsys" / "cpu-train" / "report.sqlite"
KINETO = SHARED / "kineto"
# every kernel 20% longer, and the gaps between them: the kernels' timeline stretched from the first one, so
# that no kernel comes to overlap another
T0 = "(SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
LONGER = (
    f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {T0} + (start - {T0}) * 6 / 5, "
    f"end = {T0} + (end - {T0}) * 6 / 5"
)
STEP_ID = "(SELECT id FROM StringIds WHERE value = 'step')"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """torchrun: the 2-GPU capture; longer: its kernels 20% longer (LONGER); one_gpu: device 1's GPU work
    gone; cpu_slow: the CPU capture with its `step` ranges 20% longer."""
    need(TORCHRUN)
    need(CPU_TRAIN)
    d = tmp_path_factory.mktemp("pairs")
    return {
        "torchrun": TORCHRUN,
        "longer": derive(TORCHRUN, d / "longer.sqlite", LONGER),
        "one_gpu": derive(
            TORCHRUN,
            d / "one_gpu.sqlite",
            *(
                f"DELETE FROM {t} WHERE deviceId = 1"
                for t in (
                    "CUPTI_ACTIVITY_KIND_KERNEL",
                    "CUPTI_ACTIVITY_KIND_MEMCPY",
                    "CUPTI_ACTIVITY_KIND_MEMSET",
                )
            ),
        ),
        "cpu": CPU_TRAIN,
        "cpu_slow": derive(
            CPU_TRAIN,
            d / "cpu_slow.sqlite",
            f"UPDATE NVTX_EVENTS SET end = start + (end - start) * 6 / 5 WHERE textId = {STEP_ID}",
        ),
    }


def sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return con.execute(query).fetchall()


def expected_headline(path: Path) -> dict[str, int]:
    """GPU time (kernels summed) per device and in all, the wall span, exposed communication: in SQL."""
    per_device = "SELECT deviceId, SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY deviceId"
    out = {f"gpu_time.device{dev}": t for dev, t in sql(path, per_device)}
    out["gpu_time"] = sum(out.values())
    spans = " UNION ALL ".join(
        f"SELECT start AS s, end AS e FROM {t}"
        for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_RUNTIME",
        )
    )
    ((out["wall_span"],),) = sql(
        path, f"SELECT MAX(e) - MIN(s) FROM ({spans} UNION ALL SELECT start, end FROM NVTX_EVENTS "
        "WHERE end IS NOT NULL)",
    )  # fmt: skip
    # no NCCL kernel overlaps another kernel of its device (checked here), so all communication is exposed
    nccl = "JOIN StringIds AS s ON s.id = k.demangledName WHERE s.value LIKE 'nccl%Kernel%'"
    ((overlaps,),) = sql(
        path,
        f"SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN CUPTI_ACTIVITY_KIND_KERNEL AS o ON "
        f"o.deviceId = k.deviceId AND o.rowid != k.rowid AND o.start < k.end AND k.start < o.end {nccl}",
    )
    assert overlaps == 0
    ((out["comm_exposed"],),) = sql(
        path, f"SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k {nccl}"
    )
    return out


def diff_json(*args: str) -> tuple[int, dict]:
    r = runner.invoke(app, ["diff", *args, "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def test_headline_totals_equal_sums_in_sql(pairs: dict[str, Path]) -> None:
    a, b = pairs["torchrun"], pairs["longer"]
    _, doc = diff_json(str(a), str(b))
    figures = {f["key"]: f for f in doc["figures"]}
    for side, path in (("a", a), ("b", b)):
        for key, value in expected_headline(path).items():
            assert figures[key][side] == value, (side, key)
            assert figures[key]["unit"] == "ns"
    assert figures["gpu_time"]["a"] == 535_200_650  # the 535.20 ms
    assert figures["gpu_time"]["delta"] == figures["gpu_time"]["b"] - 535_200_650
    assert figures["comm_overlapped"]["a"] == figures["comm_overlapped"]["b"] == 0
    # each device's span splits into compute, exposed communication, copies and sets, idle
    for side in ("a", "b"):
        parts = sum(figures[k][side] for k in ("compute", "comm_exposed", "memory", "idle"))
        spans = sql(
            a if side == "a" else b,
            "SELECT SUM(e - s) FROM (SELECT deviceId, MIN(start) AS s, MAX(end) AS e FROM (SELECT deviceId, "
            "start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT deviceId, start, end FROM "
            "CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT deviceId, start, end FROM "
            "CUPTI_ACTIVITY_KIND_MEMSET) GROUP BY deviceId)",
        )
        assert parts == spans[0][0]
    assert doc["comparability"] == {
        "comparable": True, "reasons": [], "gpus_a": 2, "gpus_b": 2, "schema_a": "3.25.0 (nsys 2026.2.1.210)",
        "schema_b": "3.25.0 (nsys 2026.2.1.210)", "kernels_a": 4010, "kernels_b": 4010,
        "kernel_names_common_pct": 100.0, "kernel_count_ratio": 1.0, "gpu_models_a": [], "gpu_models_b": [],
    }  # fmt: skip
    top = doc["top_regression"]
    assert top["name"].startswith("void flash::flash_fwd_kernel<") and top["count_a"] == top["count_b"] == 68
    ((flash,),) = sql(a, "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s "
                      "ON s.id = k.shortName WHERE s.value = 'flash_fwd_kernel'")  # fmt: skip
    ((flash_b,),) = sql(b, "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s "
                        "ON s.id = k.shortName WHERE s.value = 'flash_fwd_kernel'")  # fmt: skip
    assert top["delta_ns"] == flash_b - flash
    assert doc["top_improvement"] is None


def test_verdict_regression_improvement_and_refusal(pairs: dict[str, Path]) -> None:
    a, b = str(pairs["torchrun"]), str(pairs["longer"])
    code, doc = diff_json(a, b, "--gate", "5")
    v = doc["verdict"]
    assert code == 1 and doc["gate_failed"] is True
    assert (v["verdict"], v["basis"], v["weaker"], v["samples_a"], v["samples_b"]) == (
        "regression", "GPU busy time", True, 2, 2,
    )  # fmt: skip
    # each device's busy time is a sample: the effect is the ratio of their means
    busy = {f["key"]: f for f in doc["figures"]}["gpu_busy"]
    assert v["effect_pct"] == pytest.approx((busy["b"] / busy["a"] - 1) * 100)
    assert 15 < v["effect_pct"] < 20 and v["ci_low_pct"] > 0

    code, doc = diff_json(b, a, "--gate", "5")
    assert code == 0 and doc["verdict"]["verdict"] == "improvement" and doc["verdict"]["ci_high_pct"] < 0
    assert doc["gate_failed"] is False

    code, doc = diff_json(a, a)
    assert doc["verdict"]["verdict"] == "inconclusive" and doc["verdict"]["effect_pct"] == 0

    code, doc = diff_json(a, str(pairs["one_gpu"]), "--gate", "0")
    assert code == 1 and doc["gate_failed"] is True and doc["gate_judged"] is False
    assert doc["verdict"]["verdict"] == "refused" and doc["verdict"]["effect_pct"] is None
    reasons = ["GPU work on 2 GPUs in A, 1 GPU in B", "kernel counts 4,010 and 1,993 are more than 2× apart"]
    assert doc["comparability"]["reasons"] == reasons
    assert doc["verdict"]["reason"] == "not comparable: " + "; ".join(reasons)


def test_gate_is_one_line_and_exit_code(pairs: dict[str, Path]) -> None:
    a, b = str(pairs["torchrun"]), str(pairs["longer"])
    r = runner.invoke(app, ["diff", a, b, "--gate", "5", "--format", "csv"])
    assert r.exit_code == 1
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: gate: regression beyond 5%: GPU busy time +1") and "weaker" in line
    r = runner.invoke(app, ["diff", a, b, "--gate", "30", "--format", "csv"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_a_gate_with_no_verdict_fails_in_one_line(pairs: dict[str, Path], fmt: str) -> None:
    """A GPU capture against a CPU one: the verdict is refused, so the gate cannot judge, and fails as a
    regression does (exit 1), with one line saying why."""
    gpu, cpu = str(pairs["torchrun"]), str(pairs["cpu"])
    r = runner.invoke(app, ["diff", gpu, cpu, "--gate", "5", "--format", fmt])
    assert r.exit_code == 1, r.output
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert line == (
        "error: gate: cannot be judged, no verdict: not comparable: GPU work on 2 GPUs in A, no GPU in B; "
        "only 0% of kernel names in common (under 50%)"
    )
    assert "gate: not applied" not in r.stderr


def step_durations(path: Path) -> list[int]:
    return [
        d
        for (d,) in sql(path, f"SELECT end - start FROM NVTX_EVENTS WHERE textId = {STEP_ID} ORDER BY start")
    ]


def test_iterations_of_cpu_exports(pairs: dict[str, Path]) -> None:
    a, b = pairs["cpu"], pairs["cpu_slow"]
    steps_a, steps_b = step_durations(a), step_durations(b)
    assert len(steps_a) == len(steps_b) == 8
    code, doc = diff_json(str(a), str(b), "--warmup", "3", "--gate", "10")
    assert code == 1
    assert doc["a"]["iterations"] == {"source": "NVTX `step` ranges", "count": 5, "warmup": 3,
                                      "durations_ns": steps_a[3:]}  # fmt: skip
    assert doc["b"]["iterations"]["durations_ns"] == steps_b[3:]
    v = doc["verdict"]
    assert (v["verdict"], v["basis"], v["weaker"]) == ("regression", "iteration time", False)
    assert v["effect_pct"] == pytest.approx((sum(steps_b[3:]) / sum(steps_a[3:]) - 1) * 100)
    assert 19.9 < v["effect_pct"] < 20.1 and 0 < v["ci_low_pct"] < 20 < v["ci_high_pct"]
    figures = {f["key"]: f for f in doc["figures"]}
    assert "gpu_time" not in figures  # no GPU on either side
    assert figures["iteration_mean"]["a"] == pytest.approx(sum(steps_a[3:]) / 5)
    assert doc["comparability"]["comparable"] and doc["comparability"]["gpus_a"] == 0

    _, doc = diff_json(str(b), str(a), "--warmup", "3")
    assert doc["verdict"]["verdict"] == "improvement"
    # with the first (warm-up) step kept, its 167 ms among 16 ms steps leaves the answer open
    _, doc = diff_json(str(a), str(b))
    assert doc["verdict"]["verdict"] == "inconclusive" and doc["a"]["iterations"]["count"] == 8


def test_warm_up_left_out_of_the_verdict_is_left_out_of_the_tables(pairs: dict[str, Path]) -> None:
    """`--warmup 3` judges steps 3–7 alone; the tables and the wall span were of all 8 steps (the first's
    167 ms in them), so they disagreed with the verdict above them. Now they hold what it holds."""
    a, b = pairs["cpu"], pairs["cpu_slow"]
    _, doc = diff_json(str(a), str(b), "--warmup", "3")
    ranges = {row["Name"]: row for row in doc["tables"]["NVTX ranges"]}
    assert (ranges["step"]["Instances A"], ranges["step"]["Instances B"]) == (5, 5)
    assert ranges["step"]["Total Time A (ns)"] == sum(step_durations(a)[3:])
    assert ranges["step"]["Total Time B (ns)"] == sum(step_durations(b)[3:])
    assert ranges["forward"]["Instances A"] == 5
    steps = sql(a, f"SELECT start, end FROM NVTX_EVENTS WHERE textId = {STEP_ID} ORDER BY start")
    figures = {f["key"]: f for f in doc["figures"]}
    assert figures["wall_span"]["a"] == steps[-1][1] - steps[3][0]
    _, whole = diff_json(str(a), str(b))  # no warm-up left out: every step, as before
    assert {row["Name"]: row for row in whole["tables"]["NVTX ranges"]}["step"]["Instances A"] == 8


def test_one_iteration_aligned_and_a_named_range(pairs: dict[str, Path]) -> None:
    a, b = pairs["cpu"], pairs["cpu_slow"]
    _, doc = diff_json(str(a), str(b), "--iteration", "4")
    figures = {f["key"]: f for f in doc["figures"]}
    assert figures["wall_span"]["a"] == step_durations(a)[4]
    assert figures["wall_span"]["b"] == step_durations(b)[4]
    ranges = {row["Name"]: row for row in doc["tables"]["NVTX ranges"]}
    assert ranges["step"]["Instances A"] == 1 and ranges["forward"]["Instances A"] == 1
    assert ranges["step"]["Total Time A (ns)"] == step_durations(a)[4]
    # B's stretched step 4 reaches past the start of step 5, which therefore started inside it
    assert ranges["step"]["Instances B"] == 2

    _, doc = diff_json(str(a), str(b), "--iteration-range", "forward", "--warmup", "3")
    its = doc["a"]["iterations"]
    assert its["source"] == "NVTX ranges `forward`" and its["count"] == 5
    assert doc["verdict"]["verdict"] == "inconclusive"  # forward ranges were not stretched

    for args, message in (
        (["--iteration", "8"], "error: --iteration 8: "),
        (["--iteration-range", "nope"], "error: --iteration-range nope: no NVTX range of that name in "),
    ):
        r = runner.invoke(app, ["diff", str(a), str(b), *args])
        assert r.exit_code != 0 and "Traceback" not in r.output
        assert r.stderr.strip().startswith(message), r.stderr


def test_headline_first_at_80_columns(pairs: dict[str, Path]) -> None:
    r = runner.invoke(app, ["diff", str(pairs["torchrun"]), str(pairs["longer"])], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == f"A = {pairs['torchrun']}"[:80] or lines[0].startswith("A = ")
    assert lines[2].startswith("verdict: regression [weaker: no iterations]: GPU busy time +")
    assert all(len(line) <= 80 for line in lines)
    head = lines[: next(i for i, x in enumerate(lines) if x.startswith("Kernels"))]
    text = "\n".join(head)
    for want in ("comparable: GPUs 2 → 2", "iterations: A none; B none", "top regression: void flash::",
                 "GPU time, all devices", "GPU time, device 0", "GPU time, device 1", "wall span",
                 "comm., exposed", "comm., overlapped", "copies and sets", "GPU idle",
                 "A (ms)", "B (ms)", "(%)"):  # fmt: skip
        assert want in text, want
    row = next(x for x in head if "GPU time, all devices" in x)
    assert "535.201" in row and "642.241" in row and "107.040" in row and "20.0" in row
    assert "columns left out" not in text
    assert any(x.startswith("note: 22 of 27 rows not shown: --top 27 shows them all") for x in lines)


def test_library_kineto_pair_by_profiler_steps() -> None:
    control, test = KINETO / "diff-control" / "control.json.gz", KINETO / "diff-test" / "test.json.gz"
    need(control)
    with open_trace(control) as ta, open_trace(test) as tb:
        d = diff_exports(ta, tb)
        steps = ta.frame("nvtx", ["name", "start", "end"])
        steps = steps[steps["name"].astype(str).str.startswith("ProfilerStep#")]
    assert d.a.iterations.source == "ProfilerStep#N ranges" and d.a.iterations.count == 6
    assert list(d.a.iterations.durations) == sorted_durations(steps)
    assert d.verdict.basis == "iteration time" and not d.verdict.weaker
    assert [t for t, _ in d.tables][:1] == ["Kernels"]


def sorted_durations(steps) -> list[int]:  # type: ignore[no-untyped-def]
    s = steps.sort_values("start")
    return (s["end"] - s["start"]).tolist()


def with_steps(src: Path, dst: Path, steps: int = 4) -> tuple[Path, dict[int, list[tuple[int, int]]]]:
    """`src` with NVTX `step` ranges on each process's busiest thread: its CUDA calls' span cut in `steps`
    equal parts. Returns the copy and each process's windows."""
    threads = sql(
        src,
        "SELECT globalTid, MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid "
        "ORDER BY COUNT(*) DESC",
    )
    windows: dict[int, list[tuple[int, int]]] = {}
    rows = []
    for gtid, lo, hi in threads:
        pid = (gtid >> 24) & 0xFFFFFF
        if pid in windows:
            continue
        cuts = [lo + (hi - lo) * i // steps for i in range(steps + 1)]
        windows[pid] = list(pairwise(cuts))
        rows += [f"({s}, {e}, 59, {gtid}, 'step')" for s, e in windows[pid]]
    sql_insert = f"INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text) VALUES {', '.join(rows)}"
    return derive(src, dst, sql_insert), windows


def test_one_iteration_of_a_gpu_capture_equals_sql(tmp_path: Path, pairs: dict[str, Path]) -> None:
    """Iteration 1 of the torchrun capture with 4 `step` ranges a process: the GPU work whose launching call
    started in it (on the same process), summed in SQL per device."""
    a, windows = with_steps(TORCHRUN, tmp_path / "steps.sqlite")
    assert sorted(windows) == [144, 145]
    b = derive(a, tmp_path / "steps_longer.sqlite", LONGER)
    _, doc = diff_json(str(a), str(b), "--iteration", "1")
    its = doc["a"]["iterations"]
    assert its["source"] == "NVTX `step` ranges" and its["count"] == 4
    lengths = [max(w[k][1] - w[k][0] for w in windows.values()) for k in range(4)]
    assert its["durations_ns"] == lengths  # the slower process's range, per iteration
    cases = " ".join(f"WHEN {pid} THEN {s} " for pid, w in windows.items() for s, _ in [w[1]])
    ends = " ".join(f"WHEN {pid} THEN {e} " for pid, w in windows.items() for _, e in [w[1]])
    pid = "((k.globalPid >> 24) & 16777215)"
    query = (
        f"SELECT k.deviceId, SUM(k.end - k.start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
        f"LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = k.correlationId "
        f"AND ((r.globalTid >> 24) & 16777215) = {pid} "
        f"WHERE COALESCE(r.start, k.start) >= CASE {pid} {cases}END "
        f"AND COALESCE(r.start, k.start) < CASE {pid} {ends}END GROUP BY k.deviceId"
    )
    figures = {f["key"]: f for f in doc["figures"]}
    for side, path in (("a", a), ("b", b)):
        per = sql(path, query)
        assert len(per) == 2
        for dev, total, _ in per:
            assert figures[f"gpu_time.device{dev}"][side] == total, (side, dev)
        assert figures["gpu_time"][side] == sum(t for _, t, _ in per)
        count = sum(row[f"Instances {side.upper()}"] for row in doc["tables"]["Kernels"])
        assert count == sum(n for _, _, n in per)
    span = max(w[1][1] for w in windows.values()) - min(w[1][0] for w in windows.values())
    assert figures["wall_span"]["a"] == figures["wall_span"]["b"] == span
    # the CPU ranges did not move, so the iteration times are equal: no change can be claimed
    assert doc["verdict"]["basis"] == "iteration time" and doc["verdict"]["verdict"] == "inconclusive"


def test_a_missing_export_is_one_line(tmp_path: Path, tmp_db: str) -> None:
    r = runner.invoke(app, ["diff", str(tmp_path / "nothere.sqlite"), str(CPU_TRAIN)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip().startswith(f"error: no such file: {tmp_path / 'nothere.sqlite'}")


def test_warm_up_steps_outside_the_measured_range_are_left_out(tmp_path: Path, a100_export: Path) -> None:
    """The A100 fixture with the harness's ranges (tests/export_data.py): 5 `step` ranges, the first outside
    the `measured` range."""
    from export_data import with_harness_ranges

    path = with_harness_ranges(a100_export, tmp_path / "harness_ranges.sqlite")
    steps = [
        d for (d,) in sql(path, "SELECT end - start FROM NVTX_EVENTS WHERE text = 'step' ORDER BY start")
    ]
    assert len(steps) == 5
    _, doc = diff_json(str(path), str(path))
    its = doc["a"]["iterations"]
    assert (its["source"], its["count"], its["warmup"], its["durations_ns"]) == (
        "NVTX `step` ranges", 4, 1, steps[1:],
    )  # fmt: skip
    v = doc["verdict"]
    assert (v["verdict"], v["basis"], v["samples_a"], v["effect_pct"]) == (
        "inconclusive",
        "iteration time",
        4,
        0,
    )


def test_names_from_the_export_reach_the_terminal_escaped(tmp_path: Path, pairs: dict[str, Path]) -> None:
    """A kernel renamed to hold an escape sequence and rich markup: shown as text, never sent as is."""
    evil = "\x1b]0;owned\x07[bold red]flash[/]"
    b = derive(
        pairs["longer"],
        tmp_path / "evil.sqlite",
        f"UPDATE StringIds SET value = '{evil}' WHERE id = (SELECT demangledName FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.shortName "
        "WHERE s.value = 'flash_fwd_kernel' LIMIT 1)",
    )
    r = runner.invoke(app, ["diff", str(TORCHRUN), str(b), "--top", "30"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "top regression: \\x1b]0;owned\\x07[bold red]flash[/] +326.78 ms (0 → 68 launches)" in r.stdout


def test_a_gate_that_passes_says_when_the_interval_reaches_beyond_it() -> None:
    need(CPU_TRAIN)
    # one export against itself: no change, but 8 iterations (warm-up included) cannot tell 1% from noise
    r = runner.invoke(app, ["diff", str(CPU_TRAIN), str(CPU_TRAIN), "--gate", "1", "--format", "csv"])
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("warning: gate:")]
    assert line.startswith("warning: gate: passed, but the iteration time's interval reaches +")
    assert "a regression of 1% could not be told" in line
    r = runner.invoke(app, ["diff", str(CPU_TRAIN), str(CPU_TRAIN), "--gate", "1000", "--format", "csv"])
    assert r.exit_code == 0 and "warning: gate:" not in r.stderr


def test_the_grouping_line_only_where_the_grouping_changed_a_name(pairs: dict[str, Path]) -> None:
    """The NVTX table's note on grouping PyTorch's names comes with names that carry PyTorch's fields, as
    `harness nvtx` says it; the CPU capture's `step`, `forward`, … carry none."""
    plain = runner.invoke(app, ["diff", str(pairs["cpu"]), str(pairs["cpu_slow"])])
    assert plain.exit_code == 0, plain.output
    assert "grouped by operator" not in plain.output
    assert diff_json(str(pairs["cpu"]), str(pairs["cpu_slow"]))[1]["nvtx_grouping"] is None
    torch = diff_json(str(pairs["torchrun"]), str(pairs["longer"]))[1]
    assert torch["nvtx_grouping"].startswith("NVTX ranges grouped by operator (PyTorch's")


def test_captures_of_other_gpu_models_are_said(tmp_path: Path, a100_export: Path) -> None:
    """The same capture, B's GPU renamed as another model's: the comparability line, a note and the json
    say that A and B ran on other GPUs; the same GPUs say nothing."""
    b = derive(a100_export, tmp_path / "h100.sqlite", "UPDATE TARGET_INFO_GPU SET name = 'NVIDIA H100 [x]'")
    r = runner.invoke(app, ["diff", str(a100_export), str(b), "--top", "1"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "comparable: GPUs 1 → 1 (NVIDIA A100-SXM4-40GB → NVIDIA H100 [x])" in r.output
    said = "note: A and B ran on other GPUs (NVIDIA A100-SXM4-40GB → NVIDIA H100 [x]): their times"
    assert said in r.output
    _, doc = diff_json(str(a100_export), str(b))
    c = doc["comparability"]
    assert (c["gpu_models_a"], c["gpu_models_b"]) == (["NVIDIA A100-SXM4-40GB"], ["NVIDIA H100 [x]"])
    assert any("ran on other GPUs" in n for n in doc["notes"])
    same = runner.invoke(app, ["diff", str(a100_export), str(a100_export), "--top", "1"])
    assert same.exit_code == 0 and "other GPUs" not in same.output
