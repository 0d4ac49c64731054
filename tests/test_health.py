"""`harness health`: capture health of the shared exports and traces, held against what their tables hold
(counted here in SQL or plain Python, not through the trace model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import NSYS_EXPORTS, need, shared_export
from export_data import derive, query_rows
from kineto_data import SHARED_KINETO, raw_events, trace_path, write_trace
from typer.testing import CliRunner

from analysis.advice.health import capture_health, overhead_in_phases
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
WITH_MESSAGES = ["ext/fuser_report1", "ext/llama3_realsim", "ext/weatherbench2"]
ALL_EXPORTS = NSYS_EXPORTS


def _check(health, name: str):  # type: ignore[no-untyped-def]
    return next(c for c in health.checks if c.name == name)


@pytest.mark.parametrize("export", WITH_MESSAGES)
def test_nsys_messages_as_in_diagnostic_event(export: str) -> None:
    path = shared_export(export)
    rows = query_rows(
        path,
        "SELECT e.timestamp, l.label, e.text FROM DIAGNOSTIC_EVENT e "
        "JOIN ENUM_DIAGNOSTIC_SEVERITY_LEVEL l ON l.id = e.severity ORDER BY e.timestamp, e.rowid",
    )
    with open_trace(path) as trace:
        health = capture_health(trace)
    messages = health.details["nsys messages"]
    assert messages["Time (ns)"].tolist() == [r[0] for r in rows]
    assert messages["Severity"].tolist() == [r[1] for r in rows]
    assert messages["Text"].tolist() == [r[2] for r in rows]
    check = _check(health, "nsys messages")
    counts = dict(query_rows(path, "SELECT severity, count(*) FROM DIAGNOSTIC_EVENT GROUP BY 1"))
    assert check.evidence.startswith(f"{len(rows):,} messages (")
    # every warning or error makes the check a warning: fuser 1 error, llama3 27 warnings, weatherbench2 3
    assert (counts.get(2, 0), counts.get(3, 0)) == {
        "ext/fuser_report1": (0, 1),
        "ext/llama3_realsim": (27, 0),
        "ext/weatherbench2": (3, 0),
    }[export]
    assert check.status == "warn"
    cuda = [
        t
        for (t,) in query_rows(
            path, "SELECT text FROM DIAGNOSTIC_EVENT WHERE text LIKE 'Number of CUDA events%'"
        )
    ]
    for text in cuda:  # "Number of CUDA events collected: 989." (fuser), 7539 (llama3), 24 (weatherbench2)
        assert text.replace("\t", "").strip().rstrip(".") in check.evidence


def test_export_without_messages_is_ok() -> None:
    with open_trace(shared_export("a100-saxpy-mpi")) as trace:
        check = _check(capture_health(trace), "nsys messages")
    assert check.status == "ok" and "no DIAGNOSTIC_EVENT" in check.evidence


@pytest.mark.parametrize(
    ("export", "why"),
    [
        ("h100-medium", "(nsys 2023.4.4.54 keeps none)"),
        ("cpu-train", "(nsys 2022.4.2.1 keeps none)"),
        ("ext/beast1", "(it names no nsys version; nsys 2023.4 and older keep none)"),
    ],
)
def test_an_export_without_messages_says_why_from_its_own_nsys(export: str, why: str) -> None:
    """Of a 2023.4 export the check said "(nsys 2022.4 and older keep none)": true of other exports, no
    reason for this one. The version is the one its metadata names (none in the oldest)."""
    path = shared_export(export)
    meta = [t for (t,) in query_rows(path, "SELECT name FROM sqlite_master WHERE name LIKE '%META_DATA%'")]
    named = [
        v
        for t in meta
        for (v,) in query_rows(path, f"SELECT value FROM {t} WHERE name = 'EXPORT_PRODUCT_VERSION'")
    ]
    assert named == ([why.split()[1]] if why.startswith("(nsys ") else [])
    result = runner.invoke(app, ["health", str(path), "--format", "json"])
    (row,) = [r for r in json.loads(result.stdout)["health"] if r["Check"] == "nsys messages"]
    assert row["Evidence"] == f"the export holds no DIAGNOSTIC_EVENT messages {why}"


def test_nsys_overhead_names_seconds_with_thousands_separated(tmp_path: Path) -> None:
    """A recompiling CPU run's capture spent 2,373.5 ms in nsys's chunk allocation: its evidence said
    "6,217.7 ms in all (Chunk Allocation 2373.5 ms, …)", the two figures written two ways."""
    src = shared_export("cpu-train")
    path = derive(src, tmp_path / "long.sqlite", "UPDATE PROFILER_OVERHEAD SET end = start + 2373500000")
    ((events, name),) = query_rows(
        path,
        "SELECT count(*), s.value FROM PROFILER_OVERHEAD o JOIN StringIds s ON s.id = o.nameId "
        "GROUP BY s.value ORDER BY sum(o.end - o.start) DESC LIMIT 1",
    )
    with open_trace(path, cache=False) as trace:
        evidence = _check(capture_health(trace), "nsys overhead").evidence
    assert f"ms in all ({name} {events * 2373.5:,.1f} ms" in evidence


@pytest.mark.parametrize("export", ALL_EXPORTS)
def test_nsys_overhead_totals_as_in_profiler_overhead(export: str) -> None:
    path = shared_export(export)
    rows = query_rows(
        path,
        "SELECT s.value, count(*), sum(o.end - o.start) FROM PROFILER_OVERHEAD o "
        "JOIN StringIds s ON s.id = o.nameId GROUP BY s.value",
    )
    with open_trace(path) as trace:
        health = capture_health(trace)
    table = health.details["nsys overhead"]
    assert {(n, c, t) for n, c, t in table.itertuples(index=False)} == set(rows)
    total = sum(r[2] for r in rows)
    assert (
        f"{sum(r[1] for r in rows):,} events, {total / 1e6:,.1f} ms in all"
        in _check(health, "nsys overhead").evidence
    )


def test_nsys_overhead_inside_phases_cpu_train() -> None:
    """Each phase range's overlap with the union of nsys's overhead in its process, brute force."""
    path = shared_export("cpu-train")
    over = query_rows(path, "SELECT start, end, globalTid >> 24 FROM PROFILER_OVERHEAD ORDER BY start")
    ranges = query_rows(
        path,
        "SELECT e.start, e.end, e.globalTid >> 24, coalesce(e.text, s.value) FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59",
    )
    union: dict[int, list[list[int]]] = {}
    for s, e, pid in over:
        spans = union.setdefault(pid, [])
        if spans and s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], e)
        else:
            spans.append([s, e])
    want = {}
    for s, e, pid, name in ranges:
        if name in ("forward", "backward", "optimizer"):
            inside = sum(max(0, min(e, b) - max(s, a)) for a, b in union.get(pid, []))
            want[name] = want.get(name, 0) + inside
    with open_trace(path) as trace:
        got = overhead_in_phases(trace)
    assert dict(zip(got["Phase"], got["Overhead (ns)"], strict=True)) == want
    assert want["forward"] > 0  # nsys's OS runtime initialisation falls inside the first forward
    spans = {n: sum(e - s for s, e, _, m in ranges if m == n) for n in want}
    assert dict(zip(got["Phase"], got["Phase time (ns)"], strict=True)) == spans


def test_gpu_work_without_its_launch_torchrun() -> None:
    """Joined by process and correlationId, 31 GPU events of the 2-rank capture have no launching call; every
    one's id is below the first call of its process the capture holds: launched before the capture started,
    in flight when it did, not lost (ok)."""
    path = shared_export("ext/torchrun_2gpu")
    lost, before = {}, {}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        missing_call = (
            f"FROM {table} g WHERE NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "WHERE r.correlationId = g.correlationId AND r.globalTid >> 24 = g.globalPid >> 24)"
        )
        lost[table] = query_rows(path, f"SELECT count(*) {missing_call}")[0][0]
        before[table] = query_rows(
            path,
            f"SELECT count(*) {missing_call} AND g.correlationId < (SELECT min(r.correlationId) FROM "
            "CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.globalTid >> 24 = g.globalPid >> 24)",
        )[0][0]
    with open_trace(path) as trace:
        health = capture_health(trace)
    table = health.details["GPU work without its launch"]
    assert table["Kind"].value_counts().to_dict() == {
        "kernels": lost["CUPTI_ACTIVITY_KIND_KERNEL"],
        "memory copies": lost["CUPTI_ACTIVITY_KIND_MEMCPY"],
        "memory sets": lost["CUPTI_ACTIVITY_KIND_MEMSET"],
    }
    assert len(table) == sum(before.values()) == 31 and table["Before the capture"].all()
    check = _check(health, "launch correlation")
    assert check.status == "ok" and check.evidence.startswith(
        "5,268 of 5,299 GPU events have their launching call; 31 launched before the capture started"
    )


def test_gpu_work_whose_launch_was_lost_fails(tmp_path: Path) -> None:
    """The a100 export with the launching calls of its last two kernels deleted: 2 of its 20 GPU events have
    no launching call although their ids come after the process's first call: lost, not in flight."""
    path = derive(
        shared_export("a100-saxpy-mpi"),
        tmp_path / "lost.sqlite",
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN "
        "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start DESC LIMIT 2)",
    )
    total = sum(
        query_rows(path, f"SELECT count(*) FROM {t}")[0][0]
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
    )
    with open_trace(path, cache=False) as trace:
        check = _check(capture_health(trace), "launch correlation")
    assert check.status == "fail"
    assert check.evidence.startswith(
        f"2 of {total:,} GPU events ({200 / total:.1f}%: 2 kernels) have no launching"
    )


def test_events_whose_name_the_string_table_lacks_fail(tmp_path: Path) -> None:
    """The a100 export with its kernels' names (or its launch and copy calls' names) deleted from StringIds:
    every table leaves those rows out (a note), so the health fails and advise ranks nothing, where it passed
    12 of 12 checks and advise put 812.312 ms of host-wait at stake (723.650 ms with the kernels)."""
    src = shared_export("a100-saxpy-mpi")
    kernels = derive(
        src,
        tmp_path / "kernels.sqlite",
        "DELETE FROM StringIds WHERE id IN (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)",
    )
    calls = derive(
        src,
        tmp_path / "calls.sqlite",
        "DELETE FROM StringIds WHERE id IN (SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        "WHERE correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL))",
    )
    lost_calls = query_rows(
        calls,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId NOT IN (SELECT id FROM StringIds)",
    )[0][0]
    for path, said in ((kernels, "5 kernels"), (calls, f"{lost_calls:,} CUDA API calls")):
        with open_trace(path, cache=False) as trace:
            check = _check(capture_health(trace), "kernel names")
        assert check.status == "fail" and check.evidence.startswith(f"{said} name a string the export's")
    advised = runner.invoke(app, ["advise", str(kernels), "--no-cache"])
    assert advised.exit_code == 1 and advised.stdout == ""
    assert "failed 1 health check (kernel names)" in advised.stderr
    with open_trace(src, cache=False) as sound:
        assert _check(capture_health(sound), "kernel names").status == "ok"


def test_cuda_traced_without_kernels() -> None:
    with open_trace(shared_export("ext/weatherbench2")) as trace:
        health = capture_health(trace)
    check = _check(health, "CUDA kernels")
    assert check.status == "warn"
    assert check.evidence == "23 CUDA API calls and 1 copy or set, but no kernels"
    # its one GPU event is said as one
    assert (
        _check(health, "launch correlation").evidence == "its one kernel, copy or set has its launching call"
    )
    assert _check(health, "GPU work recorded once").evidence == "1 kernel, copy or set, not recorded twice"
    # what the export does not hold is said as such: it traced CUDA (no kernel launch among its calls) and
    # not NVTX, where it said "no CUDA API trace, or a CPU run" and "every NVTX range ends inside the capture"
    assert _check(health, "GPU coverage").evidence == (
        "no kernel launch calls to follow (23 CUDA API calls, none a launch)"
    )
    assert _check(health, "open ranges").evidence == "no NVTX ranges"


def test_nvtx_without_ranges_fails_strict(tmp_path: Path) -> None:
    """The python nvtx >= 0.2.12 trap: NVTX events recorded, not one range. --strict exits 1."""
    src = shared_export("cpu-train")
    path = derive(
        src, tmp_path / "noranges.sqlite", "DELETE FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)"
    )
    left = query_rows(path, "SELECT count(*) FROM NVTX_EVENTS")[0][0]
    with open_trace(path, cache=False) as trace:
        check = _check(capture_health(trace), "NVTX ranges")
    assert check.status == "fail" and check.evidence == f"{left:,} NVTX events but no ranges"
    assert "nvtx==0.2.11" in check.fix
    assert runner.invoke(app, ["health", str(path), "--no-cache"]).exit_code == 0
    strict = runner.invoke(app, ["health", str(path), "--no-cache", "--strict"])
    assert strict.exit_code == 1 and "Traceback" not in strict.output
    assert runner.invoke(app, ["health", str(src), "--strict"]).exit_code == 0


def test_a_range_nsys_closed_at_the_capture_end_is_an_open_range(tmp_path: Path) -> None:
    """nsys gives a range still open when the capture stops the capture's end as its end (2023.4 did so for a
    range a program left open; DLProf's capture has two such ranges)."""
    path = derive(
        shared_export("cpu-train"),
        tmp_path / "left-open.sqlite",
        "UPDATE NVTX_EVENTS SET end = (SELECT duration FROM ANALYSIS_DETAILS) WHERE rowid = "
        "(SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start DESC LIMIT 1)",
    )
    with open_trace(path, cache=False) as trace:
        health = capture_health(trace)
    assert _check(health, "open ranges").evidence == (
        "1 NVTX range never ends (their time runs to the capture's end)"
    )
    with open_trace(shared_export("ext/dlprof_norelu"), cache=False) as trace:
        assert _check(capture_health(trace), "open ranges").evidence.startswith("2 NVTX ranges never end")
    with open_trace(shared_export("cpu-train"), cache=False) as trace:
        assert _check(capture_health(trace), "open ranges").status == "ok"


def test_open_ranges_and_reversed_times(tmp_path: Path) -> None:
    path = derive(
        shared_export("cpu-train"),
        tmp_path / "broken.sqlite",
        "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid IN "
        "(SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start DESC LIMIT 2)",
        "UPDATE OSRT_API SET end = start - 5 "
        "WHERE rowid = (SELECT min(rowid) FROM OSRT_API WHERE eventClass = 27)",
    )
    with open_trace(path, cache=False) as trace:
        health = capture_health(trace)
    assert _check(health, "open ranges").evidence.startswith("2 NVTX ranges never end")
    times = _check(health, "times")
    assert times.status == "fail"
    assert (
        times.evidence == "OS runtime calls: 0 without start or end, 1 ending before they start, 0 negative"
    )


def test_events_ending_after_the_capture_end_fail(tmp_path: Path) -> None:
    """fuser_report1 with its last two kernels and its last CUDA call moved past the capture's end
    (ANALYSIS_DETAILS.duration, the end on the events' clock): the export disagrees with itself, so the times
    check fails naming how many of which kind and the latest, by how much; read again from the cache too."""
    src = shared_export("ext/fuser_report1")
    (end,) = query_rows(src, "SELECT duration FROM ANALYSIS_DETAILS")[0]
    path = derive(
        src,
        tmp_path / "past-the-end.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 2000000000 WHERE rowid IN "
        "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start DESC LIMIT 2)",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = (SELECT duration + 5 FROM ANALYSIS_DETAILS), "
        "end = (SELECT duration + 7 FROM ANALYSIS_DETAILS) WHERE rowid = "
        "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start DESC LIMIT 1)",
    )
    start, last = query_rows(path, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY end DESC")[0]
    assert last > end + 1_000_000_000
    said = (
        f"3 events end after the capture's end at {end / 1e6:,.3f} ms (kernels: 2, CUDA API calls: 1); the "
        f"latest, one of the kernels, starts at {start / 1e6:,.3f} ms and ends at {last / 1e6:,.3f} ms, "
        f"{(last - end) / 1e6:,.3f} ms past it"
    )
    for cache in (False, True, True):  # the export; then its cache written, then read
        with open_trace(path, cache=cache) as trace:
            times = _check(capture_health(trace), "times")
        assert (times.status, times.evidence) == ("fail", said)
    assert "export the report again" in times.fix
    strict = runner.invoke(app, ["health", str(path), "--strict"])
    assert strict.exit_code == 1 and "Traceback" not in strict.output


@pytest.mark.parametrize("export", ALL_EXPORTS)
def test_no_event_of_a_shared_export_ends_after_its_capture(export: str) -> None:
    """Every shared export's events lie inside its capture (time 0 to ANALYSIS_DETAILS.duration; its startTime
    and stopTime are on another clock); the one without ANALYSIS_DETAILS (nsys 2020.3) says its events are
    held to the host's instead, and stays ok."""
    path = shared_export(export)
    span = query_rows(path, "SELECT name FROM sqlite_master WHERE name = 'ANALYSIS_DETAILS'")
    with open_trace(path) as trace:
        times = _check(capture_health(trace), "times")
    assert times.status == "ok"
    if not span:
        assert times.evidence.endswith(
            "the export records no capture span (no ANALYSIS_DETAILS): its events are held to the host's "
            "instead (`host events in the trace's span`, `GPU work in the trace's span`)"
        )
        return
    (end,) = query_rows(path, "SELECT duration FROM ANALYSIS_DETAILS")[0]
    assert times.evidence.endswith(f"; none ends after the capture's end at {end / 1e6:,.3f} ms")


# --- Kineto traces ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["alexnet", "nccl", "diff-control", "diff-test"])
def test_queue_lengths_of_the_hta_fixtures_never_go_below_zero(fixture: str) -> None:
    """Every GPU event of the four shared traces starts after its launching call: no queue goes negative."""
    with open_trace(trace_path(fixture)) as trace:
        check = _check(capture_health(trace), "queue lengths")
    assert check.status == "ok" and check.evidence.endswith("none below zero")


def test_negative_queue_length_fails(tmp_path: Path) -> None:
    """A kernel moved to start before the call that launched it (clocks that disagree): its stream's queue
    goes to -1 there."""
    events = raw_events("alexnet")
    calls = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    kernel = next(e for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] in calls)
    kernel["ts"] = calls[kernel["args"]["correlation"]]["ts"] - 5
    path = write_trace(tmp_path / "early.json", events)
    with open_trace(path, cache=False) as trace:
        health = capture_health(trace)
    check = _check(health, "queue lengths")
    assert check.status == "fail"
    stream = kernel["args"]["stream"]
    per = health.details["negative queue lengths"]
    assert per["Stream"].tolist() == [stream] and per["Min"].tolist() == [-1]
    assert f"stream {stream}: 1 (min -1)" in check.evidence


def test_profiler_steps(tmp_path: Path) -> None:
    with open_trace(trace_path("nccl")) as trace:
        check = _check(capture_health(trace), "profiler steps")
    assert (check.status, check.evidence) == ("ok", "3 steps, #4 to #6, none missing")
    events = [e for e in raw_events("nccl") if e.get("name") != "ProfilerStep#5"]
    path = write_trace(tmp_path / "gap.json", events)
    with open_trace(path, cache=False) as trace:
        check = _check(capture_health(trace), "profiler steps")
    assert (check.status, check.evidence) == ("warn", "steps 4..6, missing 5")


def test_a_trace_without_events_fails(tmp_path: Path) -> None:
    """JSON that reads as a trace but holds no event of any table (an empty traceEvents, instants only, or
    a torch.profiler memory timeline: a list of [ts, action, bytes, category]) was health ok and gave
    `advise` "no findings"; it fails, as an nsys export without events does, and advise ranks nothing."""
    timeline = need(SHARED_KINETO / "memory-timeline" / "memory_timeline.raw.gz")
    empty = write_trace(tmp_path / "empty.json", [])
    instants = write_trace(tmp_path / "instants.json", [{"ph": "i", "ts": 1, "name": "mark"}])
    for path in (timeline, empty, instants):
        with open_trace(path, cache=False) as trace:
            check = _check(capture_health(trace), "invalid events")
        assert check.status == "fail", (path, check)
        assert check.evidence.startswith("no event in any table")
    with open_trace(timeline, cache=False) as trace:
        assert "16,845 not an event" in _check(capture_health(trace), "invalid events").evidence
    advised = CliRunner().invoke(app, ["advise", str(empty)])
    assert advised.exit_code == 1 and "failed 1 health check (invalid events)" in advised.stderr
    with open_trace(trace_path("alexnet")) as trace:
        assert _check(capture_health(trace), "invalid events").status == "ok"


def test_kineto_events_left_out_for_their_times_fail(tmp_path: Path) -> None:
    """nccl with 10 of its 2,700 kernels given a negative dur (an end before the start): the reader leaves
    them out, which only warned, so advise ranked gpu-host-wait at 540.384 ms (540.091 ms with them) as
    sound, while an nsys export's rows ending before they start fail `times`. The check fails now, and
    advise ranks nothing."""
    events = raw_events("nccl")
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for e in kernels[100:110]:
        e["dur"] = -e["dur"]
    path = write_trace(tmp_path / "reversed.json", events)
    with open_trace(path, cache=False) as trace:
        check = _check(capture_health(trace), "invalid events")
    assert check.status == "fail" and "(10 kernel)" in check.evidence
    advised = runner.invoke(app, ["advise", str(path), "--no-cache"])
    assert advised.exit_code == 1 and advised.stdout == ""
    assert "failed 1 health check (invalid events)" in advised.stderr


def test_health_json_carries_details() -> None:
    result = runner.invoke(app, ["health", str(shared_export("ext/fuser_report1")), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["Check"] for r in doc["health"]][:3] == ["capture", "nsys messages", "nsys overhead"]
    assert len(doc["nsys messages"]) == 12


def test_message_text_is_data_not_markup(tmp_path: Path) -> None:
    """A message from the export holding rich markup and a terminal escape prints as it is, escaped."""
    text = "[bold red]lost[/] \x1b]0;owned\x07 events"
    path = derive(
        shared_export("ext/fuser_report1"),
        tmp_path / "markup.sqlite",
        f"UPDATE DIAGNOSTIC_EVENT SET severity = 2, text = '{text}' "
        "WHERE rowid = (SELECT min(rowid) FROM DIAGNOSTIC_EVENT)",
    )
    result = runner.invoke(
        app, ["health", str(path), "--no-cache", "--details", "--wide"], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 0, result.output
    assert "\x1b]0;" not in result.output and "\\x1b]0;owned\\x07" in result.output
    assert "[bold red]lost[/]" in result.output
    with open_trace(path, cache=False) as trace:
        check = _check(capture_health(trace), "nsys messages")
    assert check.status == "fail"  # "lost": nsys says events were lost


def test_an_export_written_twice_is_held_to_nsys_stats_not_to_kineto(tmp_path: Path) -> None:
    """a100-saxpy-mpi with its 5 kernel rows written twice: the evidence names nsys stats (which counts them
    twice too), and neither HTA nor Kineto traces, which are no part of an export."""
    path = derive(
        shared_export("a100-saxpy-mpi"),
        tmp_path / "twice.sqlite",
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL",
    )
    with open_trace(path, cache=False) as trace:
        check = _check(capture_health(trace), "GPU work recorded once")
    assert check.status == "fail"
    assert check.evidence.startswith(
        "5 rows repeat another exactly (5 kernel): the kernel tables count them twice, as nsys stats does, "
        "the breakdown's busy and idle times once; the first, kernel 'saxpy(double *, double *, double *, "
    )
    assert "HTA" not in check.evidence and "Kineto" not in check.evidence
    with open_trace(shared_export("ext/torchrun_2gpu")) as trace:  # work overlapping on a stream
        evidence = _check(capture_health(trace), "GPU work recorded once").evidence
    assert evidence.endswith(
        "(times a little off: the breakdown counts a stream's busy time as the union of its events)"
    )
