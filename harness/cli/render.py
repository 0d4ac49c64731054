"""How `harness run` shows what a run gave: the outcome of each profiler (`render`, by the outcome's type:
one registered for each profiler's, and a plain one for a profiler that registers none), and the exit code
that goes with it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import singledispatch
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from harness.cli.advice_lines import advice_tables, say_findings, say_health
from harness.cli.common import err, note, say_ending, warn
from harness.cli.common import note as say_note
from harness.cli.terminal.output import Format, emit_many
from harness.core import signals
from harness.core.records import config_phases, phases_of
from harness.energy.run import NOTES, NOTES_TITLE, energy_rows
from harness.execution.ranks.multirank import local_ranks
from harness.experiments.ranks import rank_tables, result_frame
from harness.experiments.run_tables import AGREEMENT_TITLE, extra_tables, results_table, throughput_table
from harness.profilers.base import Outcome
from harness.profilers.capture import TOP_KERNELS, stored_as
from harness.profilers.none import PlainRun
from harness.profilers.nsys import ProfiledRun
from harness.profilers.torch import TorchProfiledRun

if TYPE_CHECKING:
    import pandas as pd

    from harness.core.records import RunResult
    from harness.store.results import UnsavedRun


def on_device(results: Iterable[RunResult]) -> str:
    """` (DEVICE NAME)` for a title: of the first run that says it (a run whose worker was killed before
    it started the model has none), else nothing (never an empty `()`)."""
    name = next((r.device_name for r in results if r.device_name), "")
    return f" ({name})" if name else ""


@singledispatch
def render(outcome: Outcome, fmt: str, wide: bool = False) -> None:
    """A profiler's outcome no renderer is registered for: its run's table, its files, how it ended."""
    result = getattr(outcome, "result", None)
    if result is not None and result.steps:
        emit_many([(f"run {result.run_id}{on_device([result])}", results_table([result]))], fmt, wide=wide)
    for kind, path in (getattr(outcome, "artifacts", None) or {}).items():
        note(f"{kind}: {path}")
    say_ending(outcome)


@render.register
def render_plain(p: PlainRun, format: str, wide: bool = False) -> None:
    """A run without a profiler: its tables (per rank and the straggler with --nproc), then the exit code."""
    result, config = p.result, p.result.config
    if config.world_size > 1:
        _render_ranks(p, Format(format), wide)
        return
    if result.status == "oom":
        warn(f"out of memory: {result.error}")
    tables = [
        (f"run {result.run_id}{on_device([result])}", results_table([result])),
        ("throughput", throughput_table(result)),
    ]
    energy, power_notes = _power(result.extra, Format(format))
    tables += energy
    tables += extra_tables(result.extra, config_phases(config))
    emit_many(tables, format, wide=wide)
    _memory_notes(result.extra)
    for line in power_notes:
        say_note(line)
    finish(p.refused, [result])


def _power(extra: dict[str, Any], fmt: Format) -> tuple[list[tuple[str, pd.DataFrame]], list[str]]:
    """--power's output: its energy table, and its notes (what was measured with, or why nothing was: no
    NVML here), a table of their own in csv and json, else the lines to say after the tables."""
    tables = [("energy (measured steps)", energy_rows(extra["energy"]))] if extra.get("energy") else []
    notes, lines = power_notes(extra.get(NOTES, []), fmt)
    return [*tables, *notes], lines


def power_notes(notes: Iterable[str], fmt: Format | str) -> tuple[list[tuple[str, pd.DataFrame]], list[str]]:
    """--power's notes (each once): a table of their own (`power notes`) in csv and json, else the lines to
    say after the tables. `run`, `run --repeats` and `sweep` say them so."""
    import pandas as pd

    notes = list(dict.fromkeys(notes))
    if notes and Format(fmt) is not Format.table:
        return [(NOTES_TITLE, pd.DataFrame({"note": notes}))], []
    return [], notes


def _render_ranks(p: PlainRun, format: Format, wide: bool) -> None:
    """`run --nproc N`: the ranks under torchrun, stored as one run; per-rank and straggler tables. Out of
    memory is a result there too, as with one process: said, stored as oom, exit 0."""
    result, config = p.result, p.result.config
    refused = p.refused[0] if p.refused else None
    if result.status == "oom":
        warn(f"out of memory: {result.error}")
    ranks = local_ranks(config)
    which = "all ranks" if config.nnodes == 1 else f"ranks {ranks[0]}-{ranks[-1]} of {config.world_size}"
    on = ", ".join(filter(None, [result.device_name, which]))
    tables = [(f"run {result.run_id} ({on})", results_table([result]))]
    per_rank, notes = rank_tables(result_frame(result))
    tables += per_rank
    if result.status == "ok":
        tables.append((f"throughput ({which})", throughput_table(result)))
    tables += extra_tables(result.extra, config_phases(config))  # memory: the largest rank's peak
    emit_many(tables, format, notes=notes if Format(format) is Format.table else [], wide=wide)
    if result.status == "error":
        if refused is not None:
            err(str(refused))
        err(f"run {result.run_id} failed: {result.error}; {stored_as(result, [refused])}")
        raise typer.Exit(1)
    if p.error is not None:  # a signal came as every rank ended: the run stored as it ended, then its code
        err(p.error)
    finish([refused], [result])


def _memory_notes(extra: dict[str, Any]) -> None:

    memory = extra.get("memory") or {}
    if memory.get("error"):
        warn(memory["error"])
    if memory.get("snapshot"):
        note(f"memory snapshot: {memory['snapshot']} (opens in https://pytorch.org/memory_viz)")


def failed(result: RunResult) -> bool:
    """A run that failed, for the exit code of a command that ran it: one that ended in an error. Out of
    memory is a result (the configuration does not fit there); an interrupted run ends with its signal's
    code."""
    return result.status == "error"


def stopped_between(
    what: str, between: str, sig: int, done: int, asked: int, refused: Sequence[UnsavedRun | None]
) -> NoReturn:
    """A command of several runs (`sweep`, `run --repeats`) stopped by `sig` between two of them: the lines
    of the runs the database would not take (`refused`, the store's; None for a run stored), how far it
    got, and the signal's exit code."""
    for e in filter(None, refused):
        err(str(e))
    err(
        f"{what} interrupted by {signals.name(sig)} between {between}, after {done} of {asked}; the {done} "
        f"run{'s are' if done != 1 else ' is'} stored"
    )
    raise typer.Exit(signals.exit_code(sig))


def finish(
    refused: Sequence[UnsavedRun | None], results: list[RunResult], then: str = "", oom_ends: bool = False
) -> None:
    """Say what was not saved (`refused`: the store's refusals, None for a run stored), was interrupted or
    failed, and exit with the code that goes with it (`then`: what that meant for the runs after it, e.g.
    "; the repeats stopped there"; `oom_ends`: a run out of memory ended the runs short of those asked, a
    failure then)."""

    for e in filter(None, refused):
        err(str(e))
    stopped = next((r for r in results if r.status == "interrupted"), None)
    if stopped is not None:
        err(f"run {stopped.run_id} {stopped.error}; {stored_as(stopped, refused)}{then}")
        raise typer.Exit(signals.exit_code(signals.signal_in(stopped.error)))
    broken = next((r for r in results if failed(r) or (oom_ends and r.status == "oom")), None)
    if broken is not None:
        first = (broken.error or "no error recorded").strip().splitlines()[0]
        err(f"run {broken.run_id} ended {broken.status}: {first}{then}")
        raise typer.Exit(1)
    if any(refused):
        raise typer.Exit(1)


@render.register
def render_profiled(p: ProfiledRun, fmt: str, wide: bool = False) -> None:
    """A run under nsys: its health first (a capture that failed says so before any number drawn from it),
    then its tables, then its findings (or why they are not ranked), then how it ended."""
    if p.advice is not None and Format(fmt) is Format.table:
        say_health(p.advice, p.run_id if p.degraded else None)
    tables: list[tuple[str, pd.DataFrame]] = []
    rank_notes: list[str] = []
    if p.result is not None and p.result.steps:
        tables.append((f"run {p.run_id} under nsys {p.nsys_version}", results_table([p.result])))

        ranks, rank_notes = rank_tables(result_frame(p.result))
        tables += ranks
    if p.nvtx is not None:
        whose = f", rank {min(s.rank for s in p.result.steps)}'s report" if rank_notes and p.result else ""
        tables.append((f"NVTX ranges (measured steps{whose})", p.nvtx))
    if p.kernels is not None:
        tables.append((f"top {TOP_KERNELS} kernels", p.kernels))
    if p.agreement is not None and len(p.agreement):
        tables.append((AGREEMENT_TITLE, p.agreement))
    if p.overhead is not None:
        tables.append(("nsys overhead (one run each; `harness overhead` alternates repeats)", p.overhead))
    power_notes: list[str] = []
    if p.result is not None:
        energy, power_notes = _power(p.result.extra, Format(fmt))
        tables += energy + extra_tables(
            p.result.extra, phases_of(p.result), degraded=p.result.status == "degraded"
        )
    kept: list[tuple[str, str]] = []
    if p.profile is not None and p.profile.artifacts:  # one report per rank
        kept = [(kind, str(path)) for kind, path in p.profile.artifacts.items()]
    elif p.profile is not None:
        kept = [
            (kind, str(path))
            for kind, path in (("report", p.profile.rep), ("export", p.profile.sqlite))
            if path
        ]
    files = [f"{kind}: {path}" for kind, path in kept]
    if p.advice is not None and Format(fmt) is not Format.table:
        tables += advice_tables(p.advice)
    if kept and Format(fmt) is not Format.table:  # the table's notes name them
        import pandas as pd

        tables.append(("files", pd.DataFrame(kept, columns=["kind", "path"])))
    if tables:
        emit_many(tables, fmt, notes=[*rank_notes, *files] if Format(fmt) is Format.table else [], wide=wide)
    for line in power_notes:
        say_note(line)
    if p.advice is not None and Format(fmt) is Format.table:
        say_findings(p.advice, p.run_id)
    say_ending(p)


@render.register
def render_torch_profiled(p: TorchProfiledRun, fmt: str, wide: bool = False) -> None:
    import pandas as pd

    tables: list[tuple[str, pd.DataFrame]] = []
    if p.result is not None and p.result.steps:
        title = f"run {p.run_id} under torch.profiler{on_device([p.result])}"
        tables.append((title, results_table([p.result])))
    if p.ranges is not None:
        tables.append(("record_function ranges (measured steps)", p.ranges))
    tables += p.operators
    power_notes: list[str] = []
    if p.result is not None:
        energy, power_notes = _power(p.result.extra, Format(fmt))
        tables += energy + extra_tables(
            p.result.extra, phases_of(p.result), degraded=p.result.status == "degraded"
        )
    files = [f"trace: {p.trace}"] if p.trace else []
    if Format(fmt) is not Format.table and p.artifacts:
        tables.append(("files", pd.DataFrame(list(p.artifacts.items()), columns=["kind", "path"])))
    if tables:
        emit_many(tables, fmt, notes=files if Format(fmt) is Format.table else [], wide=wide)
    for line in power_notes:
        say_note(line)
    say_ending(p)
