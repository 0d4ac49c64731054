"""`harness advise --rule`: the rows of nsys analyze's six CUDA rules, equal to what Nsight Systems 2022.4
printed: for every shared export (expected/analyze/RULE.csv; no file: nsys skipped the rule), and for the
exports of tests/rule_exports.py, each derived to need one condition of a rule's definition
(tests/oracles/analyze/2022.4/CASE/SPEC.csv, made by tests/make_rule_oracles.py). Each condition is then
taken away from the code in turn, and the export that needs it must no longer give nsys's output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import NSYS_EXPORTS, SHARED_NSYS, need, shared_export
from rule_exports import CASES, Case, build, oracle_name
from typer.testing import CliRunner

from analysis.advice import nsys_gpu_rules, nsys_query, nsys_rules
from analysis.advice.nsys_rules import RULES, Skipped, parse_rule, run_rule
from analysis.errors import AnalysisError
from analysis.trace.opening import open_trace
from harness.cli import app

EXPORTS = [n for n in NSYS_EXPORTS if n != "cpu-train"]  # the GPU exports
SHARED_CASES = [
    *((r, r) for r, rule in RULES.items() if rule.nsys == "2022.4"),
    ("gpu-starv_gap1", "gpu-starv:gap=1"),
]
ORACLES = Path(__file__).parent / "oracles" / "analyze"
# (case, spec, version): every spec under the nsys whose output its rule name gives (2022.4's names:
# 2022.4; 2023.4's names: 2023.4)
DERIVED = [
    (c, spec, v) for c in CASES for spec in c.specs for v in c.versions if v == RULES[spec.split(":")[0]].nsys
]
runner = CliRunner()


def _advise(export: Path, spec: str) -> Any:
    result = runner.invoke(app, ["advise", str(export), "--rule", spec, "--format", "csv"])
    assert result.exit_code == 0, result.output
    return result


def _assert_as_nsys(export: Path, spec: str, printed: str | None) -> None:
    """`harness advise --rule SPEC` prints what nsys printed: the same CSV bytes; nothing where nsys found
    nothing; where nsys skipped the rule (`printed` None or a SKIPPED line), nothing and a one-line note."""
    result = _advise(export, spec)
    if printed is None or printed.startswith("SKIPPED"):
        assert result.stdout == ""
        assert "skipped" in result.stderr and "(nsys skips it too)" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        return
    assert result.stdout == printed


@pytest.fixture(scope="module")
def derived(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Case], Path]:
    """Each case's export, built once (a case without SQL reads the fixture itself)."""
    folder, built = tmp_path_factory.mktemp("rule-exports"), {}

    def get(case: Case) -> Path:
        if case.name not in built:
            source = shared_export(case.source)
            built[case.name] = (
                build(case, SHARED_NSYS, folder / f"{case.name}.sqlite") if case.sql else source
            )
        return built[case.name]

    return get


def _case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def _oracle(case: Case, spec: str, version: str = "2022.4") -> str:
    return (ORACLES / version / case.name / oracle_name(spec)).read_text()


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize(("oracle", "spec"), SHARED_CASES, ids=[c[0] for c in SHARED_CASES])
def test_rule_csv_equals_nsys_analyze(export: str, oracle: str, spec: str) -> None:
    """The same bytes as `nsys analyze -r SPEC -f csv`: headers, rows, order, rounding."""
    expected = SHARED_NSYS / export / "expected" / "analyze" / f"{oracle}.csv"
    _assert_as_nsys(shared_export(export), spec, expected.read_text() if expected.exists() else None)


@pytest.mark.parametrize(("case", "spec", "version"), DERIVED, ids=[f"{c.name}-{s}" for c, s, _ in DERIVED])
def test_derived_export_equals_nsys_analyze(
    derived: Callable[[Case], Path], case: Case, spec: str, version: str
) -> None:
    _assert_as_nsys(derived(case), spec, _oracle(case, spec, version))


def test_where_2023_4_differs() -> None:
    """Under 2022.4's names nsys 2023.4 prints what 2022.4 does, except: it skips the copy and memset
    rules on exports without ENUM_CUDA_MEM_KIND (the A100 and dlprof cases), and its gpu-low-util no
    longer merges idle chunks across devices and processes (gpu_devices, gpu_processes, gpu_util_chunks)."""
    both = [(c, s) for c in CASES if len(c.versions) == 2 for s in c.specs]
    differ = {(c.name, s) for c, s in both if _oracle(c, s) != _oracle(c, s, "2023.4")}
    skipped = {
        (c.name, s)
        for c, s in both
        if _oracle(c, s, "2023.4").startswith("SKIPPED: report.sqlite does not contain ENUM_CUDA_MEM_KIND")
    }
    assert {c for c, _ in skipped} == {
        c.name
        for c, _ in both
        if c.source in ("a100-saxpy-mpi", "ext/dlprof_norelu")
        and any(s.startswith(("cuda-sync-memcpy", "cuda-async", "cuda-sync-memset")) for s in c.specs)
    }
    assert differ - skipped == {
        ("gpu_devices", "gpu-low-util"),
        ("gpu_processes", "gpu-low-util"),
        ("gpu_util_chunks", "gpu-low-util:chunks=3:threshold=101"),
        ("gpu_util_chunks", "gpu-low-util:chunks=7:threshold=101"),
    }


def test_the_oracles_hold_rows() -> None:
    """The comparisons above compare something: 18 of the 44 shared oracle files have rows, 50 at most;
    of the derived ones, all but the few where nsys found nothing or skipped."""
    need(SHARED_NSYS)
    files = sorted(SHARED_NSYS.glob("**/expected/analyze/*.csv"))
    with_rows = [f for f in files if f.read_text().strip()]
    assert (len(files), len(with_rows)) == (44, 18)
    assert max(len(f.read_text().splitlines()) - 1 for f in with_rows) == 50
    printed = {(c.name, s): _oracle(c, s, v) for c, s, v in DERIVED}
    skipped = {k for k, v in printed.items() if v.startswith("SKIPPED")}
    empty = {k for k, v in printed.items() if not v}
    assert (len(printed), len(skipped), len(empty)) == (135, 15, 24)
    assert ("h100_medium", "cuda-sync-memcpy") in empty  # its copies are all cudaMemcpyAsync
    # every derived case, and every option case, has rows where it matters
    assert {c for c, _ in empty | skipped} <= {c.name for c in CASES if c.name.startswith("new_names_")} | {
        "a100_options",  # rows=0, chunks=0
        "h100_medium",
    }


# --- each condition, taken away ---------------------------------------------------------------------------


def _all(df: pd.DataFrame, *_: Any) -> np.ndarray:
    return np.ones(len(df), dtype=bool)


def _wrap(module: Any, name: str, after: Callable[..., Any]) -> tuple[Any, str, Callable[..., Any]]:
    """Replace module.name by a function that passes its result through `after`."""
    original = getattr(module, name)
    return module, name, lambda *a, **k: after(original(*a, **k), *a)


def _same_process(joined: pd.DataFrame, *_: Any) -> pd.DataFrame:
    return joined[nsys_query.pid_of(joined["global_pid"]) == joined["call_pid"]]


def _process_only(ids: np.ndarray, range_tid: int, threads: bool) -> np.ndarray:
    return (ids >> 24) == (range_tid >> 24)


def _calls_in_window(q: nsys_query.Query) -> pd.DataFrame:
    return q.frame("runtime", ["correlation_id", "name_id"], "global_tid")


def _first_op_context(ops: pd.DataFrame) -> pd.DataFrame:
    first = ops.drop_duplicates(["device", "pid"]).set_index(["device", "pid"])["context"]
    span = ops.groupby(["device", "pid"], sort=True).agg(lo=("start", "min"), hi=("end", "max"))
    return span.join(first).reset_index()


def _gaps_by_start_order(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each row's end with the next row's start, rows taken by start: wrong where work overlaps."""
    order = np.argsort(starts, kind="stable")
    lo, hi = ends[order][:-1], starts[order][1:]
    j = np.flatnonzero(lo < hi)
    return order[j], lo[j], hi[j]


WITHOUT: list[tuple[str, str, str, tuple[Any, str, Any]]] = [
    # (condition, case, spec, (module, attribute, stand-in without the condition))
    ("sync-api names, any case", "sync_api_names", "cuda-sync-api",
     (nsys_rules, "SYNC_API_NAME", lambda s: "Synchronize" in s)),
    ("sync-memcpy: small HtoD out", "memcpy_small_htod", "cuda-sync-memcpy",
     (nsys_rules, "not_small_htod", _all)),
    ("sync-memcpy: 64,000 bytes, not 64 KiB", "memcpy_small_htod", "cuda-sync-memcpy",
     (nsys_rules, "SMALL_HTOD_BYTES", 65_536)),
    ("sync-memcpy: within-device out", "memcpy_within_device", "cuda-sync-memcpy",
     (nsys_rules, "not_within_device", _all)),
    ("sync-memcpy: names, any case", "memcpy_names", "cuda-sync-memcpy",
     (nsys_rules, "SYNC_MEMCPY_NAME", lambda s: s.startswith("cudaMemcpy") and "Async" not in s)),
    ("sync-memcpy: calls read whole", "memcpy_any_kind", "cuda-sync-memcpy:start=1233650000",
     (nsys_rules, "every_call", _calls_in_window)),
    ("copies join calls of any process", "memcpy_other_process", "cuda-sync-memcpy",
     _wrap(nsys_rules, "same_call", _same_process)),
    ("a copy's calls by name id", "memcpy_other_process", "cuda-sync-memcpy",
     _wrap(nsys_rules, "same_call", lambda j, *_: j.sort_values(["op", "call"], kind="stable"))),
    ("async-memcpy: names", "memcpy_names", "cuda-async-memcpy",
     (nsys_rules, "ASYNC_MEMCPY_NAME", lambda s: s.startswith("cudaMemcpyAsync"))),
    ("async-memcpy: pageable", "memcpy_async_pageable", "cuda-async-memcpy",
     (nsys_rules, "touches_pageable", _all)),
    ("sync-memset: names", "memset_sync", "cuda-sync-memset",
     (nsys_rules, "SYNC_MEMSET_NAME", lambda s: "emset" in s)),
    ("sync-memset: pinned or managed", "memset_sync", "cuda-sync-memset",
     (nsys_rules, "pinned_or_managed", _all)),
    ("GPU work starts above 0", "gpu_start_zero", "gpu-starv:gap=1",
     (nsys_gpu_rules, "started", _all)),
    ("flush overhead by exact name", "gpu_overhead", "gpu-starv:gap=1",
     (nsys_gpu_rules, "FLUSH_OVERHEAD", (*nsys_gpu_rules.FLUSH_OVERHEAD, "CUDA profiling data flush"))),
    ("overhead strictly inside", "gpu_overhead", "gpu-low-util:threshold=101",
     (nsys_gpu_rules, "strictly_inside", _all)),
    ("gap longer than gap=", "gpu_gap_threshold", "gpu-starv",
     (nsys_gpu_rules, "longer", lambda d, n: d >= n)),
    ("sorted ends with the next start", "gpu_overlap", "gpu-starv:gap=1",
     (nsys_gpu_rules, "idle_gaps", _gaps_by_start_order)),
    ("a gap's context", "gpu_contexts", "gpu-starv:gap=1",
     _wrap(nsys_gpu_rules, "idle_gaps", lambda r, *_: (np.zeros_like(r[0]), r[1], r[2]))),
    ("a span's context", "gpu_contexts", "gpu-low-util",
     (nsys_gpu_rules, "_spans", _first_op_context)),
    ("idle chunks merged across devices", "gpu_devices", "gpu-low-util",
     (nsys_gpu_rules, "MERGE_IDLE", {"2022.4": False})),
    ("idle chunks merged across processes", "gpu_processes", "gpu-low-util",
     (nsys_gpu_rules, "MERGE_IDLE", {"2022.4": False})),
    ("SQLite's round", "gpu_util_round", "gpu-low-util:chunks=1",
     (nsys_gpu_rules, "sqlite_round1", lambda x: round(x, 1))),
    ("below threshold=", "gpu_util_threshold", "gpu-low-util:chunks=2:threshold=50",
     (nsys_gpu_rules, "below", lambda p, t: p <= t)),
    ("ceil chunk size", "gpu_util_chunks", "gpu-low-util:chunks=3:threshold=101",
     (nsys_gpu_rules, "chunk_size", lambda span, n: float(span // n))),
    ("first runs kept", "a100_options", "gpu-low-util:rows=2",
     (nsys_gpu_rules, "first_runs", lambda q, r: q.limit(r.sort_values(["In-Use (%)", "Duration (ns)"])))),
    ("nvtx= on a thread", "nvtx_thread", "cuda-sync-api:nvtx=token_0_processing",
     (nsys_query, "in_range_thread", _process_only)),
    # nsys 2023.4's names
    ("2023.4: skipped without ENUM_CUDA_MEM_KIND", "new_names_a100-saxpy-mpi", "cuda_memcpy_sync",
     _wrap(nsys_rules, "_lacking", lambda lacking, *_: [x for x in lacking if "ENUM" not in x])),
    ("2023.4: ties in the order of the calls", "new_names_torchrun_2gpu", "cuda_memcpy_async",
     (nsys_rules, "PAIR_ORDER", {"2023.4": nsys_rules.PAIR_ORDER["2022.4"]})),
    ("2023.4: green context 0 is none", "memcpy_async_pageable_2023", "cuda_memcpy_async",
     (nsys_rules, "green_context", lambda ids: ids)),
    ("2023.4: a NULL kind prints empty", "memcpy_async_pageable_2023", "cuda_memcpy_async",
     (nsys_rules, "NULL_KIND", {"2023.4": "None"})),
    ("2023.4: idle chunks not merged", "gpu_devices_2023", "gpu_time_util",
     (nsys_gpu_rules, "MERGE_IDLE", {"2023.4": True})),
    ("2023.4: thread=", "nvtx_thread_2023", "cuda_api_sync:thread=2440842",
     (nsys_query, "chosen", lambda ids, pid, tid, threads: np.ones(len(ids), dtype=bool))),
    ("2023.4: nvtx=TEXT/N", "nvtx_domains_2023", "cuda_memcpy_sync:nvtx=copies/1",
     (nsys_query, "_range_index", lambda nvtx: (nvtx, 0))),
]  # fmt: skip


@pytest.mark.parametrize(("condition", "case", "spec", "change"), WITHOUT, ids=[w[0] for w in WITHOUT])
def test_each_condition_is_needed(
    monkeypatch: pytest.MonkeyPatch,
    derived: Callable[[Case], Path],
    condition: str,
    case: str,
    spec: str,
    change: tuple[Any, str, Any],
) -> None:
    """With the condition, the derived export gives nsys's output (the test above); without it, not."""
    printed = _oracle(_case(case), spec, RULES[spec.split(":")[0]].nsys)
    monkeypatch.setattr(*change)
    result = runner.invoke(
        app, ["advise", str(derived(_case(case))), "--rule", spec, "--format", "csv", "--no-cache"]
    )
    assert result.exit_code != 0 or result.stdout != printed


def test_every_case_is_needed() -> None:
    """Each derived case holds a condition taken away above, or an option or export of its own."""
    by_options = {"a100_options", "llama3_options", "h100_medium", "nvtx_domains"}
    new_names = {c.name for c in CASES if c.name.startswith("new_names_") or c.name.endswith("_2023")}
    assert {c.name for c in CASES} - {w[1] for w in WITHOUT} - new_names <= by_options


# --- options and what nsys refuses ------------------------------------------------------------------------


def test_rows_option_and_nsys_syntax() -> None:
    with open_trace(shared_export("ext/llama3_realsim")) as trace:
        assert len(run_rule(trace, "cuda-sync-api")) == 50  # the default limit, as in the oracle
        assert len(run_rule(trace, "cuda-sync-api:rows=5")) == 5
        everything = run_rule(trace, "cuda-sync-api:rows=-1")
        assert len(everything) == 512  # every cudaDeviceSynchronize of the export
        assert everything["Duration (ns)"].is_monotonic_decreasing
        gaps = run_rule(trace, "gpu-starv:gap=1:rows=-1")
        assert len(gaps) == 512 and (gaps["Duration (ns)"] > 1_000_000).all()
        assert run_rule(trace, "gpu-starv:gap=1").equals(gaps.head(50))  # the 50 longest, not the first


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpu-stav", "unknown rule 'gpu-stav'"),
        ("gpu-starv:gapp=3", "rule gpu-starv has no option 'gapp'"),
        ("gpu-low-util:chunks=x", "option chunks takes an integer, not 'x'"),
        ("gpu-low-util:chunks=1001", "chunks must be between 1 and 1000, not 1001"),
        ("gpu-low-util:chunks=-3", "chunks must be between 1 and 1000, not -3"),
        ("gpu-starv:rows", "option rows takes a value"),
        ("cuda-sync-api:start=x", "option start takes an integer, not 'x'"),
    ],
)
def test_bad_rule_specs(spec: str, message: str) -> None:
    with pytest.raises(AnalysisError, match=message):
        parse_rule(spec)
    result = runner.invoke(app, ["advise", str(shared_export("ext/beast1")), "--rule", spec])
    assert result.exit_code != 0
    assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpu-starv:start=20:end=10", "start=20 is after end=10"),
        ("gpu-starv:nvtx=no_such_range", "NVTX range 'no_such_range' could not be found"),
        ("gpu-starv:nvtx=saxpy@MPI", "NVTX range 'saxpy@MPI' could not be found"),  # saxpy: default domain
    ],
)
def test_windows_nsys_refuses(spec: str, message: str) -> None:
    result = runner.invoke(app, ["advise", str(shared_export("a100-saxpy-mpi")), "--rule", spec])
    assert result.exit_code == 1
    assert message in result.stderr and "Traceback" not in result.output


def test_skipped_says_what_is_missing() -> None:
    with (
        open_trace(shared_export("ext/weatherbench2")) as trace,
        pytest.raises(Skipped, match="has no memcpy"),
    ):
        run_rule(trace, "cuda-async-memcpy")


def test_a_rule_asked_of_a_kineto_trace_is_an_error_in_one_line() -> None:
    """`advise TRACE --rule gpu-starv` of a Kineto trace printed a note and exited 0, as for a rule nsys
    skips because an export lacks a table: a script took it for a rule that ran and found nothing. nsys
    cannot run its rules on a Kineto trace at all: the rule asked for is refused, one line, exit 1."""
    trace_path = (
        SHARED_NSYS.parent / "kineto" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
    )
    need(trace_path)
    for fmt in ("csv", "json", "table"):
        result = runner.invoke(app, ["advise", str(trace_path), "--rule", "gpu-starv", "--format", fmt])
        assert result.exit_code == 1 and result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert (
            line.startswith("error: --rule gpu-starv: nsys's rules read nsys exports")
            and "Traceback" not in line
        )


def test_a_rule_asked_of_a_kineto_trace_names_the_trace_as_users_know_it() -> None:
    """`advise TRACE --rule cuda-sync-api` of a torch.profiler trace said it "is a kineto-json trace", the
    reader's own id of the format: it is named as users know it, a torch.profiler (Kineto) trace."""
    trace_path = SHARED_NSYS.parent / "kineto" / "nccl" / "nccl_data.json.gz"
    need(trace_path)
    for fmt in ("csv", "json", "table"):
        result = runner.invoke(app, ["advise", str(trace_path), "--rule", "cuda-sync-api", "--format", fmt])
        assert result.exit_code == 1 and result.stdout == ""
        (line,) = result.stderr.replace("\n      ", " ").splitlines()
        assert line.startswith("error: --rule cuda-sync-api: nsys's rules read nsys exports"), line
        assert "is a torch.profiler (Kineto) trace: without --rule" in line and "kineto-json" not in line


def test_a_skipped_rule_in_json_is_a_document_that_says_so() -> None:
    """`advise -r RULE --format json` of a rule nsys skips printed nothing on standard output, where one rule
    that found nothing prints `[]` and two rules a document with `skipped`: a script's json.loads failed."""
    import json

    weather = str(shared_export("ext/weatherbench2"))
    one = runner.invoke(app, ["advise", weather, "--rule", "cuda-async-memcpy", "--format", "json"])
    assert one.exit_code == 0, one.output
    why = f"cuda-async-memcpy skipped: {weather} has no memcpy (nsys skips it too)"
    assert json.loads(one.stdout) == {"skipped": [{"table": "cuda-async-memcpy", "reason": why}]}
    both = runner.invoke(app, ["advise", weather, "-r", "cuda-async-memcpy", "-r", "gpu-starv", "-f", "json"])
    assert json.loads(both.stdout)["skipped"] == json.loads(one.stdout)["skipped"]
    found = runner.invoke(
        app, ["advise", str(shared_export("a100-saxpy-mpi")), "-r", "gpu-starv", "-f", "json"]
    )
    assert json.loads(found.stdout) == []  # ran and found nothing: no rows, as before
    csv = runner.invoke(app, ["advise", weather, "--rule", "cuda-async-memcpy", "--format", "csv"])
    assert csv.exit_code == 0 and csv.stdout == ""  # nsys prints nothing for it


def test_like_is_sqlite_like() -> None:
    """SQLite's LIKE folds ASCII letters only: the Kelvin sign is not a K, as it is to Python's re."""
    assert nsys_query.like("cudaMemcpy%Async%").fullmatch("CUDAMEMCPY2DASYNC_v3020")
    assert nsys_query.like("a_c").fullmatch("abc") and not nsys_query.like("a_c").fullmatch("abbc")
    assert not nsys_query.like("%k%").fullmatch("\u212a")
