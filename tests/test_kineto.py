"""The Kineto reader: real torch.profiler traces into the trace model, exact nanoseconds, every analysis
command unchanged on them, and the plain and HTA-ruled kernel tables equal to the fixtures' oracles."""

from __future__ import annotations

import gzip
import io
import math
import shutil
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import A100_DIR
from kineto_data import TRACES, expected, raw_events, trace_path, write_trace
from typer.testing import CliRunner

from analysis.errors import ExportError
from analysis.hta.hta_rules import _round_inward, hta_view
from analysis.readers.kineto import text_ns
from analysis.readers.kineto_build import GPU_PROCESS, SMALL_ID
from analysis.tables.kernels import kernel_summary
from analysis.tables.nvtx import nvtx_ranges
from analysis.tables.nvtx_gpu import nvtx_gpu_summary
from analysis.trace.opening import open_trace
from harness.cli import app

FIXTURES = list(TRACES)
# rows per frame, as the fixtures' README counts the events (cuda_runtime, kernel, ...)
COUNTS = {
    "alexnet": {"runtime": 361, "kernels": 79, "memcpy": 16, "memset": 3, "syncs": 41, "cpu_ops": 359,
                "nvtx": 8},
    "nccl": {"runtime": 8740, "kernels": 2700, "memcpy": 960, "memset": 114, "syncs": 0, "cpu_ops": 14346,
             "nvtx": 42 + 30},
    "diff-control": {"runtime": 24692, "kernels": 8568, "memcpy": 228, "memset": 654, "syncs": 0,
                     "cpu_ops": 40506, "nvtx": 288},
    "diff-test": {"runtime": 21167, "kernels": 9876, "memcpy": 4856, "memset": 900, "syncs": 0,
                  "cpu_ops": 31236, "nvtx": 288},
}  # fmt: skip
runner = CliRunner()


def us_to_ns(value: float | int) -> int:
    """What the trace's text said, in ns: a float's repr is the shortest text giving the same float."""
    return int(Decimal(repr(value)) * 1000)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_event_lands_in_its_frame(fixture: str) -> None:
    trace = open_trace(trace_path(fixture), cache=False)
    counts = {k: trace.count(k) for k in COUNTS[fixture]}
    assert counts == COUNTS[fixture]
    assert trace.format == "kineto-json" and trace.meta["time_unit"] == "us"
    assert trace.meta["float_times"] is (fixture == "nccl")
    assert trace.meta["rank"] == {"alexnet": 0, "nccl": 0, "diff-control": 3, "diff-test": 1}[fixture]
    assert trace.meta["unusable"] == 0


def test_times_are_exact_nanoseconds() -> None:
    trace = open_trace(trace_path("nccl"), cache=False)
    kernels = [e for e in raw_events("nccl") if e.get("cat") == "kernel"]
    frame = trace.frame("kernels", ["start", "end", "correlation_id"])
    assert frame["start"].tolist() == [us_to_ns(e["ts"]) for e in kernels]
    assert (frame["end"] - frame["start"]).tolist() == [us_to_ns(e["dur"]) for e in kernels]
    assert frame["start"].iloc[0] == 4458676983543183  # "ts": 4458676983543.183
    # Unix-epoch microseconds with nanosecond digits are past float64's precision (0.25 µs there)
    assert text_ns("1695835542514261.123") == 1695835542514261123
    assert float("1695835542514261.123") * 1000 != 1695835542514261123
    assert text_ns(7) == 7000 and text_ns("2.5") == 2500 and text_ns("-0.25") == -250
    assert text_ns("1.7e15") == 1_700_000_000_000_000_000 and text_ns("0.0005") == 0  # half to even
    for bad in (None, "x", [1], True):
        with pytest.raises(ValueError):
            text_ns(bad)


def test_rounding_inward_is_htas_float_arithmetic() -> None:
    """ceil(ts), floor(ts + dur) computed from exact ns equal HTA's on the float it parsed, event by event."""
    events = [e for e in raw_events("nccl") if e.get("ph") == "X" and e.get("cat") != "Trace"]
    start = np.array([us_to_ns(e["ts"]) for e in events], dtype=np.int64)
    end = start + np.array([us_to_ns(e["dur"]) for e in events], dtype=np.int64)
    new_start, new_end = _round_inward(start, end)
    assert new_start.tolist() == [math.ceil(e["ts"]) * 1000 for e in events]
    htas_end = [max(math.floor(e["ts"] + e["dur"]), math.ceil(e["ts"])) * 1000 for e in events]
    assert new_end.tolist() == htas_end


@pytest.mark.parametrize("fixture", FIXTURES)
def test_kernels_equal_the_plain_summary(fixture: str) -> None:
    """`harness kernels --by name`: every kernel, exact times; kernels_plain.csv (µs) is the oracle."""
    ours = kernel_summary(open_trace(trace_path(fixture)), by="name").set_index("Name")
    plain = expected(fixture, "kernels_plain").set_index("name")
    assert sorted(ours.index) == sorted(plain.index)
    ours = ours.loc[plain.index]
    assert ours["Instances"].tolist() == plain["count"].tolist()
    assert ours["Total Time (ns)"].tolist() == [us_to_ns(v) for v in plain["total_dur_us"]]
    assert ours["Min (ns)"].tolist() == [us_to_ns(v) for v in plain["min_dur_us"]]
    assert ours["Max (ns)"].tolist() == [us_to_ns(v) for v in plain["max_dur_us"]]
    # ours to 0.1 ns, theirs to 1e-6 µs
    np.testing.assert_allclose(ours["Avg (ns)"] / 1000, plain["avg_dur_us"], rtol=0, atol=6e-5)
    np.testing.assert_allclose(ours["StdDev (ns)"] / 1000, plain["std_dur_us"], rtol=0, atol=6e-5)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_kernels_with_hta_rules_equal_htas_kernel_breakdown(fixture: str) -> None:
    """`harness kernels --hta`: HTA's sum/min/max/mean/stddev per kernel (kernel_breakdown_full.csv) and
    its event counts (kernels_plain_vs_hta.csv)."""
    ours = kernel_summary(hta_view(open_trace(trace_path(fixture))), by="name").set_index("Name")
    full = expected(fixture, "kernel_breakdown_full").set_index("name")
    counts = expected(fixture, "kernels_plain_vs_hta").set_index("name")["hta_count"].dropna()
    assert sorted(ours.index) == sorted(counts.index)
    theirs = full.loc[ours.index]
    assert ours["Instances"].tolist() == counts.loc[ours.index].astype(int).tolist()
    assert ours["Total Time (ns)"].tolist() == (theirs["sum (us)"] * 1000).astype(np.int64).tolist()
    assert ours["Min (ns)"].tolist() == (theirs["min (us)"] * 1000).astype(np.int64).tolist()
    assert ours["Max (ns)"].tolist() == (theirs["max (us)"] * 1000).astype(np.int64).tolist()
    np.testing.assert_allclose(ours["Avg (ns)"] / 1000, theirs["mean (us)"], rtol=0, atol=5e-5)
    np.testing.assert_allclose(ours["StdDev (ns)"] / 1000, theirs["stddev"], rtol=0, atol=5e-5)


def test_hta_rules_totals_match_the_readme() -> None:
    """The README's table: kernels and µs before and after HTA's two load rules."""
    table = {"alexnet": (79, 10_692_000, 79, 10_692_000), "nccl": (2700, 162_532_340, 1800, 99_447_000),
             "diff-control": (8568, 446_813_000, 7140, 368_519_000),
             "diff-test": (9876, 801_858_000, 7775, 621_259_000)}  # fmt: skip
    for fixture, (n, total, hta_n, hta_total) in table.items():
        trace = open_trace(trace_path(fixture))
        plain, ruled = kernel_summary(trace), kernel_summary(hta_view(trace))
        assert (plain["Instances"].sum(), plain["Total Time (ns)"].sum()) == (n, total)
        assert (ruled["Instances"].sum(), ruled["Total Time (ns)"].sum()) == (hta_n, hta_total)
        notes = ruled.attrs["notes"]
        assert any("ProfilerStep#" in n for n in notes) is (fixture != "alexnet")


def test_hta_rules_leave_an_nsys_export_alone(a100_export: Path) -> None:
    """No float timestamps, no profiler steps: the view is the trace."""
    trace = open_trace(a100_export)
    pd.testing.assert_frame_equal(kernel_summary(hta_view(trace)), kernel_summary(trace))


def test_hta_rules_that_change_nothing_say_so(a100_export: Path) -> None:
    """`--hta` on an nsys export (no ProfilerStep ranges, whole-ns times) or on alexnet (no steps, whole µs)
    gave the plain numbers without a word, as if they were HTA's rules applied: a note says the rules change
    nothing there, and why (of an nsys export it said "no fraction of a µs in its times", where its times
    have ns: they are kept, not rounded). Without --hta nothing is said."""
    head = (
        "note: HTA's load rules change nothing here: the trace has no ProfilerStep ranges (HTA leaves out "
        "the last of two or more) and "
    )
    for path, why in (
        (
            a100_export,
            "HTA rounds only a Kineto trace's fractional µs, and this nsys export's times are kept to the ns",
        ),
        (trace_path("alexnet"), "no fraction of a µs in its times to round"),
    ):
        said = head + why
        for command in ("kernels", "breakdown"):
            ruled = runner.invoke(app, [command, str(path), "--hta", "-f", "csv"])
            assert ruled.exit_code == 0, ruled.output
            assert ruled.stderr.splitlines().count(said) == 1, ruled.stderr
            plain = runner.invoke(app, [command, str(path), "-f", "csv"])
            assert plain.stdout == ruled.stdout and "HTA's load rules" not in plain.stderr


def test_annotations_are_ranges_and_credit_kernels_on_their_thread() -> None:
    """user_annotation: push/pop ranges of their thread, so nvtx-gpu (thread mode) gives nccl:all_reduce the
    kernels whose launch call ran inside it on the same thread, computed here from the raw JSON."""
    events = raw_events("nccl")
    trace = open_trace(trace_path("nccl"))
    ranges = nvtx_ranges(trace)
    cpu, gpu = ranges[ranges["domain"].isna()], ranges[ranges["domain"] == "GPU"]
    assert len(cpu) == 42 and (cpu["style"] == "PushPop").all()
    assert len(gpu) == 30 and (gpu["style"] == "StartEnd").all()
    assert set(gpu["pid"]) == {GPU_PROCESS} and set(gpu["tid"]) == {7, 40}  # GPU 0, its streams
    steps = cpu[cpu["name"].str.startswith("ProfilerStep#")]
    assert steps["payload"].tolist() == [4, 5, 6]

    def key(e: dict) -> tuple:
        return (e["pid"], e["tid"])

    annotations = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == "nccl:all_reduce"]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    total, count = 0, 0
    for k in (e for e in events if e.get("cat") == "kernel"):
        call = calls.get(k["args"]["correlation"])
        inside = call is not None and any(
            key(a) == key(call)
            and us_to_ns(a["ts"]) <= us_to_ns(call["ts"])
            and us_to_ns(call["ts"]) + us_to_ns(call["dur"]) <= us_to_ns(a["ts"]) + us_to_ns(a["dur"])
            for a in annotations
        )
        if inside:
            total, count = total + us_to_ns(k["dur"]), count + 1
    table = nvtx_gpu_summary(trace, mode="thread").set_index("Range")
    assert (table.loc["nccl:all_reduce", "Kern Inst"], table.loc["nccl:all_reduce", "Total Time (ns)"]) == (
        count,
        total,
    )
    assert count == 15  # the AllReduce kernels
    assert not table.index.str.startswith("GPU:").any()  # GPU annotations are not thread-bound: no kernels


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz", "renamed.sqlite"])
def test_open_trace_reads_the_file_not_its_name(name: str, tmp_path: Path) -> None:
    raw = gzip.decompress(trace_path("alexnet").read_bytes())
    path = tmp_path / name
    path.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    assert kernel_summary(open_trace(path, cache=False))["Instances"].sum() == 79
    export = tmp_path / "export.json.gz"  # an nsys export under a Kineto name is still read as one
    shutil.copyfile(A100_DIR / "report.sqlite", export)
    assert open_trace(export, cache=False).format == "nsys-sqlite"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x1f\x8b\x08\x00garbage", "corrupt or truncated gzip"),
        (b'{"traceEvents": [', "not valid JSON"),
        (b'{"schemaVersion": 1}', "no traceEvents"),
        (b"   ", "empty"),
        (b'"just a string"', "not a Chrome/Kineto trace"),
    ],
)
def test_broken_traces_are_one_line_errors(content: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(ExportError, match=message):
        open_trace(path, cache=False)
    result = runner.invoke(app, ["kernels", str(path)])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


def test_bad_events_are_left_out_and_counted(tmp_path: Path) -> None:
    args = {"stream": 7, "correlation": 1, "device": 0, "grid": [2, 1, 1], "block": [128, 1, 1]}
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": args}
    events = [
        kernel,
        {**kernel, "ts": "soon"},
        {**kernel, "dur": None},
        {**kernel, "dur": -3},
        "not an event",
        {"ph": "X", "cat": "python_function", "name": "f", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": "host", "tid": 2**40, "ts": 8,
         "dur": 1, "args": {"correlation": 1}},
    ]  # fmt: skip
    trace = open_trace(write_trace(tmp_path / "odd.json", events), cache=False)
    assert trace.meta["unusable"] == 3 and trace.count("kernels") == 1
    assert trace.meta["ignored"] == {"not an event": 1, "python_function": 1}
    table = kernel_summary(trace)
    assert table[["Instances", "Total Time (ns)", "GridXYZ"]].values.tolist() == [[1, 5000, "   2    1    1"]]
    # odd pid and tid: small ids, the real ones kept in the thread's name
    calls = trace.frame("runtime")
    gtid = int(calls["global_tid"].iloc[0])
    assert gtid >> 24 == SMALL_ID and gtid & 0xFFFFFF == SMALL_ID
    assert trace.thread_names()[gtid].endswith(f"[pid host, tid {2**40}]")
    # the kernel belongs to the process that launched it (through the correlation id)
    assert int(trace.frame("kernels")["global_pid"].iloc[0]) == gtid & ~0xFFFFFF


def test_second_open_reads_parquet_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    with open_trace(trace_path("nccl")) as cold:
        first = kernel_summary(cold)
        assert cold.source_reads == {"traceEvents": 1}
    warm = open_trace(trace_path("nccl"))
    pd.testing.assert_frame_equal(kernel_summary(warm), first)
    assert warm.source_reads == {} and warm.meta["float_times"] is True


@pytest.mark.parametrize("command", ["kernels", "nvtx", "nvtx-gpu"])
def test_analysis_commands_take_a_kineto_trace(command: str) -> None:
    result = runner.invoke(app, [command, str(trace_path("alexnet")), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) > 2


def _sections(text: str) -> dict[str, pd.DataFrame]:
    """The tables of a command's CSV output, by their `# title` line (one untitled table: key "")."""
    if not text.startswith("# "):
        return {"": pd.read_csv(io.StringIO(text))}
    out: dict[str, pd.DataFrame] = {}
    for block in text[2:].split("\n# "):
        title, _, body = block.partition("\n")
        if body.strip():
            out[title.strip()] = pd.read_csv(io.StringIO(body))
    return out


def _csv(command: str) -> dict[str, pd.DataFrame]:
    result = runner.invoke(app, [command, str(trace_path("alexnet")), "--format", "csv"])
    assert result.exit_code == 0, result.output
    return _sections(result.stdout)


def _alexnet_sums() -> dict[str, dict[str, tuple[int, int]]]:
    """Straight from the trace's JSON events, in ns: name -> (events, summed `dur`) for the CUDA runtime
    calls, the copies and sets, the kernels and the user annotations (alexnet's times are whole µs)."""
    sums: dict[str, dict[str, tuple[int, int]]] = {}
    for e in raw_events("alexnet"):
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "gpu_memcpy", "gpu_memset", "kernel",
                                                    "user_annotation"):  # fmt: skip
            n, t = sums.setdefault(e["cat"], {}).get(e["name"], (0, 0))
            sums[e["cat"]][e["name"]] = (n + 1, t + us_to_ns(e["dur"]))
    return sums


def _totals(by_name: dict[str, tuple[int, int]]) -> tuple[int, int]:
    return sum(n for n, _ in by_name.values()), sum(t for _, t in by_name.values())


def test_api_on_a_kineto_trace_sums_its_runtime_events() -> None:
    (table,) = _csv("api").values()
    ours = {
        n: (c, t) for n, c, t in zip(table["Name"], table["Num Calls"], table["Total Time (ns)"], strict=True)
    }
    assert ours == _alexnet_sums()["cuda_runtime"]  # 22 names, 361 calls
    assert ours["cudaLaunchKernel"] == (79, 3_056_561_000)  # sum(dur) of its 79 events: 3,056,561 µs


def test_memops_on_a_kineto_trace_sums_its_copies_and_sets() -> None:
    sums = _alexnet_sums()
    times, sizes = _csv("memops").values()
    # the 16 copies are all "Memcpy HtoD (Pageable -> Device)", the 3 sets "Memset (Device)"
    (copies,), (sets,) = sums["gpu_memcpy"].values(), sums["gpu_memset"].values()
    got = times.set_index("Operation")[["Count", "Total Time (ns)"]].T.to_dict("list")
    assert got == {"[CUDA memcpy HtoD]": list(copies), "[CUDA memset]": list(sets)}
    assert copies == (16, 55_503_000) and sets == (3, 8_000)
    # bytes: sum(args.bytes) over the same events, 244,403,360 and 21,760, in MB (10^6) to 3 places
    nbytes = {c: sum(e["args"]["bytes"] for e in raw_events("alexnet") if e.get("cat") == c)
              for c in ("gpu_memcpy", "gpu_memset")}  # fmt: skip
    assert nbytes == {"gpu_memcpy": 244_403_360, "gpu_memset": 21_760}
    assert sizes.set_index("Operation")[["Count", "Total (MB)"]].T.to_dict("list") == {
        "[CUDA memcpy HtoD]": [16, 244.403],
        "[CUDA memset]": [3, 0.022],
    }


def _launches() -> pd.DataFrame:
    """Each kernel with the runtime call of the same correlation id: api and kernel durations, and the
    total from the call's start to the kernel's end, in ns."""
    events = raw_events("alexnet")
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    rows = []
    for k in (e for e in events if e.get("cat") == "kernel"):
        call = calls[k["args"]["correlation"]]
        total = us_to_ns(k["ts"]) + us_to_ns(k["dur"]) - us_to_ns(call["ts"])
        rows.append((call["name"], k["name"], us_to_ns(call["dur"]), us_to_ns(k["dur"]), total))
    return pd.DataFrame(rows, columns=["API Name", "Kernel Name", "api", "kernel", "total"])


def test_launch_on_a_kineto_trace_joins_each_kernel_to_its_call() -> None:
    (table,) = _csv("launch").values()
    mine = _launches()
    assert len(mine) == 79 and set(mine["API Name"]) == {"cudaLaunchKernel"}
    assert mine[["api", "kernel", "total"]].sum().tolist() == [3_056_561_000, 10_692_000, 3_105_444_000]
    # a row per (API, kernel name, grid/block...): its Count and mean per name add up to the events'
    keys = ["API Name", "Kernel Name"]
    for col, avg in (("api", "AAvg (ns)"), ("kernel", "KAvg (ns)"), ("total", "TAvg (ns)")):
        table[col] = table["Count"] * table[avg]
    ours = table.groupby(keys)[["Count", "api", "kernel", "total"]].sum()
    theirs = mine.groupby(keys).agg(Count=("api", "size"), api=("api", "sum"), kernel=("kernel", "sum"),
                                    total=("total", "sum"))  # fmt: skip
    pd.testing.assert_index_equal(ours.index, theirs.index)
    assert ours["Count"].tolist() == theirs["Count"].tolist()
    for col in ("api", "kernel", "total"):  # each mean printed to 0.1 ns: Count × 0.05 ns at most, 79 in all
        np.testing.assert_allclose(ours[col], theirs[col], rtol=0, atol=0.05 * 79)


def test_summary_on_a_kineto_trace_adds_up_to_its_events() -> None:
    sums = _alexnet_sums()
    tables = _csv("summary")
    kern = tables["CUDA kernels (gpukernsum)"]
    assert (
        (kern["Instances"].sum(), kern["Total Time (ns)"].sum())
        == _totals(sums["kernel"])
        == (79, 10_692_000)
    )
    api = tables["CUDA API (cudaapisum)"]
    assert (api["Num Calls"].sum(), api["Total Time (ns)"].sum()) == _totals(sums["cuda_runtime"])
    assert _totals(sums["cuda_runtime"]) == (361, 42_297_605_000)  # sum(dur): 42,297,605 µs
    nvtx = tables["NVTX ranges (nvtxsum)"]
    ranges = zip(nvtx["Range"], nvtx["Instances"], nvtx["Total Time (ns)"], strict=True)
    assert {name: (n, t) for name, n, t in ranges} == sums["user_annotation"]  # 5 names, 8 annotations
    # every kernel runs inside the outermost annotation, [param|cuda] (43,425,283 µs from 1695835542514261)
    inside = tables["GPU time per NVTX range (nvtxkernsum)"].set_index("Range")
    assert inside.loc["[param|cuda]", ["Kern Inst", "Total Time (ns)"]].tolist() == [79, 10_692_000]
    mem = tables["GPU memory time (gpumemtimesum)"]
    assert mem["Total Time (ns)"].tolist() == [55_503_000, 8_000] and mem["Count"].tolist() == [16, 3]
    assert tables["GPU memory size (gpumemsizesum)"]["Total (MB)"].tolist() == [244.403, 0.022]
    launch = tables["Launch latency (kernexecsum)"]
    assert launch["Count"].sum() == 79 and set(launch["API Name"]) == {"cudaLaunchKernel"}


def test_kernels_cli_hta_option() -> None:
    path = trace_path("nccl")
    plain = pd.read_csv(io.StringIO(runner.invoke(app, ["kernels", str(path), "-f", "csv"]).stdout))
    ruled = runner.invoke(app, ["kernels", str(path), "--hta", "--by", "name", "-f", "csv"])
    table = pd.read_csv(io.StringIO(ruled.stdout))
    assert (plain["Instances"].sum(), table["Instances"].sum()) == (2700, 1800)
    assert table["Total Time (ns)"].sum() == 99_447_000
    assert "the last profiler step (ProfilerStep#6) is left out" in ruled.output


def test_dashboard_draws_a_kineto_trace(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    result = runner.invoke(app, ["dashboard", str(trace_path("alexnet")), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "ampere_sgemm_32x32_sliced1x4_tn" in out.read_text()
