"""A finding's figures add up against the capture it was drawn from: its GPU work and idle time fit the time
it reads them in (a harness run's measured steps), each counted in SQL from the export itself; and a finding
rests on something seen, whatever its threshold."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from conftest import H100_DIR, need, shared_export
from export_data import derive
from kineto_data import trace_path

from analysis.advice.findings import Thresholds, advice, findings
from analysis.trace.opening import open_trace

STEPS = "(SELECT id FROM StringIds WHERE value = 'step')"
MEASURED = "(SELECT id FROM StringIds WHERE value = 'measured')"


def _host_wait(path: Path):  # type: ignore[no-untyped-def]
    with open_trace(path) as trace:
        return next(f for f in findings(trace) if f.rule == "gpu-host-wait")


def _stream_work_in_steps(path: Path, stream: int) -> int:
    """Stream `stream`'s kernels, copies and sets (the tables the export has), clipped to the `step` ranges
    inside the `measured` range, in SQL."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        work = " UNION ALL ".join(
            f"SELECT start, end FROM CUPTI_ACTIVITY_KIND_{kind} WHERE streamId = {stream}"
            for kind in ("KERNEL", "MEMCPY", "MEMSET")
            if f"CUPTI_ACTIVITY_KIND_{kind}" in tables
        )
        query = f"""
            WITH m AS (SELECT start, end FROM NVTX_EVENTS WHERE textId IN {MEASURED}),
            s AS (SELECT n.start, n.end FROM NVTX_EVENTS AS n, m
                  WHERE n.textId IN {STEPS} AND n.start >= m.start AND n.end <= m.end),
            w AS ({work})
            SELECT SUM(MAX(0, MIN(w.end, s.end) - MAX(w.start, s.start))) FROM w, s
            WHERE w.start < s.end AND w.end > s.start"""
        return int(db.execute(query).fetchone()[0])


def test_the_host_waits_gpu_work_is_the_measured_steps(h100_captures: dict[str, Path]) -> None:
    """h100-medium: stream 7 ran 492.948 ms of kernels and copies in its 10 measured steps (1,228.598 ms),
    idle the rest (735.693 ms, HTA's categories); its 251 ms of weight copies and its warm-up's kernels are
    not in the steps, and the GPU work and idle said of the steps add up to no more than their time."""
    for path in (need(H100_DIR / "report.sqlite"), h100_captures["tiny-cupti13"]):
        found = _host_wait(path)
        work, span = found.data["GPU work (ns)"], found.data["span (ns)"]
        assert work == _stream_work_in_steps(path, found.data["stream"])
        assert work + sum(found.data["idle (ns)"].values()) <= span * 1.001
    assert (work, span) != (0, 0)


@pytest.mark.parametrize("export", ["a100-saxpy-mpi", "ext/beast1", "ext/torchrun_2gpu", "ext/weatherbench2"])
def test_a_threshold_of_0_fires_no_rule_on_nothing(export: str) -> None:
    """At a threshold of 0 a rule fires on any of its cause, never on none: these exports hold no fp32 GEMM
    (weatherbench2 no kernel at all, one memset: no gap for the GPU to wait in), where fp32-gemm said
    "0 fp32 GEMM kernels take 0.000 ms" and gpu-host-wait "idles other 0.000 ms; 0 gaps"."""
    zero = Thresholds().with_options(["host_wait_share=0", "fp32_gemm_share=0"])
    with open_trace(shared_export(export)) as trace:
        found = findings(trace, zero)
    assert "fp32-gemm" not in {f.rule for f in found}
    assert all(f.at_stake_ns > 0 for f in found if f.rule == "gpu-host-wait")
    assert ("gpu-host-wait" in {f.rule for f in found}) == (export != "ext/weatherbench2")


def test_nsys_overhead_in_phase_reads_the_measured_steps() -> None:
    """h100-medium at overhead_share=0: nsys's own time in its 10 measured steps' phases is 2.995 ms, all in
    backward (672.358 ms of ranges); its forward's 1.188 ms is all in warm-up (dlopen, CUDA's loading in
    step 0), where the finding said "forward: 1.188 ms of 919.754 ms; backward: 3.637 ms of 1,230.370 ms",
    the warm-up's ranges counted as phases no table of a harness run reads."""
    path = need(H100_DIR / "report.sqlite")
    with open_trace(path) as trace:
        found = findings(trace, Thresholds().with_options(["overhead_share=0"]))
    over = next(f for f in found if f.rule == "nsys-overhead-in-phase")
    query = f"""
        WITH m AS (SELECT start, end FROM NVTX_EVENTS WHERE textId IN {MEASURED})
        SELECT SUM(n.end - n.start) FROM NVTX_EVENTS AS n, m
        WHERE n.textId IN (SELECT id FROM StringIds WHERE value = 'backward')
          AND n.start >= m.start AND n.end <= m.end"""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        backward = int(db.execute(query).fetchone()[0])
    assert list(over.data) == ["backward"] and over.data["backward"]["phase (ns)"] == backward
    assert over.at_stake_ns == over.data["backward"]["overhead (ns)"] == 2_994_791


def test_nsys_overhead_in_phase_asks_no_measured_capture_of_one_that_began_with_them(tmp_path: Path) -> None:
    """The fix of nsys's own time in the phases was "leave warm-up out of the capture (--nsys-capture
    measured)", also of a capture that already began with the measured steps (h100-medium with its warm-up
    ranges cut, as `run --nsys-capture measured` records it)."""
    path = need(H100_DIR / "report.sqlite")
    cut = derive(
        path,
        tmp_path / "measured.sqlite",
        "DELETE FROM NVTX_EVENTS WHERE start < "
        f"(SELECT MIN(start) FROM NVTX_EVENTS WHERE textId IN {MEASURED})",
    )
    fixes = []
    for export in (path, cut):
        with open_trace(export) as trace:
            found = findings(trace, Thresholds().with_options(["overhead_share=0"]))
        fixes.append(next(f for f in found if f.rule == "nsys-overhead-in-phase").fix)
    assert "--nsys-capture measured" in fixes[0]
    assert fixes[1] == (
        "the profiler's own time is inside the phase: compare the phase with a run without nsys "
        "(`harness overhead`)"
    )


@pytest.mark.parametrize("name", ["diff-control", "diff-test", "nccl"])
def test_the_shares_of_where_a_finding_happened_add_up(name: str) -> None:
    """Where a finding names phases, its shares add up to the whole (each rounded): diff-control's host-wait
    was "backward 53%, forward 24%" (77%), its other 23% in no phase range unsaid; it is said as
    "outside phases 23%"."""
    with open_trace(trace_path(name)) as trace:
        found = findings(trace)
    shown = [f for f in found if "%" in f.where]
    assert shown
    for f in shown:
        shares = [int(p) for p in re.findall(r"(\d+)%", f.where.split(";")[0])]
        assert abs(sum(shares) - 100) <= len(shares), (f.rule, f.where)
    if name == "diff-control":
        wait = next(f for f in found if f.rule == "gpu-host-wait")
        assert wait.where == "backward 53%, forward 24%, outside phases 23%; steps 1009–1014"


def test_the_harnesss_part_of_the_host_wait_is_said_in_its_parts() -> None:
    """h100-medium: of the 17.041 ms of host-wait left out as the harness's, 15.299 ms follows its phase
    clock's synchronisations and 1.742 ms lies between its steps; it was all said to follow the
    synchronisations, more than the 16.935 ms of GPU idle the instruments' note says they caused."""
    with open_trace(need(H100_DIR / "report.sqlite")) as trace:
        found = advice(trace)
    wait = next(f for f in found.findings if f.rule == "gpu-host-wait")
    after, between = wait.data["after its synchronisations (ns)"], wait.data["between its steps (ns)"]
    assert (after, between) == (15_299_025, 1_741_857)
    assert after + between == wait.data["harness's part (ns)"]
    assert after <= found.instruments.idle_ns and between <= found.instruments.between_ns
    assert "17.041 ms of them are the harness's (15.299 ms after its synchronisations, 1.742 ms between" in (
        wait.evidence
    )


def test_the_host_wait_reads_one_stream_of_one_process(tmp_path: Path) -> None:
    """torchrun_2gpu with its second process's stream 15 renumbered 7, as two ranks each on its own GPU
    number their default streams alike: the rule reads the busiest stream of one process and device
    (273.830 ms of GPU work, 21.464 ms of host-wait, as on the export itself), where it summed both ranks'
    into "stream 7 (the busiest: 541.106 ms of GPU work in a 299.877 ms span)", more than the span."""
    same = derive(
        shared_export("ext/torchrun_2gpu"),
        tmp_path / "same.sqlite",
        *(
            f"UPDATE CUPTI_ACTIVITY_KIND_{kind} SET streamId = 7 WHERE streamId = 15"
            for kind in ("KERNEL", "MEMCPY", "MEMSET")
        ),
    )
    zero = Thresholds().with_options(["host_wait_share=0"])
    with open_trace(same, cache=False) as trace:
        wait = next(f for f in findings(trace, zero) if f.rule == "gpu-host-wait")
    assert (wait.data["GPU work (ns)"], wait.at_stake_ns) == (273_830_229, 21_464_402)
    assert wait.data["GPU work (ns)"] <= wait.data["span (ns)"]
    assert (wait.data["process"], wait.data["device"]) == (144, 0)
    assert wait.evidence.startswith("stream 7 of process 144 (device 0) (the busiest: 273.830 ms")


def test_exposed_communication_is_read_on_each_gpu() -> None:
    """torchrun_2gpu at exposed_comm_share=0: on device 0 of process 144 the NCCL kernels run 17.173 ms with
    no compute kernel of that GPU beside them (all of it), where the rule unioned both GPUs' kernels and
    said 9.012 ms of 19.662 ms (45.8%): the other rank's compute hid this one's exposed collectives."""
    zero = Thresholds().with_options(["exposed_comm_share=0"])
    with open_trace(shared_export("ext/torchrun_2gpu")) as trace:
        found = next(f for f in findings(trace, zero) if f.rule == "exposed-communication")
    assert (found.data["communication (ns)"], found.at_stake_ns) == (17_172_652, 17_172_652)
    assert (found.data["process"], found.data["device"], found.data["GPUs"]) == (144, 0, 2)
    assert found.evidence.startswith("on device 0 of process 144 (the most exposed of 2 GPUs): communication")


def _work_union_of(path: Path, pid: int, lo: int, hi: int) -> int:
    """The union of process `pid`'s kernels, copies and sets inside [lo, hi), in SQL and Python."""
    query = " UNION ALL ".join(
        f"SELECT start, end FROM CUPTI_ACTIVITY_KIND_{k} WHERE (globalPid >> 24) % 16777216 = {pid}"
        for k in ("KERNEL", "MEMCPY", "MEMSET")
    )
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = sorted(db.execute(query).fetchall())
    total, open_ = 0, None
    for s, e in ((max(s, lo), min(e, hi)) for s, e in rows):
        if e <= s:
            continue
        if open_ and s <= open_[1]:
            open_ = (open_[0], max(open_[1], e))
            continue
        total += open_[1] - open_[0] if open_ else 0
        open_ = (s, e)
    return total + (open_[1] - open_[0] if open_ else 0)


def test_a_phase_is_busy_with_its_own_processs_gpu_work(tmp_path: Path) -> None:
    """torchrun_2gpu with a `step` and a `forward` range on process 144 over its work: the forward's GPU is
    busy 273.818 ms (process 144's kernels, copies and sets), where launch-bound counted 287.341 ms, the
    other rank's GPU too; data-loader and host-gap read a process's idle the same way (Seen.idle)."""
    tid = (
        "(SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE (globalTid >> 24) % 16777216 = 144 LIMIT 1)"
    )
    lo, hi = 60_111_000_001, 60_411_999_999
    path = derive(
        shared_export("ext/torchrun_2gpu"),
        tmp_path / "phases.sqlite",
        f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT {lo - 1}, {hi + 1}, 59, "
        f"'step', {tid}",
        f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT {lo}, {hi}, 59, 'forward', "
        f"{tid}",
    )
    every = Thresholds().with_options(["launch_busy_below=1", "launch_share_above=0"])
    with open_trace(path, cache=False) as trace:
        bound = next(f for f in findings(trace, every) if f.rule == "launch-bound")
    assert bound.data["GPU busy (ns)"] == _work_union_of(path, 144, lo, hi) == 273_817_787
