"""`harness diff A B`: resolve each side (a run id, `baseline:NAME`, or an export / report / trace path) and
compute the diff tables of analysis.compare.diff for them (of two exports: analysis.compare.export_diff's),
their verdicts and gate, and the page that draws them (analysis.dashboard.diff).

A run brings its per-step timings (for verdicts) and, when it was profiled and its export is still there,
its trace (for kernel / NVTX / operator tables). A path brings a trace only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.compare import diff as d
from analysis.compare import export_diff as diffing
from analysis.compare.overhead import STEP_SUM
from analysis.dashboard import diff as diff_page
from analysis.tables import nvtx
from harness.core.errors import HarnessError, UsageError
from harness.experiments.opening import open_report

if TYPE_CHECKING:
    import pandas as pd

    from analysis.compare.diff import PhaseVerdict
    from analysis.compare.export_diff import ExportDiff, Verdict
    from analysis.dashboard.page import Dashboard
    from analysis.trace.trace import Trace
    from harness.store.schema import Run

BASELINE_PREFIX = "baseline:"
# what a path names, so that a missing one is "no such file", not "no run with id"
PATH_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep", ".json", ".gz")


@dataclass
class Side:
    label: str
    run: Run | None = None
    trace_path: Path | None = None


@dataclass
class DiffResult:
    a: Side
    b: Side
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    verdicts: list[PhaseVerdict] | None = None
    notes: list[str] = field(default_factory=list)


def resolve(spec: str, store_factory: object) -> Side:
    """A side from what the user typed. `store_factory()` opens the results database when a run is named."""
    if spec.startswith(BASELINE_PREFIX):
        name = spec[len(BASELINE_PREFIX) :]
        run = store_factory().get_baseline(name)  # type: ignore[attr-defined]
        return Side(f"{spec} ({run.id})", run=run, trace_path=_run_trace(run))
    path = Path(spec)
    if path.exists():
        if path.is_dir():
            raise HarnessError(f"{spec} is a folder; give an export, report or trace file", exit_code=2)
        return Side(spec, trace_path=path)
    if "/" in spec or spec.endswith(PATH_SUFFIXES):  # meant as a file: say so, not "no such run"
        raise HarnessError(f"no such file: {spec} (and a path is not a run id)", exit_code=2)
    run = store_factory().get(spec)  # type: ignore[attr-defined]
    return Side(run.id, run=run, trace_path=_run_trace(run))


def _run_trace(run: Run) -> Path | None:
    for name in (run.nsys_sqlite, run.nsys_rep):
        if name and Path(name).is_file():
            return Path(name)
    return None


def steps_frame(run: Run) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        [(s.step, s.phase, s.duration_ns, s.warmup) for s in run.step_timings],
        columns=["step", "phase", "duration_ns", "warmup"],
    )


def tokens_frame(run: Run) -> pd.DataFrame:
    """A generate run's decoded tokens' times as stored (step, duration_ns, warmup): none for other runs."""
    import pandas as pd

    rows = [
        (s["step"], ns, s["warmup"])
        for s in (run.summary or {}).get("token_timings", [])
        for ns in s["durations_ns"]
    ]
    return pd.DataFrame(rows, columns=["step", "duration_ns", "warmup"])


def _open(path: Path, cache: bool) -> Trace:

    return open_report(path, cache=cache)


def _has_steps(trace: Trace) -> bool:
    if not trace.has("nvtx"):
        return False
    names = trace.frame("nvtx", ["name"])["name"].astype(str)
    return bool(names.str.startswith("ProfilerStep#").any())


def diff(a: Side, b: Side, *, cache: bool = True) -> DiffResult:
    """Every table both sides allow: verdicts for two runs; kernels, NVTX ranges, operators for two traces."""

    result = DiffResult(a, b)
    for side in (a, b):
        if side.run is not None and side.run.status == "degraded":
            result.notes.append(
                f"{side.label} is degraded: {side.run.error or 'its capture failed its health checks'}; its "
                "step times stand, the tables drawn from its capture do not"
            )
        elif side.run is not None and side.run.status != "ok":
            result.notes.append(f"{side.label} {_ended(side.run)}: its steps are those it measured before")
    if a.run is not None and b.run is not None:
        steps_a, steps_b = steps_frame(a.run), steps_frame(b.run)
        result.verdicts = d.phase_verdicts(steps_a, steps_b)
        serving = d.serving_verdicts(steps_a, steps_b, tokens_frame(a.run), tokens_frame(b.run))
        if serving:
            result.verdicts += serving
            result.notes.append(d.SERVING_NOTE)
        result.notes += d.unlike_steps(steps_a, steps_b, (f"A ({a.label})", f"B ({b.label})"))
    if a.trace_path is not None and b.trace_path is not None:
        with _open(a.trace_path, cache) as ta, _open(b.trace_path, cache) as tb:
            for title, fn, frame in (
                ("Kernels", d.diff_kernels, "kernels"),
                ("NVTX ranges", d.diff_ranges, "nvtx"),
                ("CPU operators", d.diff_ops, "cpu_ops"),
            ):
                if ta.has(frame) or tb.has(frame):
                    result.tables.append((title, fn(ta, tb)))
            if ta.format == tb.format == "kineto-json" and _has_steps(ta) and _has_steps(tb):
                result.tables.append(
                    (
                        "First profiler step, GPU events (HTA TraceDiff, GPU)",
                        d.diff_step(ta, tb, gpu_only=True),
                    )
                )
                result.tables.append(("First profiler step, all events (HTA TraceDiff)", d.diff_step(ta, tb)))
            result.notes += [n for n in dict.fromkeys([*ta.notes, *tb.notes]) if n not in result.notes]
    elif a.run is None or b.run is None:
        missing = a if a.trace_path is None else b
        raise HarnessError(
            f"nothing to compare: {missing.label} is a run without an export, and the other side is a trace; "
            "give two runs, or two exports / traces",
            exit_code=2,
        )
    else:
        for side in (a, b):
            if side.trace_path is None:
                result.notes.append(
                    f"{side.label} has no export: phase verdicts only (profile it with --nsys)"
                )
    return result


def check_gate(gate: float | None, a: Side, b: Side) -> None:
    """UsageError for a `--gate` that cannot gate: not a finite percentage, or not between two runs."""
    import math

    if gate is None:
        return
    if not math.isfinite(gate):
        raise UsageError(f"--gate {gate:g} is not a percentage: give a finite number, e.g. --gate 5")
    if (a.run is None) != (b.run is None):
        raise UsageError("--gate needs two runs or two exports (a run and an export give no verdict)")


def _ended(run: Run) -> str:
    """How a run that did not end ok ended, in words: "ended oom (CUDA out of memory)"."""
    return f"ended {run.status}" + (f" ({run.error})" if run.error else "")


def gate_refusal(result: DiffResult) -> str | None:
    """Why a gate fails before any verdict: a side with no measured steps (a failed or OOM run) cannot
    show it did not regress; nor can one that did not end ok: a degraded one (its capture failed its
    health checks: what it was profiled for cannot be trusted, so neither can a pass), one that ran out of
    memory, failed or was interrupted (its steps are those before it stopped), whatever steps it holds;
    nor two runs with no phase in common."""
    for side in (result.a, result.b):
        run = side.run
        if run is None:
            continue
        if run.status == "degraded":
            return (
                f"gate: {side.label} is degraded ({run.error or 'its capture failed its health checks'}): "
                "a gate passes only between runs whose captures can be trusted; run it again"
            )
        measured = sum(1 for s in run.step_timings if not s.warmup)
        if not measured:
            return (
                f"gate: {side.label} has no measured steps (status {run.status}): a gate needs measured "
                "steps on both sides; run it again"
            )
        if run.status != "ok":
            return (
                f"gate: {side.label} {_ended(run)}: a gate passes only between runs that ended ok; run it "
                "again"
            )
    if result.verdicts is not None and all(v.phase == STEP_SUM for v in result.verdicts):
        return f"gate: {result.a.label} and {result.b.label} time no phase in common: nothing to gate"
    return None


def verdict_table(result: DiffResult) -> pd.DataFrame | None:
    """The phase verdicts of two runs as a table (None: no verdicts, two traces)."""
    return d.verdict_table(result.verdicts) if result.verdicts is not None else None


def gate_failures(result: DiffResult, gate: float) -> list[PhaseVerdict]:
    """The phases of two runs that regressed beyond `gate` percent."""
    return d.gate_failures(result.verdicts, gate) if result.verdicts is not None else []


def write_page(out: Path, result: DiffResult, top: int | None, gate: float | None) -> Dashboard:
    """The page of the diff (its largest changes, the verdicts), written to `out` (OSError as raised)."""
    panels = diff_page.diff_panels(
        result.tables, verdict_table(result), top=top or diff_page.TOP, gate_pct=gate
    )
    return diff_page.write_diff_page(out, panels, a=result.a.label, b=result.b.label, notes=result.notes)


def diff_exports(
    a: Side, b: Side, *, cache: bool, iteration_range: str | None, iteration: str | None, warmup: int,
    by: str, raw_names: bool = False,
) -> ExportDiff:  # fmt: skip
    """Two exports compared (analysis.compare.export_diff): a verdict, comparability, per-name tables; NVTX
    ranges grouped as the NVTX tables group them (`by`, or as recorded with `raw_names`)."""
    assert a.trace_path is not None and b.trace_path is not None
    with _open(a.trace_path, cache) as ta, _open(b.trace_path, cache) as tb:
        return diffing.diff_exports(
            ta, tb, labels=(a.label, b.label), iteration_range=iteration_range, iteration=iteration,
            warmup=warmup, by=nvtx.grouping(by, raw_names),
        )  # fmt: skip


def gate_failed(verdict: Verdict, gate: float) -> bool:
    """Whether two exports' verdict is a regression beyond `gate` percent."""
    return diffing.gate_failed(verdict, gate)
