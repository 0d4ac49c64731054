"""`harness diff A B`: resolve each side (a run id, `baseline:NAME`, or an export / report / trace path) and
compute the diff tables of analysis.compare.diff for them (of two exports: analysis.compare.export_diff's),
their verdicts and gate, and the page that draws them (analysis.dashboard.diff).

A run brings its per-step timings (for verdicts) and, when it was profiled and its export is still there,
its trace (for kernel / NVTX / operator tables). A path brings a trace only. A side may be several runs
(`A1,A2,A3`): their verdicts come from the spread between runs. One run a side is judged against the drift
between runs measured for its configuration on its machine (harness.experiments.drift), and gets no verdict
where none was measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.advice.verdict import failed_captures
from analysis.compare import diff as d
from analysis.compare import export_diff as diffing
from analysis.compare.drift import RUNS, basis_words
from analysis.compare.export_diff import gate_failed as gate_failed
from analysis.compare.overhead import STEP_SUM
from analysis.dashboard import diff as diff_page
from analysis.errors import ExportError, comma_list
from analysis.tables import nvtx
from analysis.trace.exports import files_read, open_source
from analysis.trace.opening import require_events
from harness.core.errors import EMPTY_RUN_ID, HarnessError, UsageError
from harness.core.records import GENERATE_ONLY, PROGRAM_MODE, UNTIMED_FIELDS, names_a_file
from harness.execution.nsys import export_report
from harness.experiments.drift import compared_drift, key_of
from workloads.names import counted

if TYPE_CHECKING:
    import pandas as pd

    from analysis.compare.diff import PhaseVerdict
    from analysis.compare.drift import Drift
    from analysis.compare.export_diff import ExportDiff
    from analysis.dashboard.page import Dashboard
    from analysis.trace.trace import Trace
    from harness.store.results import ResultsStore
    from harness.store.schema import Run

BASELINE_PREFIX = "baseline:"
REPEATS_PREFIX = "repeats-"  # the experiment of `run --repeats N`
export_gate_blind = diffing.gate_blind  # two exports' gate that passed blind, as the CLI says it


@dataclass
class Side:
    label: str
    run: Run | None = None  # the run (the first, where the side is several)
    trace_path: Path | None = None
    runs: list[Run] = field(default_factory=list)  # every run of the side (one, or several: `A1,A2,A3`)

    def __post_init__(self) -> None:
        if self.run is not None and not self.runs:
            self.runs = [self.run]

    def inputs(self) -> list[Path]:
        """The files reading its trace may read (a report's exports beside it too): a page is never written
        over one."""
        return files_read(self.trace_path) if self.trace_path is not None else []


@dataclass
class DiffResult:
    a: Side
    b: Side
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    verdicts: list[PhaseVerdict] | None = None
    notes: list[str] = field(default_factory=list)
    drift: dict[str, Drift] | None = None  # the drift measured for the sides' configurations (two runs)
    drift_of_sides: bool = False  # the sides' runs are among those it was measured from (their experiment's)


def resolve(spec: str, store_factory: object) -> Side:
    """A side from what the user typed. `store_factory()` opens the results database when a run is named.
    Several runs, comma-separated (`A1,A2,A3`), are one side: runs of one configuration; so are the runs of
    `run --repeats N` named by their experiment (`repeats-…`)."""
    if spec.startswith(REPEATS_PREFIX):
        ids = list(store_factory().runs(experiment=spec)["run_id"])  # type: ignore[attr-defined]
        if not ids:
            raise UsageError(f"no runs in experiment {spec!r} (`harness runs` lists the experiments' runs)")
        spec = ",".join(ids)
    parts = comma_list("a side", spec) if "," in spec else [spec]
    if not parts:  # `,`
        raise UsageError(EMPTY_RUN_ID)
    if len(parts) > 1:
        sides = [_resolve_one(p, store_factory) for p in parts]
        if any(side.run is None for side in sides):
            raise UsageError(f"{spec!r}: several a side are runs, not exports or traces")
        runs = [side.run for side in sides if side.run is not None]
        if len({r.id for r in runs}) < len(runs):  # counted once, a side a run short of what was typed
            twice = next(r.id for i, r in enumerate(runs) if r.id in {o.id for o in runs[:i]})
            raise UsageError(f"{spec!r} names run {twice} more than once: give each run once")
        for other in runs[1:]:  # their steps are pooled as one configuration's: a mixed side is no sample
            if differ := config_differences(runs[0], other):
                raise UsageError(
                    f"{spec!r}: the runs of a side are of one configuration; {other.id} differs from "
                    f"{runs[0].id} in {', '.join(differ)}"
                )
        return Side(",".join(r.id for r in runs), run=runs[0], runs=runs)
    return _resolve_one(spec, store_factory)


def check_apart(a: Side, b: Side) -> None:
    """HarnessError (exit 2) when a run is on both sides (`diff -1 -1`, a baseline that is the newest
    run): its steps against themselves give every difference 0 and a gate that passes, judging nothing."""
    mine = {r.id for r in a.runs}
    both = [r.id for r in b.runs if r.id in mine]
    if both:
        raise HarnessError(
            f"{'run' if len(both) == 1 else 'runs'} {', '.join(both)} {'is' if len(both) == 1 else 'are'} on "
            "both sides: a run compared with itself differs by nothing; give other runs",
            exit_code=2,
        )


def _resolve_one(spec: str, store_factory: object) -> Side:
    if spec.startswith(BASELINE_PREFIX):
        name = spec[len(BASELINE_PREFIX) :]
        run = store_factory().get_baseline(name)  # type: ignore[attr-defined]
        return Side(f"{spec} ({run.id})", run=run, trace_path=_run_trace(run))
    path = Path(spec)
    if spec and path.exists():  # Path("") is the current folder: an empty spec is an empty run id
        if path.is_dir():
            raise HarnessError(f"{spec} is a folder; give an export, report or trace file", exit_code=2)
        return Side(spec, trace_path=path)
    if names_a_file(spec):  # meant as a file: say so, not "no such run"
        raise HarnessError(f"no such file: {spec} (and a path is not a run id)", exit_code=2)
    run = store_factory().get(spec)  # type: ignore[attr-defined]
    return Side(run.id, run=run, trace_path=_run_trace(run))


def _run_trace(run: Run) -> Path | None:
    for name in (run.nsys_sqlite, run.nsys_rep):
        if name and Path(name).is_file():
            return Path(name)
    return None


def _no_export(run: Run | None, verdicts: bool = True) -> str:
    """Why a run side has no export to read: none made (profile it), or the one it made is gone; and what is
    left to compare (`verdicts`: the phase verdicts, else nothing)."""
    left = "phase verdicts only" if verdicts else "nothing to compare"
    stored = [name for name in (run.nsys_sqlite, run.nsys_rep) if name] if run is not None else []
    if stored:
        odd = [name for name in stored if os.path.exists(name)]  # a folder, device or pipe: not gone
        missing = [name for name in stored if name not in odd]
        said = ((missing, "no such file, moved or deleted"), (odd, "not a file"))
        why = "; ".join(f"{', '.join(names)}: {what}" for names, what in said if names)
        return f"has lost its export ({why}): {left}"
    return f"has no export: {left} (profile it with --nsys)"


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


def side_tokens(side: Side) -> pd.DataFrame:
    """Every run's decoded tokens of a side, each run told by `run`: run, step, duration_ns, warmup."""
    import pandas as pd

    return pd.concat([tokens_frame(r).assign(run=r.id) for r in side.runs], ignore_index=True)


def side_steps(side: Side) -> pd.DataFrame:
    """Every run's steps of a side, each run told by `run`: run, step, phase, duration_ns, warmup."""
    import pandas as pd

    return pd.concat([steps_frame(r).assign(run=r.id) for r in side.runs], ignore_index=True)


def _key(run: Run) -> tuple:
    return key_of({**(run.config or {}), "model": run.model, "mode": run.mode, "precision": run.precision,
                   "batch_size": run.batch_size}, run.device_name)  # fmt: skip


def _described(run: Run) -> str:
    """The configuration a drift is measured for, in words, its context length with it; a generate run's
    also by what it decodes (its prompt, new tokens and decode path are in the drift's key: other ones are
    not repeats of it)."""
    said = f"{run.model} {run.mode} {run.precision} batch {run.batch_size}"
    if run.mode != "generate" and run.context_length:  # in the key: runs of another context are not repeats
        said += f" context {run.context_length}"
    if run.mode == "generate":
        config = run.config or {}
        path = ", CUDA graphs" if config.get("cuda_graphs") else ", torch.compile" if run.compile else ""
        said += f" (prompt {run.context_length} + {counted(config.get('new_tokens', 0), 'new token')}{path})"
    return f"{said} on {run.device_name or run.device}"


# what a run's configuration holds that does not change what its steps time (or is compared apart: the device)
NOT_TIMED = UNTIMED_FIELDS | {"device"}


def unlike_configurations(a: Run, b: Run) -> str | None:
    """What differs between the configurations of A and B that their times depend on (a setting, the
    profiler, the device), in words; None when nothing does. A difference found is the change compared, or
    a comparison of unlike runs: either way the user is told what it is."""
    differ = config_differences(a, b)
    if not differ:
        return None
    return f"A and B are not the same configuration: {', '.join(differ)}; their times differ by that too"


def config_differences(a: Run, b: Run) -> list[str]:
    """Each setting their times depend on that differs from run `a` to run `b`: `model tiny → small`."""

    def said(run: Run) -> dict[str, object]:
        left_out = NOT_TIMED if a.mode == b.mode == "generate" else NOT_TIMED | GENERATE_ONLY
        config = {k: v for k, v in (run.config or {}).items() if k not in left_out}
        # as resolved; a run stopped before its model was built resolved none: the one asked for, if any
        resolved = run.context_length if run.context_length is not None else config.get("context_length")
        config.update(context_length=resolved, batch_size=run.batch_size)
        config["profiler"] = " ".join(filter(None, (run.profiler, run.nsys_mode)))
        config["device"] = run.device_name or run.device
        return config

    ca, cb = said(a), said(b)
    if None in (ca["context_length"], cb["context_length"]):  # the model's, not known yet: no difference told
        del ca["context_length"], cb["context_length"]
    return [f"{k.replace('_', ' ')} {ca.get(k)} → {cb.get(k)}" for k in dict.fromkeys([*ca, *cb])
            if ca.get(k) != cb.get(k)]  # fmt: skip


def drift_notes(result: DiffResult, remeasure: str) -> list[str]:
    """What the verdicts of two runs rest on, in words: the runs (several on a side, with any drift measured),
    or the drift measured for one run a side, or none measured (and how to measure it)."""
    a, b = result.a, result.b
    compared = next((v.comparison for v in result.verdicts or [] if v.phase == STEP_SUM), None)
    # several runs on a side bring their own spread: the verdicts rest on it (and on any drift measured)
    if compared is not None and compared.basis == RUNS:
        return [f"the verdicts compare runs: {basis_words(compared)}"]
    if len(a.runs) > 1 and len(b.runs) > 1:
        return []
    configs = ", ".join(dict.fromkeys(_described(r) for r in (*a.runs, *b.runs)))
    whole = (result.drift or {}).get(STEP_SUM)
    if whole is not None and whole.df > 0:
        one = "one run a side" if len(a.runs) == len(b.runs) == 1 else "one run on a side"
        return [
            f"{one}: a difference is called only beyond the drift between runs measured for {configs} "
            f"(±{whole.pct:.1f}% a run's step, {whole.runs} runs made together"
            f"{', A and B among them' if result.drift_of_sides else ''}; `harness run … --repeats N` adds to "
            "it)"
        ]
    return [
        f"one run a side, and no drift between runs measured for {configs}: a difference cannot be told "
        f"from drift, so no verdict; measure it ({remeasure}) or give several runs a side (`harness diff "
        "A1,A2,A3 B1,B2,B3`)"
    ]


def _open(path: Path, cache: bool) -> Trace:
    trace = open_source(path, export_report, cache=cache)
    try:
        require_events(trace)  # a memory timeline: nothing to compare, not a table of dashes
    except ExportError:
        trace.close()
        raise
    return trace


def _has_steps(trace: Trace) -> bool:
    if not trace.has("nvtx"):
        return False
    names = trace.frame("nvtx", ["name"])["name"].astype(str)
    return bool(names.str.startswith("ProfilerStep#").any())


def diff(a: Side, b: Side, *, cache: bool = True, store: ResultsStore | None = None) -> DiffResult:
    """Every table both sides allow: verdicts for two runs (or sides of several); kernels, NVTX ranges,
    operators for two traces. `store`: where the drift between runs is measured from (None: none measured,
    so one run a side gets no verdict)."""

    result = DiffResult(a, b)
    for side in (a, b):
        for run in side.runs:
            label = run.id if len(side.runs) > 1 else side.label
            if run.status == "degraded":
                result.notes.append(
                    f"{label} is degraded: {run.error or 'its capture failed its health checks'}; its step "
                    "times stand, the tables drawn from its capture do not"
                )
            elif run.status != "ok":
                result.notes.append(f"{label} {ended(run)}: its steps are those it measured before")
    if a.run is not None and b.run is not None:
        steps_a, steps_b = side_steps(a), side_steps(b)
        result.verdicts = []  # no phase in common: no verdict (not one of 0 steps a side, for want of drift)
        if d.common_phases(steps_a, steps_b):
            runs = (*a.runs, *b.runs)
            result.drift = {}
            if store is not None:
                together = {r.id: r.experiment for r in runs}
                result.drift, result.drift_of_sides = compared_drift(
                    store, map(_key, runs), together, one_a_side=len(a.runs) == len(b.runs) == 1
                )
            result.verdicts = d.phase_verdicts(steps_a, steps_b, result.drift)
            result.notes += drift_notes(result, f"`harness run {a.run.model} … --repeats 3`")
            serving = d.serving_verdicts(steps_a, steps_b, side_tokens(a), side_tokens(b), result.drift)
            if serving:
                result.verdicts += serving
                tpot = any(v.phase == d.TPOT for v in serving)
                result.notes.append(d.SERVING_NOTE if tpot else d.TTFT_ONLY_NOTE)
        result.notes += d.unlike_steps(steps_a, steps_b, (f"A ({a.label})", f"B ({b.label})"))
        if (unlike := unlike_configurations(a.run, b.run)) is not None:
            result.notes.append(unlike)
    several = len(a.runs) > 1 or len(b.runs) > 1
    if several and a.trace_path is not None and b.trace_path is not None:
        result.notes.append("several runs a side: verdicts only (the exports' tables compare one run each)")
    elif a.trace_path is not None and b.trace_path is not None:
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
    elif not several:
        for side in (a, b):
            if side.trace_path is None:
                result.notes.append(f"{side.label} {_no_export(side.run, bool(result.verdicts))}")
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


def program_exports(a: Side, b: Side) -> tuple[Side, Side, list[str]] | None:
    """A program run (`harness profile`), one a side, whose export is still there, against another or
    against an export or trace: the sides as their exports, under their labels, and for each run that did
    not end ok how it ended (a gate refuses it). The harness times no steps in a program: its export (its
    NVTX `step` ranges the iterations) is all there is to compare. None for any other two sides."""
    sides = (a, b)

    def program(s: Side) -> bool:
        return len(s.runs) == 1 and s.runs[0].mode == PROGRAM_MODE and s.trace_path is not None

    exports = all(program(s) or (not s.runs and s.trace_path is not None) for s in sides)
    if not exports or not any(program(s) for s in sides):
        return None
    ended_so = [f"{s.label} {ended(s.runs[0])}" for s in sides if s.runs and s.runs[0].status != "ok"]
    return Side(a.label, trace_path=a.trace_path), Side(b.label, trace_path=b.trace_path), ended_so


def ended(run: Run) -> str:
    """How a run that did not end ok ended, in words: "ended oom (CUDA out of memory)"."""
    return f"ended {run.status}" + (f" ({run.error})" if run.error else "")


def not_ended_ok(said: str) -> str:
    """A gate's refusal of a run that did not end ok, `said` naming it and how it ended."""
    return f"gate: {said}: a gate passes only between runs that ended ok; run it again"


def gate_refusal(result: DiffResult) -> str | None:
    """Why a gate fails before any verdict: a side with no measured steps (a failed or OOM run) cannot
    show it did not regress; nor can one that did not end ok: a degraded one (its capture failed its
    health checks: what it was profiled for cannot be trusted, so neither can a pass), one that ran out of
    memory, failed or was interrupted (its steps are those before it stopped), whatever steps it holds;
    nor two runs with no phase in common."""
    for side in (result.a, result.b):
        for run in side.runs:
            label = run.id if len(side.runs) > 1 else side.label
            if run.status == "degraded":
                return (
                    f"gate: {label} is degraded ({run.error or 'its capture failed its health checks'}): "
                    "a gate passes only between runs whose captures can be trusted; run it again"
                )
            measured = sum(1 for s in run.step_timings if not s.warmup)
            if not measured:
                return (
                    f"gate: {label} has no measured steps (status {run.status}): a gate needs measured "
                    "steps on both sides; run it again"
                )
            if run.status != "ok":
                return not_ended_ok(f"{label} {ended(run)}")
    if result.verdicts is not None and all(v.phase == STEP_SUM for v in result.verdicts):
        return f"gate: {result.a.label} and {result.b.label} time no phase in common: nothing to gate"
    if result.verdicts is not None and d.unjudged(result.verdicts):
        return (
            "gate: one run a side and no drift between runs measured for their configuration: the gate "
            "cannot tell a regression from drift, so it cannot pass; measure the drift (`harness run "
            f"{result.a.run.model if result.a.run else 'MODEL'} … --repeats 3`, the same options) or give "
            "several runs a side (`harness diff A1,A2,A3 B1,B2,B3 --gate PCT`)"
        )
    return None


def verdict_table(result: DiffResult) -> pd.DataFrame | None:
    """The phase verdicts of two runs as a table (None: no verdicts, two traces)."""
    return d.verdict_table(result.verdicts) if result.verdicts is not None else None


def gate_failures(result: DiffResult, gate: float) -> list[PhaseVerdict]:
    """The phases of two runs that regressed beyond `gate` percent."""
    return d.gate_failures(result.verdicts, gate) if result.verdicts is not None else []


def gate_blind(result: DiffResult, gate: float) -> str | None:
    """Where a gate passes but the interval of the whole step, or of a phase, reaches beyond it: one line
    saying that a regression of `gate` percent could not have been told from the drift with these runs
    (None: it could). A phase counts as the step does: the gate fails on either, so it cannot pass silently
    on a phase it could not judge (the step's interval alone let a noisy phase of a small share pass)."""
    blind = [v for v in result.verdicts or [] if v.comparison.ci_high_pct > gate]
    if not blind:
        return None
    blind.sort(key=lambda v: v.phase != STEP_SUM)  # the whole step first
    c = blind[0].comparison
    if len(blind) == 1 and blind[0].phase == STEP_SUM:
        what = f"the whole step's interval reaches {c.ci_high_pct:+.1f}% ({basis_words(c)})"
    else:  # each phase's own drift: the table's Detail says it
        named = ", ".join(
            f"{'the whole step' if v.phase == STEP_SUM else v.phase} {v.comparison.ci_high_pct:+.1f}%"
            for v in blind
        )
        what = f"the interval{'s' if len(blind) > 1 else ''} of {named} reach{'' if len(blind) > 1 else 'es'}"
        what += f" past {gate:g}%"
    return (
        f"gate: passed, but {what}: a regression of {gate:g}% could not be told from the drift between runs; "
        "give more runs a side (`harness diff A1,A2,A3 B1,B2,B3`)"
    )


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


def failed_sides(a: Side, b: Side, *, cache: bool) -> list[str]:
    """A warning for each side's export whose capture failed its health checks when they last ran (none
    without the cache: analysis.advice.verdict)."""
    paths = [p for p in (a.trace_path, b.trace_path) if p is not None]
    return failed_captures(paths, cache=cache)
