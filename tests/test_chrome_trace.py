"""`harness timeline`: an export as a Chrome trace, read back by the harness's own Kineto reader. The kernel
table of the file equals the export's row for row, and it holds every event the export has."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import NSYS_EXPORTS, SHARED_NSYS, need
from kineto_data import write_trace
from typer.testing import CliRunner

from analysis.trace.opening import open_trace
from analysis.trace.trace import Trace
from analysis.views.chrome_trace import HARNESS_PID, write_chrome_trace
from analysis.views.timeline import time_zero
from harness.cli import app

runner = CliRunner()
EXPORTS = NSYS_EXPORTS
SESSION = "s from the session's start"  # the zero of an export's times, as `health` and Nsight Systems say


def export(name: str) -> Path:
    path = SHARED_NSYS / name / "report.sqlite"
    need(path)
    return path


def timeline(report: Path, out: Path, *options: str) -> list[dict[str, Any]]:
    result = runner.invoke(app, ["timeline", str(report), "-o", str(out), "--no-cache", *options])
    assert result.exit_code == 0, result.output
    with gzip.open(out, "rt") as f:
        return json.load(f)["traceEvents"]


def secs(ns: int) -> str:
    """ns from the session's start as the timeline says them: seconds to the nanosecond."""
    return f"{ns / 1e9:.9f}".rstrip("0").rstrip(".")


def kernels_csv(path: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["kernels", str(path), "-f", "csv", "--no-cache"])
    return result.exit_code, result.stdout


@pytest.mark.parametrize("name", EXPORTS)
def test_the_timeline_reads_back_as_the_export(name: str, tmp_path: Path) -> None:
    report = export(name)
    out = tmp_path / "timeline.json.gz"
    events = timeline(report, out)
    assert kernels_csv(out) == kernels_csv(report)
    source, back = open_trace(report, cache=False), open_trace(out, cache=False)
    for frame in ("kernels", "memcpy", "memset", "runtime"):
        expected = len(source.frame(frame, ["start"])) if source.has(frame) else 0
        assert (back.count(frame) if back.has(frame) else 0) == expected, frame
    if source.has("nvtx"):
        ranges = source.frame("nvtx", ["start", "end"])
        assert back.count("nvtx") == int((ranges["end"] >= ranges["start"]).sum())
    cats = Counter(e.get("cat") for e in events)
    assert cats["os_runtime"] == (len(source.frame("osrt", ["start"])) if source.has("osrt") else 0)
    # one arrow (start and finish, same id) per GPU operation whose launching call is in the file
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == finishes.keys()
    gpu_ops = sum(cats[c] for c in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert len(starts) <= gpu_ops
    if source.has("kernels") and source.has("runtime"):
        assert len(starts) > 0.9 * gpu_ops


def test_a100_holds_every_launch_as_an_arrow_and_names_its_tracks(tmp_path: Path) -> None:
    events = timeline(export("a100-saxpy-mpi"), tmp_path / "t.json.gz")
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 5 and sum(e["ph"] == "f" for e in events) == 5 + 15  # kernels and copies
    calls = {(e["pid"], e["tid"], e["ts"]) for e in events if e.get("cat") == "cuda_runtime"}
    for s in (e for e in events if e["ph"] == "s"):
        assert (s["pid"], s["tid"], s["ts"]) in calls  # each arrow starts at a launch call
    names = {(e["name"], e["pid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    gpu = kernels[0]["pid"]
    assert names[("process_name", gpu)] == f"GPU {kernels[0]['args']['device']}"
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert threads[(gpu, kernels[0]["tid"])] == f"stream {kernels[0]['args']['stream']}"
    assert all(threads[(e["pid"], e["tid"])] for e in events if e.get("cat") == "cuda_runtime")


def test_phases_and_steps_get_a_track_and_a_step_cuts_a_window(tmp_path: Path) -> None:
    report = export("cpu-train")
    events = timeline(report, tmp_path / "all.json.gz")
    track = [e for e in events if e.get("cat") == "harness_phase"]
    assert len(track) == 32 and {e["pid"] for e in track} == {HARNESS_PID}
    assert Counter(e["name"] for e in track) == {"step": 8, "forward": 8, "backward": 8, "optimizer": 8}
    steps = sorted((e for e in track if e["name"] == "step"), key=lambda e: e["ts"])
    backward = sorted((e for e in track if e["name"] == "backward"), key=lambda e: e["ts"])

    cut = timeline(report, tmp_path / "step.json.gz", "--step", "5")
    lo, hi = float(steps[5]["ts"]), float(steps[5]["ts"]) + float(steps[5]["dur"])
    timed = [e for e in cut if e["ph"] == "X"]
    assert timed and all(e["ts"] <= hi and e["ts"] + e["dur"] >= lo for e in timed)
    assert len(timed) < len([e for e in events if e["ph"] == "X"])

    phase = timeline(report, tmp_path / "phase.json.gz", "--step", "5", "--phase", "backward")
    ranges = [e for e in phase if e.get("cat") == "harness_phase" and e["name"] == "backward"]
    assert [(e["ts"], e["dur"]) for e in ranges] == [(backward[5]["ts"], backward[5]["dur"])]

    with open_trace(report, cache=False) as trace:  # --start/--end: seconds from the session's start
        seconds = (int(lo * 1000) - time_zero(trace)) / 1e9
    nanos = timeline(report, tmp_path / "ns.json.gz", "--start", "0", "--end", f"{seconds:.9f}")
    assert all(e["ts"] <= lo for e in nanos if e["ph"] == "X")


def test_times_are_exact_nanoseconds(tmp_path: Path) -> None:
    report = export("ext/torchrun_2gpu")
    out = tmp_path / "t.json.gz"
    timeline(report, out)
    source = open_trace(report, cache=False).frame("kernels", ["start", "end"])
    back = open_trace(out, cache=False).frame("kernels", ["start", "end"])
    assert sorted(zip(back["start"], back["end"], strict=True)) == sorted(
        zip(source["start"], source["end"], strict=True)
    )


def test_hostile_names_stay_text_and_a_kineto_trace_round_trips(tmp_path: Path) -> None:
    args = {"stream": 7, "correlation": 1, "device": 0, "grid": [2, 1, 1], "block": [128, 1, 1]}
    names = ['k"\\x</script>', "k\x1b]0;title\x07", "k\ud800"]
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 6, "ts": 1, "dur": 1,
         "args": {"correlation": 1}},
        *({"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 10 + i, "dur": 1.5, "args": args}
          for i, n in enumerate(names)),
    ]  # fmt: skip
    trace = write_trace(tmp_path / "in.json", events)
    out = tmp_path / "out.json"
    write_chrome_trace(open_trace(trace, cache=False), out)
    with open(out, encoding="ascii") as f:  # ASCII: every outside character escaped
        written = json.load(f)["traceEvents"]
    kept = [*names[:2], "k\\ud800"]  # the reader keeps a lone surrogate as its escape
    assert sorted(e["name"] for e in written if e.get("cat") == "kernel") == sorted(kept)
    assert kernels_csv(out) == kernels_csv(trace)


def test_a_window_that_holds_no_event_is_refused_with_the_captures_span(tmp_path: Path) -> None:
    """`--start S --end E` past the capture's end wrote a trace of no events, exit 0, said only as "no
    events": it is refused now in one line with the span the events cover, and no file is left. The
    window is seconds from the session's start, as the dashboard's --start/--end."""
    report = export("cpu-train")
    with open_trace(report, cache=False) as trace:
        origin = time_zero(trace)
        osrt = trace.frame("osrt", ["start", "end"])
        kernels_nvtx = trace.frame("nvtx", ["start", "end"])
    first = min(int(osrt["start"].min()), int(kernels_nvtx["start"].min()))
    last = max(int(osrt["end"].max()), int(kernels_nvtx["end"].max()))
    span = f"{(first - origin) / 1e9:g}..{(last - origin) / 1e9:g} s"
    out = tmp_path / "t.json.gz"
    for options in (["--start", "100", "--end", "200"], ["--end", "-100"]):
        r = runner.invoke(app, ["timeline", str(report), "-o", str(out), "--no-cache", *options])
        assert r.exit_code == 1, r.output
        assert r.output.strip() == (
            f"error: {' '.join(options)} holds no event of report.sqlite (its events span {span} from the "
            "session's start): nothing written"
        )
        assert not out.exists() and not list(tmp_path.iterdir())
    inside = timeline(report, out, "--start", "0", "--end", f"{(last - origin) / 1e9:.9f}")
    assert any(e.get("cat") == "os_runtime" for e in inside)


def test_errors_a_user_can_cause_are_one_line(tmp_path: Path) -> None:
    report = export("cpu-train")
    cases = [  # options that cannot go together are a usage error (2), as the dashboard's --start/--end
        (["--phase", "backward"], "--phase backward needs --step N", 2),
        (["--step", "99"], "no step 99", 1),
        (["--step", "1", "--start", "5"], "exclude each other", 2),
        (["--start", "9", "--end", "1"], "must be after --start", 2),
        (["--start", "2", "--end", "2"], "--end (2.0 s) must be after --start (2.0 s)", 2),  # as dashboard's
    ]
    for options, message, code in cases:
        result = runner.invoke(app, ["timeline", str(report), "-o", str(tmp_path / "x.json.gz"), *options])
        assert result.exit_code == code and "Traceback" not in result.output, result.output
        assert message in result.output and len(result.output.strip().splitlines()) == 1
    # said before the report is read (or exported: a report is exported first, which takes minutes)
    unread = tmp_path / "not a report.nsys-rep"
    unread.write_text("not a report")
    result = runner.invoke(app, ["timeline", str(unread), "-o", str(tmp_path / "y"), "--phase", "forward"])
    assert result.exit_code == 2 and "--phase forward needs --step N" in result.output, result.output
    missing_dir = tmp_path / "no" / "such" / "t.json.gz"  # its folders are made, as every output's are
    result = runner.invoke(app, ["timeline", str(report), "-o", str(missing_dir)])
    assert result.exit_code == 0 and missing_dir.is_file(), result.output
    (tmp_path / "taken").write_text("mine")
    result = runner.invoke(app, ["timeline", str(report), "-o", str(tmp_path / "taken" / "t.json.gz")])
    assert result.exit_code == 2 and "cannot write" in result.output and "Traceback" not in result.output
    assert not list(tmp_path.glob("**/*.part"))
    result = runner.invoke(app, ["timeline", str(tmp_path / "nope.sqlite"), "-o", str(tmp_path / "x.json")])
    assert result.exit_code != 0 and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("name", "frames"),
    [
        ("ext/torchrun_2gpu", ("runtime", "kernels", "memcpy", "memset", "nvtx")),
        ("cpu-train", ("osrt",)),  # and its 32 NVTX ranges in one block
    ],
)
def test_tables_written_a_block_at_a_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, frames: tuple[str, ...]
) -> None:
    """API calls, kernels, copies, sets, NVTX ranges and OS runtime calls go out a block at a time, never
    whole in memory: with blocks of 97 rows the file holds the same events as the one written in the
    default blocks."""
    report = export(name)
    timeline(report, tmp_path / "whole.json.gz")
    blocks = Trace.blocks
    sizes: dict[str, list[int]] = {}

    def small(self: Trace, frame: str, columns: Any, rows: int = 97) -> Any:
        for block in blocks(self, frame, columns, rows=97):
            sizes.setdefault(frame, []).append(len(block["start"]))
            yield block

    monkeypatch.setattr(Trace, "blocks", small)
    timeline(report, tmp_path / "blocks.json.gz")
    many = {f: len(s) > 1 and max(s) <= 97 for f, s in sizes.items()}
    assert {f for f, yes in many.items() if yes} == set(frames) and "nvtx" in many
    with gzip.open(tmp_path / "whole.json.gz") as a, gzip.open(tmp_path / "blocks.json.gz") as b:
        whole, small_blocks = a.read().splitlines(), b.read().splitlines()
    # the same lines (events, arrows and their ids); a block's arrows go out with it, so where the arrows
    # stand among the GPU events depends on the block size
    assert len(whole) > 1000 and sorted(line.rstrip(b",") for line in whole) == sorted(
        line.rstrip(b",") for line in small_blocks
    )


NVTX_CATS = (b'"cat":"user_annotation"', b'"cat":"gpu_user_annotation"', b'"cat":"harness_phase"')


@pytest.mark.parametrize("name", ["ext/torchrun_2gpu", "ext/dlprof_norelu", "cpu-train", "a100-saxpy-mpi"])
def test_nvtx_ranges_written_a_chunk_of_the_export_at_a_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    """The NVTX ranges come from the export a chunk of rowids at a time, each chunk's names resolved on
    their own, never the whole frame (7.1M ranges at 4M kernels were most of `harness timeline`'s peak):
    the same lines in the same order as the ranges read whole (texts, registered strings, domains,
    payloads, the harness's steps and phases)."""
    from analysis.readers import nsys, nsys_sql

    report = export(name)
    whole_trace = open_trace(report, cache=False)
    whole_trace.frame("nvtx", ["start", "end", "global_tid", "payload", "name", "domain"])  # held whole
    write_chrome_trace(whole_trace, tmp_path / "whole.json")
    chunks: list[int] = []
    scan_blocks, rowids = nsys.NsysReader.scan_blocks, nsys_sql.CHUNK_ROWIDS

    def small_nvtx_chunks(self: Any, table: str, *args: Any, **kwargs: Any) -> Any:
        if table != "NVTX_EVENTS":
            yield from scan_blocks(self, table, *args, **kwargs)
            return
        monkeypatch.setattr(nsys_sql, "CHUNK_ROWIDS", 7)
        try:
            for chunk in scan_blocks(self, table, *args, **kwargs):
                chunks.append(len(chunk["range_id"]))
                yield chunk
        finally:
            monkeypatch.setattr(nsys_sql, "CHUNK_ROWIDS", rowids)

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("the NVTX ranges were read whole")

    monkeypatch.setattr(nsys.NsysReader, "scan_blocks", small_nvtx_chunks)
    monkeypatch.setattr(nsys.NsysReader, "nvtx_ranges", never)
    write_chrome_trace(open_trace(report, cache=False), tmp_path / "chunks.json")
    assert len(chunks) > 3 and max(chunks) <= 7

    def nvtx_lines(path: Path) -> list[bytes]:
        return [line.rstrip(b",") for line in path.read_bytes().splitlines() if line.startswith(b"{") and
                any(c in line for c in NVTX_CATS)]  # fmt: skip

    whole, chunked = nvtx_lines(tmp_path / "whole.json"), nvtx_lines(tmp_path / "chunks.json")
    assert len(whole) >= len(whole_trace.frame("nvtx", ["start"])) > 0
    assert chunked == whole


def test_a_scan_of_many_columns_reads_fewer_rows_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query reads at most CHUNK_CELLS values (rows x columns): the timeline's kernels (9 columns) in
    chunks of 250,000 rowids held ~170 MB of joined strings and parsed columns at once, which set the peak
    of `harness timeline` at 1M kernels. The blocks are the rows read whole, in the same order."""
    from analysis.readers import nsys_open, nsys_sql

    columns = ["start", "end", "correlation_id", "global_pid", "device_id", "stream_id", "grid", "block",
               "name_id"]  # fmt: skip
    reader = nsys_open.open_nsys(export("ext/dlprof_norelu"))
    whole = reader.read("kernels", columns)
    monkeypatch.setattr(nsys_sql, "CHUNK_CELLS", 9 * 7)
    blocks = list(reader.read_blocks("kernels", columns) or [])
    assert len(whole) > 20 and len(blocks) > 3 and max(len(b["start"]) for b in blocks) <= 7
    for c in columns:
        assert np.concatenate([b[c] for b in blocks]).tolist() == whole[c].tolist(), c


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--start", "0.1"], "(from 0.1 s from the session's start)"),
        (["--end", "0.25"], "(up to 0.25 s from the session's start)"),
        (["--start", "0.1", "--end", "0.25"], "(window 0.1..0.25 s from the session's start)"),
        (["--end", "9e9"], "(up to 9e+09 s from the session's start)"),  # past OPEN
        (["--start", "-9e9", "--end", "9e9"], "(window -9e+09..9e+09 s from the session's start)"),
    ],
)
def test_a_window_open_at_one_end_is_said_as_given(tmp_path: Path, options: list[str], said: str) -> None:
    report = export("cpu-train")
    r = runner.invoke(app, ["timeline", str(report), "-o", str(tmp_path / "t.json"), "--no-cache", *options])
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("note: wrote")]
    assert said in line and str(2**62) not in line.replace(",", "")


def test_a_step_of_a_torch_profiler_trace(tmp_path: Path) -> None:
    """`timeline TRACE --step 5` on a torch.profiler trace was refused ("no 'step' NVTX ranges ... not
    recorded by the harness") though health and diff take its ProfilerStep#N ranges as its steps; step 5 is
    ProfilerStep#5 now: its window holds that step's 900 kernels (the nccl fixture's README count)."""
    from kineto_data import trace_path

    nccl = trace_path("nccl")
    cut = timeline(nccl, tmp_path / "step5.json.gz", "--step", "5")
    with open_trace(nccl) as trace:
        nvtx = trace.frame("nvtx", ["name", "start", "end"])
        kernels = trace.frame("kernels", ["start", "end"])
    step = nvtx[nvtx["name"] == "ProfilerStep#5"].iloc[0]
    inside = kernels[(kernels["end"] >= step["start"]) & (kernels["start"] <= step["end"])]
    assert len(inside) == 900
    assert Counter(e.get("cat") for e in cut)["kernel"] == len(inside)
    missing = CliRunner().invoke(
        app, ["timeline", str(nccl), "--step", "9", "--out", str(tmp_path / "x.json")]
    )
    assert missing.exit_code == 1 and "no step 9 in" in missing.stderr and "(steps 4..6)" in missing.stderr


def test_the_dashboards_timeline_of_a_torch_profiler_trace_is_one_profiler_step() -> None:
    """The dashboard's timeline of nccl (ProfilerStep#4..6) drew the capture's busiest second, "no 'step' NVTX
    ranges", where `timeline --step` and health take its ProfilerStep#N as its steps: it is one of them now,
    the one of median duration, with that step's 900 kernels."""
    from kineto_data import trace_path

    from analysis.views.timeline import step_events

    with open_trace(trace_path("nccl"), cache=False) as trace:
        events = step_events(trace)
        nvtx = trace.frame("nvtx", ["name", "start", "end"])
    steps = nvtx[nvtx["name"].str.fullmatch(r"ProfilerStep#\d+")].assign(
        length=lambda f: f["end"] - f["start"]
    )
    median = steps.sort_values("length").iloc[(len(steps) - 1) // 2]["name"]
    assert set(events["step"]) == {int(median.removeprefix("ProfilerStep#"))}
    assert (events["kind"] == "kernel").sum() == 900


def test_a_step_of_the_harness_s_own_torch_profiler_trace_is_its_profiler_step(tmp_path: Path) -> None:
    """The harness's torch.profiler trace holds its `step` ranges (record_function: no payload) inside
    ProfilerStep#N, N the harness's step index. `--step N` numbered the `step` ranges by place: nccl with
    such ranges in ProfilerStep#4..6 had "steps 0..2", and `--step 1` was ProfilerStep#5."""
    from kineto_data import raw_events, trace_path, write_trace

    events = raw_events("nccl")
    profiler = {e["name"]: e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    steps = [
        {**e, "name": "step", "ts": e["ts"] + 1, "dur": e["dur"] - 2, "args": {}} for e in profiler.values()
    ]
    trace = write_trace(tmp_path / "harness.json", [*events, *steps])
    cut = timeline(trace, tmp_path / "step5.json.gz", "--step", "5")
    step5 = profiler["ProfilerStep#5"]
    with open_trace(trace_path("nccl")) as nccl:
        kernels = nccl.frame("kernels", ["start", "end"])
    lo, hi = round(step5["ts"] * 1000), round((step5["ts"] + step5["dur"]) * 1000)
    inside = kernels[(kernels["end"] >= lo) & (kernels["start"] <= hi)]
    assert Counter(e.get("cat") for e in cut)["kernel"] == len(inside) == 900
    missing = runner.invoke(app, ["timeline", str(trace), "--step", "0", "-o", str(tmp_path / "x.json")])
    assert missing.exit_code == 1 and "(steps 4..6)" in missing.stderr


def test_the_note_counts_each_kind_under_its_own_category(tmp_path: Path) -> None:
    """The nccl fixture's 42 user_annotation and 30 gpu_user_annotation events (its README's counts): the
    note said `72 user_annotation`, the GPU ranges counted under the CPU ones' category."""
    from kineto_data import trace_path

    r = runner.invoke(app, ["timeline", str(trace_path("nccl")), "-o", str(tmp_path / "t.json.gz")])
    assert r.exit_code == 0, r.output
    with gzip.open(tmp_path / "t.json.gz", "rt") as f:
        cats = Counter(e.get("cat") for e in json.load(f)["traceEvents"])
    assert cats["user_annotation"] == 42 and cats["gpu_user_annotation"] == 30
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("note: wrote")]
    assert ", 42 user_annotation, 30 gpu_user_annotation, " in line


def test_a_step_is_cut_by_its_phase_ranges_payloads(h100_export: Path, tmp_path: Path) -> None:
    """h100-medium lost step 4's `step` range (health: "step 4 lacks step, forward"); its backward and
    optimizer ranges, payload 4, lie inside step 3's `step` range. `--step 4` said "no step 4 (steps
    0..14)", and `--step 3 --phase optimizer` cut step 4's optimizer. A step is known from its phases'
    payloads too, and a phase of another step is not this one's."""
    from export_data import query_rows

    ranges = (
        "SELECT s.value, e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE e.int64Value = {step} AND s.value IN ('forward', 'backward', 'optimizer', 'step')"
    )
    step4 = query_rows(h100_export, ranges.format(step=4))
    assert sorted(n for n, _, _ in step4) == ["backward", "optimizer"]
    step3 = {n: (s, e) for n, s, e in query_rows(h100_export, ranges.format(step=3))}
    assert "optimizer" not in step3

    def window(*options: str) -> tuple[int, str]:
        r = runner.invoke(app, ["timeline", str(h100_export), "-o", str(tmp_path / "t.json"), *options])
        return r.exit_code, r.stderr.replace("\n      ", " ")

    with open_trace(h100_export) as trace:  # said in seconds from it, as --start/--end take them
        origin = time_zero(trace)
    code, said = window("--step", "4")
    lo, hi = min(s for _, s, _ in step4), max(e for _, _, e in step4)
    assert code == 0 and f"(window {secs(lo - origin)}..{secs(hi - origin)} {SESSION})" in said
    code, said = window("--step", "3", "--phase", "backward")
    lo, hi = step3["backward"]
    assert code == 0 and f"(window {secs(lo - origin)}..{secs(hi - origin)} {SESSION})" in said
    code, said = window("--step", "3", "--phase", "optimizer")
    assert code == 1 and "no 'optimizer' range in step 3" in said


def test_a_step_of_a_torch_profiler_trace_is_said_from_the_trace_s_start(tmp_path: Path) -> None:
    """`timeline TRACE --step 5` said a Kineto trace's window in Unix nanoseconds (4,458,676,639,291,351..
    for nccl) where an export's is said in its session's: it is said from the trace's first event now, as
    every other time of a Kineto trace said to people (nccl's first event is ProfilerStep#4, 222.5 ms
    before ProfilerStep#5), in seconds as --start/--end take them."""
    from decimal import Decimal

    from kineto_data import raw_events, trace_path

    def ns(us: float) -> int:  # the trace's µs with three decimals, exactly
        return int(Decimal(repr(us)) * 1000)

    events = [e for e in raw_events("nccl") if e.get("ph") == "X" and e.get("cat") != "Trace"]
    first = min(ns(e["ts"]) for e in events)
    step = next(e for e in events if e["name"] == "ProfilerStep#5")
    lo, hi = ns(step["ts"]) - first, ns(step["ts"]) + ns(step["dur"]) - first
    assert lo == 222_503_285
    r = runner.invoke(
        app, ["timeline", str(trace_path("nccl")), "--step", "5", "-o", str(tmp_path / "t.json")]
    )
    assert r.exit_code == 0, r.output
    said = r.stderr.replace("\n      ", " ")
    assert f"(window {secs(lo)}..{secs(hi)} s from the trace's first event)" in said


def test_a_steps_window_is_said_in_seconds_as_start_and_end_take_it(tmp_path: Path) -> None:
    """`--step 5` said its window in ns ("window 7,388,623,341..7,406,142,214 ns") where --start/--end take
    seconds: it is said as they take it, from the session's start, and given back as --start/--end it cuts
    the same events."""
    report = export("cpu-train")
    with open_trace(report, cache=False) as trace:
        origin = time_zero(trace)
        nvtx = trace.frame("nvtx", ["name", "start", "end"])
    step = nvtx[nvtx["name"] == "step"].sort_values("start").iloc[5]
    lo, hi = (secs(int(step[edge]) - origin) for edge in ("start", "end"))
    r = runner.invoke(app, ["timeline", str(report), "-o", str(tmp_path / "s.json"), "--step", "5"])
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.stderr.replace("\n      ", " ").splitlines() if x.startswith("note: wrote")]
    assert f"(window {lo}..{hi} s from the session's start)" in line and " ns" not in line, line
    start, end = line.split("(window ")[1].split(" s from")[0].split("..")
    again = runner.invoke(
        app, ["timeline", str(report), "-o", str(tmp_path / "w.json"), "--start", start, "--end", end]
    )
    assert again.exit_code == 0, again.output
    by_step = json.loads((tmp_path / "s.json").read_text())["traceEvents"]
    by_time = json.loads((tmp_path / "w.json").read_text())["traceEvents"]
    assert sorted(map(json.dumps, by_step)) == sorted(map(json.dumps, by_time))


def test_a_name_ending_in_gz_in_capitals_is_gzipped(tmp_path: Path) -> None:
    """The readers take `TRACE.JSON.GZ` as gzipped JSON; `timeline -o OUT.JSON.GZ` wrote plain JSON under
    that name."""
    out = tmp_path / "OUT.JSON.GZ"
    r = runner.invoke(app, ["timeline", str(export("a100-saxpy-mpi")), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    with gzip.open(out, "rt") as f:
        assert json.load(f)["traceEvents"]


def test_a_window_open_at_one_end_says_so_in_the_files_metadata(tmp_path: Path) -> None:
    """`--start 7.4` alone wrote `window_ns: [7400000000, 4611686018427387904]`: the far-off instant that
    stands for an end not given, as if it were one. It is null."""
    report, out = export("cpu-train"), tmp_path / "w.json"
    for options, window in ((["--start", "7.4"], [7_400_000_000, None]), (["--end", "7.3"], [None, 7.3e9])):
        result = runner.invoke(app, ["timeline", str(report), "-o", str(out), *options])
        assert result.exit_code == 0, result.output
        assert json.loads(out.read_text())["otherData"]["window_ns"] == window
