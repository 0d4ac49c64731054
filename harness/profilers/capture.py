"""The examine step: what a profiler recorded, read once, and the run stored once. The profilers launch and
record (profilers/nsys.py, torch.py; experiments/program.py for any program); here their files and the run's
timers go to analysis.front.examine, the one door by which a capture is read (the run's NVTX ranges,
kernels, agreement with the timers, overhead, blocks, health and findings come back), the run is made
`degraded` when its capture fails its checks, and it is saved once, with all of it, in one transaction
(also when the reading is cut short). For `run --nsys`, `run --profiler torch`, `profile -- CMD` and
`overhead` alike. Every run is finished here before it is stored, with or without a profiler (`finish`):
the figures its own timers and samples give (each phase's statistics, the first step and compile time,
the energy) are computed once, and the store only stores them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.compare.compile import NOT_COMPILED
from analysis.errors import AnalysisError, OptionsError
from analysis.front.examine import (
    Baseline,
    Measured,
    Operators,
    RunExamination,
    RunRecord,
    Stop,
    examine,
    examine_program,
    examine_trace,
)
from analysis.readers.kineto import is_complete
from analysis.runs.energy import energy_table, run_summary
from analysis.runs.steady import STEP, phase_stats, run_steady
from analysis.tables import stats_format
from harness.core import machine, nvtx_ranges, signals
from harness.core.errors import UsageError, first_line
from harness.core.records import (
    PHASE_FIGURES,
    RunConfig,
    RunResult,
    config_phases,
    measured_steps,
    timer_frame,
)
from harness.energy import run as energy
from harness.execution.nsys import CAPTURE_RANGE
from harness.profilers import base
from harness.store.results import UnsavedRun
from workloads.names import DECODE

if TYPE_CHECKING:
    from analysis.tables.summary import Report as Report  # a program's tables, as examine_program gives them
    from harness.execution.nsys import ProfileResult
    from harness.store.results import ResultsStore

TOP_KERNELS = 10
# result.extra's figures of the first step and compilation (`_first_step`): made afresh from the steps
FIRST_STEP_FIGURES = (
    "first_step_ns",
    "first_step_phases",
    "compile_ns",
    "compile_phases_ns",
    "steady_phases_ns",
)


def nsys_artifacts(rep: Path | None, sqlite: Path | None) -> dict[str, str]:
    """nsys's files as stored in a run's `artifacts`."""
    return {kind: str(path) for kind, path in (("nsys_rep", rep), ("nsys_sqlite", sqlite)) if path}


def report_paths(prof: ProfileResult) -> dict[str, Any]:
    """What a run under nsys stores: the old nsys_* columns, and the same paths as `artifacts`."""
    return {
        "nsys_rep": str(prof.rep) if prof.rep else None,
        "nsys_sqlite": str(prof.sqlite) if prof.sqlite else None,
        "artifacts": {**nsys_artifacts(prof.rep, prof.sqlite), **prof.artifacts},
    }


def mark_degraded(result: RunResult, reason: str | None) -> str | None:
    """A run that ended ok but whose capture fails its checks (`reason`, analysis.front.examine's) is
    stored `degraded`: the reason, else None."""
    if reason and result.status == "ok":
        result.status, result.error = "degraded", reason
        return reason
    return None


def finish(result: RunResult) -> RunResult:
    """The figures the run's own measurements give, put into result.extra (its summary) before it is stored:
    each phase's statistics over the measured steps (PHASE_FIGURES), the first step (with --compile, the
    compile time beyond the steady median) and, with --power, the energy of the samples the worker kept.
    The same run finished again gives the same figures."""
    result.extra[PHASE_FIGURES] = [
        asdict(s) for s in phase_stats(measured_steps(result), config_phases(result.config))
    ]
    _first_step(result)
    _energy(result)
    return result


def _first_step(result: RunResult) -> None:
    """The first step (wall time, and per phase), and with --compile `compile_ns`: the first step minus the
    median measured step (per phase too), and the steady medians they were taken from (`steady_phases_ns`,
    from analysis.runs.steady, as every command shows them). Eager runs keep their first step as well, the
    warm-up cost compiled runs are compared with. A run across ranks keeps none: each rank compiled its
    own. They are the steps' alone: what the run held of them (an imported file's) is made afresh."""
    for name in FIRST_STEP_FIGURES:
        result.extra.pop(name, None)
    if result.config.world_size > 1 or not result.steps or not result.steps[0].warmup:
        return
    first = result.steps[0].phases
    result.extra["first_step_ns"] = sum(first.values())
    result.extra["first_step_phases"] = dict(first)
    measured = [s for s in result.steps if not s.warmup]
    if not result.config.compile or not measured:
        return
    rows = [(s.step, phase, ns, s.warmup) for s in result.steps for phase, ns in s.phases.items()]
    figures = run_steady(rows, tuple(first))
    result.extra["compile_ns"] = round(figures.compile_ns(STEP) or 0)
    result.extra["compile_phases_ns"] = {
        phase: round(figures.compile_ns(phase) or 0)
        for phase in first
        if phase in figures.figures and phase not in NOT_COMPILED
    }
    result.extra["steady_phases_ns"] = {phase: f.median_ns for phase, f in figures.figures.items()}


def _energy(result: RunResult) -> None:
    """The energy table and the run's energy figures from the samples the worker kept (energy.SAMPLES,
    dropped once used); what goes wrong is a power note: the run is never lost to it."""
    kept = result.extra.pop(energy.SAMPLES, None)
    if kept is None:
        return
    notes = list(result.extra.get(energy.NOTES) or [])
    try:
        samples, spans = energy.kept_samples(kept["samples"]), energy.intervals(result)
        table = energy_table(samples, spans, flops=kept["flops"], tokens_per_step=kept["tokens_per_step"])
    except Exception as e:
        notes.append(f"energy not computed ({type(e).__name__}: {first_line(e)})")
    else:
        if not table.empty:
            result.extra[energy.TABLE] = json.loads(table.to_json(orient="records"))  # NaN -> null
            result.extra[energy.SUMMARY] = run_summary(table)
        if spans.empty:
            notes.append("no energy: the run has no measured step")
        elif samples.empty:
            notes.append("no energy: no power sample was taken")
        elif (result.extra.get(energy.SUMMARY) or {}).get("energy_j") is None:  # none inside, or no reading
            notes.append("no energy: the power samples give none over the measured steps")
    result.extra[energy.NOTES] = list(dict.fromkeys(notes))


def save(store: ResultsStore, result: RunResult, **how: Any) -> str:
    """The run finished (`finish`) and stored: its id; the store's refusal (UnsavedRun) is raised."""
    return store.save(finish(result), **how)


def save_once(
    store: ResultsStore,
    result: RunResult,
    unsaved: list[str] | None = None,
    *,
    signal_ends: bool = False,
    **how: Any,
) -> UnsavedRun | None:
    """Save: None when the run is stored; else the store's refusal (the run is in a file by now; its line
    says where), its line said once in `unsaved` where one is given. `signal_ends`: a refusal that came with
    a signal (Ctrl-C or SIGTERM while it waited on a locked database) is raised, for the caller to end with
    (its exit_code is the signal's); else it is returned as any other."""
    try:
        save(store, result, **how)
    except UnsavedRun as e:
        if signal_ends and e.signal is not None:
            raise
        if unsaved is not None and str(e) not in unsaved:
            unsaved.append(str(e))
        return e
    return None


def stored_as(result: RunResult, refused: Iterable[UnsavedRun | None]) -> str:
    """Where a run that ended badly is, in words: stored as its status, or not, where one of the store's
    refusals (`refused`: UnsavedRun, None for a run stored) is of this run (its line, said on its own,
    names the file it is in)."""
    if any(e is not None and e.run_id == result.run_id for e in refused):
        return "not stored (its file is named on its own line)"
    return f"stored as {result.status}"


@contextmanager
def stored_after(
    store: ResultsStore,
    result: RunResult,
    unsaved: list[str],
    how: dict[str, Any],
    keep: bool = True,
    refused: list[UnsavedRun] | None = None,
) -> Iterator[dict[str, Any]]:
    """The run is stored once, after the block has read the export: with `how` and what the block put in
    the dict it is given (advice, agreement, blocks), in one transaction; also when the block is cut short
    (Ctrl-C). `keep` False: not stored (a failed run with nothing to keep). The store's refusal, if any, is
    added to `refused` (its line to `unsaved`)."""
    found: dict[str, Any] = {}
    try:
        yield found
    finally:
        if keep and (refusal := save_once(store, result, unsaved, **how, **found)) and refused is not None:
            refused.append(refusal)


def tables_format(nsys_version: str) -> str:
    """The `nsys stats` format a capture's tables print: HARNESS_STATS_FORMAT's, else that of the nsys that
    records (analysis.tables.stats_format.chosen); a value that names none is refused (UsageError), before
    the run."""
    try:
        return stats_format.chosen(stats_format.AUTO, nsys_version)
    except OptionsError as e:
        raise UsageError(str(e)) from None


def examine_run(
    sqlite: Path | None, result: RunResult, baseline: RunResult | None, mode: str, tables_format: str,
    notes: list[str],
) -> RunExamination:  # fmt: skip
    """A run the harness timed under nsys (its export None: none written), read once with its timers and
    the baseline run's (`measured`)."""
    return examine(sqlite, measured(result, baseline, mode, tables_format, notes))


def measured(
    result: RunResult, baseline: RunResult | None, mode: str, tables_format: str, notes: list[str]
) -> Measured:
    """What the run under nsys measured, as examine takes it: its timers and the baseline run's, the
    phases, how busy the machine was while each ran, the blocks to look for, the format of the kernel
    table, the capture range nsys was given (kept with the run); what is to be said of the baseline run
    into `notes`."""
    config, label = result.config, base.label_for(mode)
    # the load average before a run that follows our own baseline run is ours: judged for the first only
    loads = [
        (r.extra["machine"], r is baseline or baseline is None, machine.BASELINE_RUN if r is baseline else "")
        for r in (baseline, result)
        if r is not None and r.extra.get("machine")
    ]
    busy = machine.busy_of(loads)
    ok = baseline is not None and baseline.status == "ok"
    if baseline is not None and not ok:
        notes.append(f"baseline run without nsys failed ({baseline.status}): {baseline.error}; no overhead")
    elif baseline is not None:
        load = machine.over_runs([baseline.extra.get("machine"), result.extra.get("machine")])
        notes += filter(None, [machine.busy_note(load, "the baseline run")])
    timers = timer_frame(result)
    asked = Measured(
        timers=timers,
        phases=config_phases(config),
        world_size=config.world_size,
        device=result.device,
        busy=busy,
        baseline=Baseline([timer_frame(baseline)], f"baseline run {baseline.run_id}", label) if ok else None,
        blocks=nvtx_ranges.block_names() if config.nvtx_detail else None,
        first_step=config.warmup,
        kernels=TOP_KERNELS,
        stats_format=tables_format,
        busy_of=(DECODE,) if result.extra.get("serving") is not None else (),
        record=RunRecord.of(timers, result.extra.get("dynamo")),  # as `advise RUN` reads it back
        why_no_ranges=(
            f"Emitter: {nvtx_ranges.EMITTER}. Known cause: with nsys 2022.4 the python nvtx package 0.2.12 "
            "and later records nothing (pip install nvtx==0.2.11); torch.cuda.nvtx needs a CUDA build of "
            "torch. `harness doctor` runs a self-test."
        ),
    )
    if CAPTURE_RANGE in result.extra:  # None: none; a run kept without it: not known (Measured's default)
        asked.capture_range = result.extra[CAPTURE_RANGE]
    return asked


def examine_stopped(
    sqlite: Path, result: RunResult, baseline: RunResult | None, mode: str, tables_format: str,
    notes: list[str],
) -> RunExamination:  # fmt: skip
    """An interrupted run's export read as the run's, with the stop said (its last steps never ran: the
    capture is partial, never shown sound); a reading that fails is a note, and no advice."""
    asked = measured(result, baseline, mode, tables_format, notes)
    asked.stop = Stop.of(
        signals.stopped_by(result.error), asked.timers, result.config.steps, result.config.warmup
    )  # type: ignore[arg-type]
    return _examined(sqlite, asked)


def _examined(sqlite: Path, asked: Measured) -> RunExamination:
    """`examine`, where a reading that fails is a note, and no health or findings."""
    try:
        return examine(sqlite, asked)
    except AnalysisError as e:
        return RunExamination(notes=[f"no health or findings: {e}"])


def judge_capture(
    result: RunResult, sqlite: Path, found: dict[str, Any], notes: list[str], mode: str
) -> str | None:
    """An `overhead` run under nsys (`mode`: its nsys mode), its export read as `run --nsys` reads one, with
    its timers and without a baseline (the overhead is the experiment's): its agreement of NVTX ranges with
    the timers, health and findings into `found`, the run made `degraded` when its capture fails them (the
    reason, else None); a reading that fails is a note, and no advice."""
    asked = measured(result, None, mode, stats_format.DEFAULT, notes)
    asked.kernels = 0  # no kernel table: nothing shows one
    seen = _examined(sqlite, asked)
    notes += [f"run {result.run_id}: {line}" for line in [*seen.notes, *filter(None, [seen.error])]]
    found.update(seen.stored)
    return mark_degraded(result, seen.degraded) if seen.advice is not None else None


def examine_torch_trace(
    trace: Path, config: RunConfig, top: int, sort: str | None, serving: bool
) -> RunExamination:
    """A torch.profiler trace, read once: the operator tables (whole run, or per phase in generate mode) of
    the first `top` operators, or one ordered by the column `sort` names; the phase ranges; the blocks of
    --nvtx-detail; with `serving`, decode's GPU-busy share. A trace that cannot be opened: `error`."""
    phases = config_phases(config)
    asked = Measured(
        phases=phases, blocks=nvtx_ranges.block_names() if config.nvtx_detail else None,
        first_step=config.warmup, busy_of=(DECODE,) if serving else (),
    )  # fmt: skip
    within = tuple(phases) if config.mode == "generate" else (None,)
    try:
        return examine_trace(trace, asked, Operators(top, sort, within))
    except AnalysisError as e:
        return RunExamination(error=str(e))


def trace_complete(trace: Path) -> bool:
    """Whether the worker finished writing its torch.profiler trace (a cut one is kept as partial)."""
    return is_complete(trace)


def examine_program_export(
    sqlite: Path, tables_format: str, signal: int | None, capture_range: str | None
) -> RunExamination:
    """A program the harness timed nothing in (`profile -- CMD`), its export read once: its summary tables
    and the capture's health and findings (`signal`: the one that ended it; `capture_range`: nsys's)."""
    return examine_program(sqlite, tables_format, signal, capture_range)
