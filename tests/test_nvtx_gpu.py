"""GPU time per NVTX range: nvtxkernsum parity (without its double count), phase attribution across
threads, and the phases-add-up check."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from conftest import H100_DIR, ORACLES, need
from export_data import as_printed, derive, launches_on_second_thread, oracle, query_rows, with_harness_ranges

from analysis.tables.nvtx_gpu import KERNSUM_COLUMNS, nvtx_gpu_kernels, nvtx_gpu_summary, phase_check
from analysis.trace.opening import open_trace

SAXPY_TOTAL = 88_573_480  # the five kernels, gpukernsum
NSYS_SAXPY_TOTAL = 177_146_960  # what nvtxkernsum prints: every launch call counted twice


def test_nvtxkernsum_oracle_but_counted_once(a100_export: Path, a100_expected: Path) -> None:
    ours = as_printed(nvtx_gpu_kernels(open_trace(a100_export), mode="thread"))
    theirs = oracle(a100_expected, "nvtxkernsum")
    assert list(ours.columns) == KERNSUM_COLUMNS
    assert theirs["Total Time (ns)"].tolist() == [NSYS_SAXPY_TOTAL]
    assert ours["Total Time (ns)"].tolist() == [SAXPY_TOTAL]
    same = [c for c in KERNSUM_COLUMNS if c not in ("Total Time (ns)", "StdDev (ns)")]
    pd.testing.assert_frame_equal(ours[same], theirs[same])
    assert ours["StdDev (ns)"].tolist() == [12992.1]  # gpukernsum's; nsys's 12249.0 is of 10 copies


def test_note_says_calls_were_deduplicated(a100_export: Path) -> None:
    notes = nvtx_gpu_kernels(open_trace(a100_export), mode="thread").attrs["notes"]
    assert len(notes) == 1
    assert notes[0].startswith("38 CUDA runtime calls were recorded twice under one correlationId")


def test_launches_on_another_thread(a100_export: Path, tmp_path: Path) -> None:
    export = open_trace(launches_on_second_thread(a100_export, tmp_path / "t.sqlite"))
    # thread attribution: the saxpy ranges are on the main thread, the launches are not
    assert nvtx_gpu_summary(export, mode="thread").empty
    unranged = nvtx_gpu_kernels(export, mode="thread")
    assert unranged["NVTX Range"].isna().all() and unranged["Kern Inst"].tolist() == [5]
    # phase attribution: any thread of the process
    per_phase = nvtx_gpu_summary(export, mode="phase", phases=("saxpy",))
    assert per_phase["Range"].tolist() == ["saxpy"]
    assert per_phase["Total Time (ns)"].tolist() == [SAXPY_TOTAL]
    assert per_phase["NVTX Inst"].tolist() == [5] and per_phase["Kern Inst"].tolist() == [5]


def test_phases_add_up_in_measured_steps(a100_export: Path, tmp_path: Path) -> None:
    export = open_trace(with_harness_ranges(a100_export, tmp_path / "h.sqlite"))
    check = phase_check(export).set_index("Phase")
    # steps 1..4 are inside the `measured` range; step 0 (kernel of 17,704,808 ns) is not
    assert check.loc["all kernels", "Kernels"] == 4
    assert check.loc["all kernels", "Total Time (ns)"] == SAXPY_TOTAL - 17_704_808
    assert check.loc["forward", "Total Time (ns)"] == SAXPY_TOTAL - 17_704_808
    assert check.loc["backward", "Kernels"] == 0 and check.loc["unattributed", "Kernels"] == 0
    assert check.loc["forward", "Share (%)"] == 100.0
    summary = nvtx_gpu_summary(export)
    assert summary["Range"].tolist() == ["forward"] and summary["NVTX Inst"].tolist() == [4]


def test_unattributed_kernels_are_shown(a100_export: Path, tmp_path: Path) -> None:
    export = open_trace(with_harness_ranges(a100_export, tmp_path / "h.sqlite"))
    check = phase_check(export, phases=("backward",)).set_index("Phase")
    assert check.loc["backward", "Kernels"] == 0
    assert check.loc["unattributed", "Total Time (ns)"] == check.loc["all kernels", "Total Time (ns)"]
    assert check.loc["unattributed", "Share (%)"] == 100.0


def test_top_kernels_per_range(a100_export: Path) -> None:
    top = nvtx_gpu_kernels(open_trace(a100_export), mode="thread", top=1)
    assert len(top) == 1 and top["Kernel Name"].iloc[0].startswith("saxpy(")


def test_auto_mode_picks_phase_only_for_harness_exports(a100_export: Path, tmp_path: Path) -> None:
    plain = nvtx_gpu_summary(open_trace(a100_export), mode="auto")
    assert plain.attrs["mode"] == "thread"
    assert plain["Range"].tolist() == ["saxpy"] and plain["Total Time (ns)"].tolist() == [SAXPY_TOTAL]
    harness_export = open_trace(with_harness_ranges(a100_export, tmp_path / "h.sqlite"))
    harness = nvtx_gpu_summary(harness_export, mode="auto")
    assert harness.attrs["mode"] == "phase" and "forward" in harness["Range"].tolist()


def test_a_range_of_the_same_span_around_each_range_gets_the_same_kernels(
    a100_export: Path, tmp_path: Path
) -> None:
    """Two ranges of one span on one thread (a record_function around an op, at a trace's µs resolution):
    one is inside the other, and the kernels are credited to both, once each, whichever the search found."""
    twin = derive(
        a100_export,
        tmp_path / "twin.sqlite",
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
        "SELECT start, end, eventType, 'twin', globalTid, domainId FROM NVTX_EVENTS WHERE text = 'saxpy'",
    )
    table = nvtx_gpu_summary(open_trace(twin), mode="thread").set_index("Range")
    assert table.loc["saxpy", "Kern Inst"] == table.loc["twin", "Kern Inst"] == 5
    assert table.loc["saxpy", "Total Time (ns)"] == table.loc["twin", "Total Time (ns)"] == SAXPY_TOTAL
    assert table.loc["saxpy", "NVTX Inst"] == table.loc["twin", "NVTX Inst"] == 5


def test_phases_named_that_no_range_has_are_said(a100_export: Path) -> None:
    """`nvtx-gpu --phases fwd,bwd` on an export without such ranges fell back to thread mode without a word:
    the table then was of every range, not the phases asked for. It says so, in both of thread mode's ways
    (the sweep, and with --kernels); phases that are there, or none named, say nothing."""
    with open_trace(a100_export) as trace:
        asked = nvtx_gpu_summary(trace, mode="auto", phases=("fwd", "bwd"))
        kernels = nvtx_gpu_kernels(trace, mode="auto", phases=("fwd",))
        there = nvtx_gpu_summary(trace, mode="auto", phases=("saxpy",))
        own = nvtx_gpu_summary(trace, mode="auto")
    said = "no NVTX range is named 'fwd' or 'bwd' in report.sqlite: each range credited on its thread instead"
    assert asked.attrs["mode"] == "thread" and any(n.startswith(said) for n in asked.attrs["notes"])
    assert any(n.startswith("no NVTX range is named 'fwd' in") for n in kernels.attrs["notes"])
    assert there.attrs["mode"] == "phase" and own.attrs["mode"] == "thread"
    assert not [
        n for n in [*there.attrs["notes"], *own.attrs["notes"]] if n.startswith("no NVTX range is named")
    ]


def test_projection_ids_print_as_nsys_prints_them(h100_export: Path) -> None:
    """nvtxgpuproj's ParentId is an id: the projection printed `1.0` where nsys prints `1` (a float column,
    for the top ranges' missing parent); the parity test reads both back as numbers and missed it."""
    import csv
    import io

    from typer.testing import CliRunner

    from harness.cli import app

    printed = CliRunner().invoke(app, ["nvtx-gpu", str(h100_export), "--projection", "--format", "csv"])
    assert printed.exit_code == 0, printed.output
    ours = [r["ParentId"] for r in csv.DictReader(io.StringIO(printed.stdout))]
    oracle_csv = ORACLES / "nsys-2023.4" / "h100-medium" / "nvtx_gpu_proj_trace.csv"
    theirs = [r["ParentId"] for r in csv.DictReader(io.StringIO(oracle_csv.read_text()))][1:]  # [0]: no range
    assert ours == theirs and "1" in ours and "1.0" not in ours


def test_a_phase_named_twice_is_counted_once(h100_export: Path) -> None:
    """`nvtx-gpu --phases forward,forward,backward` listed forward twice in "Do the phases add up?": its
    rows added up to 36,020 of the measured steps' 27,000 kernels (125 % of their time)."""
    import json

    from typer.testing import CliRunner

    from harness.cli import app

    args = ["nvtx-gpu", str(h100_export), "--format", "json", "--phases"]
    printed = CliRunner().invoke(app, [*args, "forward,forward,backward"])
    assert printed.exit_code == 0, printed.output
    tables = json.loads(printed.stdout)
    check = next(rows for title, rows in tables.items() if title.startswith("Do the phases add up?"))
    assert [(r["Phase"], r["Kernels"]) for r in check] == [
        ("forward", 9020), ("backward", 16300), ("unattributed", 1680), ("all kernels", 27000),
    ]  # fmt: skip
    once = json.loads(CliRunner().invoke(app, [*args, "forward,backward"]).stdout)
    assert once == tables
    with open_trace(h100_export) as trace:
        direct = phase_check(trace, phases=("forward", "forward", "backward"))
    assert direct["Phase"].tolist() == ["forward", "backward", "unattributed", "all kernels"]
    assert int(direct["Kernels"].iloc[:-1].sum()) == int(direct["Kernels"].iloc[-1]) == 27000


def test_top_keeps_the_first_ranges(h100_export: Path) -> None:
    """`nvtx-gpu --top N` without --kernels was passed over: every range was printed (585 of an LLM
    export's). It keeps the first N ranges; phase mode's "Do the phases add up?" stays whole."""
    import json

    from typer.testing import CliRunner

    from harness.cli import app

    def tables(*args: str) -> dict[str, list[dict]]:
        printed = CliRunner().invoke(app, ["nvtx-gpu", *args, "--format", "json"])
        assert printed.exit_code == 0, printed.output
        out = json.loads(printed.stdout)
        return out if isinstance(out, dict) else {"ranges": out}

    whole, top = tables(str(h100_export)), tables(str(h100_export), "--top", "2")
    ranges = next(t for t in whole if t.startswith("GPU time per NVTX range"))
    assert [r["Range"] for r in whole[ranges]] == ["forward", "backward", "optimizer"]
    assert top[ranges] == whole[ranges][:2]
    check = next(t for t in whole if t.startswith("Do the phases add up?"))
    assert top[check] == whole[check] and [r["Kernels"] for r in top[check]][-1] == 27000
    (thread,) = tables(str(h100_export), "--mode", "thread").values()
    (one,) = tables(str(h100_export), "--mode", "thread", "--top", "1").values()
    assert len(thread) > 1 and one == thread[:1]


def test_a_kernel_ending_past_2_62_is_left_out_as_the_breakdown_leaves_it(tmp_path: Path) -> None:
    """h100-medium's first kernel of step 7's forward made to end 2**62 ns (146 years) after it starts: its
    end is not a time, and the breakdown (which reads starts and ends) leaves it out; GPU time per NVTX range
    (which reads durations alone) counted it, forward 4,611,686,018,552 ms of 100% of the GPU time."""
    src = need(H100_DIR / "report.sqlite")
    (f_start,) = query_rows(src, "SELECT e.start FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                            "WHERE s.value = 'forward' AND e.int64Value = 7")[0]  # fmt: skip
    ((rowid, duration),) = query_rows(src, "SELECT rowid, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                      f"WHERE start >= {f_start} ORDER BY start LIMIT 1")  # fmt: skip
    far = f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + {2**62} WHERE rowid = {rowid}"
    bad = derive(src, tmp_path / "far.sqlite", far)
    whole = nvtx_gpu_summary(open_trace(src)).set_index("Range")
    table = nvtx_gpu_summary(open_trace(bad, cache=False)).set_index("Range")
    assert table.loc["forward", "Kern Inst"] == whole.loc["forward", "Kern Inst"] - 1
    assert table.loc["forward", "Total Time (ns)"] == whole.loc["forward", "Total Time (ns)"] - duration
    assert (
        "left out 1 of 30,528 kernels with a duration past 2**62 ns (146 years): not a time"
        in (table.attrs["notes"])
    )


def test_a_measured_step_without_its_step_range_is_said_to_be_left_out(tmp_path: Path) -> None:
    """h100-medium's step 7 range deleted, or never closed (NULL end: it runs past the `measured` range):
    phase mode counts the kernels of measured steps, and left step 7's 2,700 out without a word (9 forward
    ranges, 24,300 kernels in all, as though the capture held 9 steps)."""
    src = need(H100_DIR / "report.sqlite")
    ((rowid,),) = query_rows(src, "SELECT e.rowid FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                             "WHERE s.value = 'step' AND e.int64Value = 7")  # fmt: skip
    note = (
        "3 phase ranges inside the `measured` range lie in no measured step's range (a `step` range lost, or "
        "never closed): the kernels launched in them are left out (`harness health` names the step)"
    )
    for edit in ("DELETE FROM NVTX_EVENTS", "UPDATE NVTX_EVENTS SET end = NULL"):
        bad = derive(src, tmp_path / "no-step.sqlite", f"{edit} WHERE rowid = {rowid}")
        check = phase_check(open_trace(bad, cache=False))
        assert check.set_index("Phase").loc["all kernels", "Kernels"] == 24_300
        assert note in check.attrs["notes"]
        assert note in nvtx_gpu_summary(open_trace(bad, cache=False)).attrs["notes"]
    assert not [n for n in phase_check(open_trace(src)).attrs["notes"] if "phase range" in n]
