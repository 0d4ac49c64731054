"""A run's capture read once, and what a run says about itself.

The profilers launch and record; this module reads what they recorded, each capture opened once, into the
run's record (`RunExamination`): `examine` a run the harness timed (`run --nsys`: the NVTX table of the
measured steps, the agreement with the timers, the top kernels, the overhead against the baseline, the blocks
of --nvtx-detail), `examine_trace` a torch.profiler trace (its ranges, operator tables and blocks),
`examine_program` the export of a program the harness timed nothing in (`profile -- CMD`: its summary tables),
`examine_capture` a capture judged alone (`optimize`'s exports). All but the trace are judged the same way:
the capture's health and findings, and why a capture that fails them makes the run `degraded`.

What the harness knows of the run comes in as plain data (`Measured`): its timers as a frame, the baseline
runs', the phases, the block names, the stats format, why the machine was busy, the device. `run_facts` makes
what a run says about itself (analysis.advice.run_checks.RunFacts) from that data, for a run just measured and
for a stored one alike; `judge_stored` gives a stored run's health and findings (`advise RUN`, `health RUN`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.advice.base import Stop
from analysis.advice.checks import OK, Check, Health, why_untrusted
from analysis.advice.coverage import export_facts
from analysis.advice.findings import NEEDS_RECORD, RunRecord, Thresholds, advice
from analysis.advice.health import NOT_KNOWN, capture_health
from analysis.advice.record import advice_record, checks_of, degraded_reason, export_stamp
from analysis.advice.run_checks import (
    RUN_CHECKS,
    UNTIMED,
    ExportFacts,
    Overhead,
    RunFacts,
    program_end,
    run_checks,
    run_stopped,
)
from analysis.compare.agreement import agreement_table, for_people, pair_ranges, range_summary
from analysis.compare.overhead import BASELINE, overhead_and_headline, overhead_steps
from analysis.errors import AnalysisError, ExportError
from analysis.hta.gpu_events import gpu_events, merge
from analysis.intervals import clipped_sums
from analysis.tables.kernels import kernel_summary
from analysis.tables.nvtx import nvtx_ranges
from analysis.tables.operators import SELF_CUDA, by_self_cuda, operator_table
from analysis.tables.range_kernels import GPU_DOMAIN
from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.tables.summary import Report, summary
from analysis.trace.opening import open_trace
from analysis.trace.trace import Trace
from analysis.views.blocks import block_records
from workloads.names import STEP

TIMER_COLUMNS = ["step", "phase", "duration_ns", "warmup", "rank"]  # a run's timers: step_timings less run_id
# the run's own checks that read its export (what was stored of them stands when the export is gone)
EXPORT_RUN_CHECKS = ("NVTX vs timers", "device")


@dataclass
class Baseline:
    """The runs without the profiler that a run's overhead is measured against."""

    runs: list[pd.DataFrame]  # each baseline run's timers (TIMER_COLUMNS)
    name: str  # what the figure is measured against, for people: "baseline run X", "3 baseline runs"
    label: str  # the profiled side's label ("nsys light"); the baseline's is BASELINE
    profiled: list[pd.DataFrame] | None = None  # the profiled runs behind the figure (None: the run alone)


@dataclass(frozen=True)
class Operators:
    """A torch.profiler trace's operator tables: the first `top` operators by self CPU time and, with
    kernels, by self CUDA time; or one table ordered by the column `sort` names. One table each for the
    whole run (None) or each of `within`'s phases."""

    top: int
    sort: str | None = None
    within: tuple[str | None, ...] = (None,)


@dataclass
class Measured:
    """What the harness knows of a run when its capture is read, as plain data. Each part of the record
    is built when what it needs is here (a baseline: the overhead; blocks: their times)."""

    timers: pd.DataFrame | None = None  # every step the run's timers timed (TIMER_COLUMNS); None: none
    phases: tuple[str, ...] = ()  # with timers: the phases held against the export's NVTX ranges
    world_size: int = 1
    device: str | None = None  # the device type the run asked for (cpu, cuda, mps)
    busy: list[str] | None = None  # why the machine was busy while it ran (empty: quiet; None: not known)
    baseline: Baseline | None = None  # the overhead table, and the run's overhead figure
    blocks: Collection[str] | None = None  # --nvtx-detail's block range names: their times (None: not asked)
    first_step: int = 0  # the first measured step's index (the warmup steps): where the blocks' steps start
    kernels: int = 0  # the top kernels table, this many rows (0: none)
    stats_format: str = DEFAULT_FORMAT  # the `nsys stats` format the kernel table follows
    why_no_ranges: str = ""  # why the harness's NVTX ranges can be missing, said when the export has none
    busy_of: tuple[str, ...] = ()  # phases whose GPU-busy share over the measured steps is asked (decode)
    record: RunRecord | None = None  # what the run recorded that the findings read (torch.compile's counters)
    signal: int | None = None  # the signal that ended a profiled program (`profile -- CMD`); None: it exited
    stop: Stop | None = None  # the run was stopped before its end (Ctrl-C, SIGTERM): its last steps never ran
    capture_range: str | None = NOT_KNOWN  # nsys's capture range (None: none), for the capture check's advice


@dataclass
class RunExamination:
    """The run's record as its capture shows it; `stored` is what goes into the results database."""

    nvtx: pd.DataFrame | None = None  # the ranges of the measured steps, nvtxsum-shaped
    kernels: pd.DataFrame | None = None
    agreement: pd.DataFrame | None = None  # analysis.compare.agreement's table
    overhead: pd.DataFrame | None = None  # analysis.compare.overhead's table
    blocks: tuple[pd.DataFrame, str] | None = None  # block records and their source
    operators: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # (title, table)
    report: Report | None = None  # a program's summary tables
    advice: dict[str, Any] | None = None  # health and findings (analysis.advice.record)
    degraded: str | None = None  # why the capture cannot be trusted (the run is then stored `degraded`)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why the tables could not be read
    busy: dict[str, float | None] = field(default_factory=dict)  # phase -> its GPU-busy share (busy_share)

    @property
    def agreement_shown(self) -> pd.DataFrame | None:
        """The agreement for people (ns columns shown in ms, the difference in percent); None: none."""
        return for_people(self.agreement) if self.agreement is not None and len(self.agreement) else None

    @property
    def stored(self) -> dict[str, Any]:
        """What is stored with the run: its agreement (of tables read whole), advice and blocks, where there
        are any."""
        out: dict[str, Any] = {}
        if self.error is None and self.agreement is not None and len(self.agreement):
            out["agreement"] = self.agreement
        if self.advice is not None:
            out["advice"] = self.advice
        if self.blocks is not None:
            out["blocks"] = self.blocks
        return out


def examine(export: Path | None, measured: Measured) -> RunExamination:
    """A run the harness timed (`run --nsys`): the overhead against its baseline, then what its export
    (None: none written) shows, read once: the NVTX table of the measured steps, the agreement with the
    timers, the top kernels, the blocks, the health and findings with the run's own checks. A table that
    cannot be read is `error`, and no blocks."""
    seen = RunExamination()
    seen.overhead, figure = compared(measured)
    verdicts = seen.overhead.filter(like="verdict").stack() if seen.overhead is not None else None
    if verdicts is not None and not verdicts.str.startswith("inconclusive").all():  # a figure from one run
        seen.notes.append(
            "overhead from one run each: its interval holds the step-to-step noise only, and two processes "
            "can differ by drift alone; `harness overhead --ci-target 5` alternates runs until it can tell"
        )
    if export is None:
        return seen
    unranged = None
    with open_trace(export) as trace:  # the one reading of the export (it fills the cache too)
        try:
            _timed_tables(seen, trace, measured)
        except NoRanges as e:
            unranged = str(e)
        except AnalysisError as e:
            seen.error = str(e)
        else:
            seen.blocks = _blocks(trace, measured, seen.notes)
        facts = run_facts(measured, seen.agreement, overhead=figure) if measured.timers is not None else None
        how = {"stop": measured.stop, "capture_range": measured.capture_range}
        _judge(seen, partial(capture_advice, trace, facts, measured.record, **how))
    said = checks_of(seen.advice or {})  # a check that failed for it says it, once
    if unranged is not None and not any(c.name == UNTIMED and c.status != OK for c in said):
        seen.error = unranged
    return seen


class NoRanges(AnalysisError): ...  # no NVTX data in the export (NVTX not traced): the steps have no ranges


def examine_trace(path: Path, measured: Measured, operators: Operators) -> RunExamination:
    """A torch.profiler trace (`run --profiler torch`), read once: its ranges (the trace holds the measured
    steps alone), its operator tables and the notes of its reading, the blocks, the GPU-busy share of the
    phases `busy_of` names. Not judged: a trace's health is `harness health`'s."""
    seen = RunExamination()
    with open_trace(path) as trace:
        try:
            ranges = _on_cpu(trace, nvtx_ranges(trace, names=[STEP, *measured.phases]))
            seen.nvtx = range_summary(ranges) if len(ranges) else None
            seen.operators = _operator_tables(trace, operators)
            seen.busy = {phase: busy_share(trace, phase) for phase in measured.busy_of}
            seen.notes += trace.notes
        except AnalysisError as e:
            seen.error = str(e)
        else:
            seen.blocks = _blocks(trace, measured, seen.notes)
    return seen


def examine_program(
    export: Path,
    stats_format: str = DEFAULT_FORMAT,
    signal: int | None = None,
    capture_range: str | None = NOT_KNOWN,
) -> RunExamination:
    """A program the harness timed nothing in (`profile -- CMD`), its export read once: the summary tables
    (in `stats_format`), the capture's health and findings; `signal`: the one that ended the program, said
    in its health (its capture lacks what nsys had not yet taken from it); `capture_range`: nsys's."""
    seen = RunExamination()
    with open_trace(export) as trace:
        try:
            seen.report = summary(trace, stats_format=stats_format)
        except AnalysisError as e:
            seen.error = str(e)
        ended = [program_end(signal)] if signal is not None else []
        _judge(seen, partial(capture_advice, trace, also=ended, capture_range=capture_range))
    return seen


def examine_capture(export: Path) -> RunExamination:
    """A capture whose timers nobody compares (an export `optimize` reads), read once for its health and
    findings alone."""
    seen = RunExamination()
    with open_trace(export) as trace:
        _judge(seen, partial(capture_advice, trace))
    return seen


def _judge(seen: RunExamination, judged: Callable[[], dict[str, Any]]) -> None:
    """The capture's health and findings (`judged`: capture_advice as the capture asks) into `seen`, and
    why the capture makes the run degraded; a reading that fails is a note, and no advice."""
    try:
        seen.advice = judged()
    except AnalysisError as e:
        seen.notes.append(f"no health or findings: {e}")
        return
    seen.degraded = degraded_reason(seen.advice)


def _timed_tables(seen: RunExamination, trace: Trace, m: Measured) -> None:
    """NVTX table of the measured steps, the NVTX-vs-timer agreement (the timers of the first rank that
    timed: the export read is that rank's), the top kernels."""
    assert m.timers is not None
    timers = m.timers[m.timers["rank"] == m.timers["rank"].min()] if len(m.timers) else m.timers
    try:
        ranges = nvtx_ranges(trace, names=[STEP, *m.phases])
    except ExportError as e:  # NVTX not traced: no NVTX data in the export
        raise NoRanges(str(e)) from None
    if not ranges["name"].isin(m.phases).any():  # said with its known causes, which no check names
        raise AnalysisError(
            f"the export {trace.path} holds none of the harness's NVTX ranges ({', '.join(m.phases)}). "
            + m.why_no_ranges
        )
    pairing = pair_ranges(timers[["step", "phase", "duration_ns", "warmup"]], ranges, m.phases)
    seen.notes += pairing.notes
    seen.agreement = agreement_table(pairing, m.phases)
    measured_steps = set(timers.loc[~timers["warmup"].astype(bool), "step"])
    if ranges["payload"].notna().all():
        ranges = ranges[ranges["payload"].astype("int64").isin(measured_steps)]
    seen.nvtx = range_summary(ranges)
    seen.busy = {phase: busy_share(trace, phase, measured_steps) for phase in m.busy_of}
    if not m.kernels:
        return
    if trace.has("kernels"):
        seen.kernels = kernel_summary(trace, stats_format=m.stats_format).head(m.kernels)
    elif m.device == "cpu":
        seen.notes.append("no CUDA kernels in the export (CPU run): kernel table skipped")
    else:
        seen.notes.append(
            f"no CUDA kernels in the export of this {m.device} run: the profiler did not trace the GPU "
            "(health check `device`)"
        )


def _operator_tables(trace: Trace, o: Operators) -> list[tuple[str, pd.DataFrame]]:
    out = []
    for part in o.within:
        title = f"top {o.top} operators{f' in {part}' if part else ''} by"
        if o.sort is not None:
            table = operator_table(trace, within=part, sort=o.sort)
            by = table.attrs["then"][0].removesuffix(" (ns)")
            out.append((f"{title} {by}", table.head(o.top)))
            continue
        table = operator_table(trace, within=part)
        out.append((f"{title} self CPU", table.head(o.top)))
        if SELF_CUDA in table.columns:
            out.append((f"{title} self CUDA", by_self_cuda(table).head(o.top)))
    return out


def _blocks(trace: Trace, m: Measured, notes: list[str]) -> tuple[pd.DataFrame, str] | None:
    """A --nvtx-detail run's block times from its trace (records and their source), or a note why none."""
    if m.blocks is None:
        return None
    try:
        records, source = trace_blocks(trace, m.blocks, m.phases, m.first_step)
    except ExportError as e:
        notes.append(f"cannot read per-block times from {trace.path}: {e}")
        return None
    if records.empty:
        notes.append(f"no --nvtx-detail ranges inside the measured steps of {trace.path}: no per-block times")
        return None
    return records, source


def trace_blocks(
    trace: Trace, names: Collection[str], phases: tuple[str, ...], first_step: int
) -> tuple[pd.DataFrame, str]:
    """Block records of a trace (analysis.views.blocks.block_records) and their source."""
    return block_records(trace, set(names), phases, step_offset=first_step)


def blocks_of_file(
    path: Path, names: Collection[str], phases: tuple[str, ...], first_step: int
) -> tuple[pd.DataFrame, str]:
    """Block records of a run's trace, opened for them (`harness blocks` of a run that stored none)."""
    with open_trace(path) as trace:
        return trace_blocks(trace, names, phases, first_step)


def compared(measured: Measured) -> tuple[pd.DataFrame | None, Overhead | None]:
    """The run against its baseline runs (none: None, None): per phase, with intervals and verdicts; and
    the profiler's overhead on whole steps, the figure the run's checks judge (None when it has none)."""
    b, timers = measured.baseline, measured.timers
    if b is None or timers is None:
        return None, None
    profiled = b.profiled if b.profiled is not None else [timers]
    runs = [(BASELINE, i, t) for i, t in enumerate(b.runs)] + [
        (b.label, i, t) for i, t in enumerate(profiled)
    ]
    table, found = overhead_and_headline(overhead_steps(runs), measured.phases)
    c = found.get(b.label)
    if c is None or math.isnan(c.effect_pct):
        return table, None
    return table, Overhead(b.label, float(c.effect_pct), float(c.ci_low_pct), float(c.ci_high_pct), b.name,
                           len(profiled))  # fmt: skip


def run_facts(
    measured: Measured,
    agreement: pd.DataFrame | None = None,
    export: ExportFacts | None = None,
    overhead: Overhead | None = None,
) -> RunFacts:
    """What the run says about itself: the overhead against its baseline (`compared`'s figure), the
    agreement (as read or as stored) and the steps its first rank timed, the ranks that reported steps,
    the device, why the machine was busy, and what its export holds (`export`, when read)."""
    timers = measured.timers if measured.timers is not None else pd.DataFrame(columns=TIMER_COLUMNS)
    ranks = sorted({int(r) for r in timers["rank"]})
    first = timers[(timers["rank"] == min(ranks, default=0)) & ~timers["warmup"].astype(bool)]
    timed: dict[int, list[str]] = {}
    for step, phase in zip(first["step"], first["phase"], strict=True):
        timed.setdefault(int(step), []).append(phase)
    return RunFacts(
        overhead=overhead,
        agreement=agreement,
        world_size=measured.world_size,
        ranks_seen=ranks,
        busy=measured.busy,
        timed=timed,
        export=export,
        device=measured.device,
        signal=measured.signal,
        stopped=measured.stop.how if measured.stop is not None else None,
    )


def capture_advice(
    trace: Trace,
    facts: RunFacts | None = None,
    record: RunRecord | None = None,
    also: list[Check] | None = None,
    stop: Stop | None = None,
    capture_range: str | None = NOT_KNOWN,
) -> dict[str, Any]:
    """The capture's health (its export's checks, the run's own where `facts` says what the run timed, and
    `also`; of a run stopped before its end, `stop`; made with nsys's `capture_range`) and its findings
    (with what the run recorded, `record`), as stored with the run."""
    health = capture_health(
        trace,
        stop,
        record.measured_steps if record is not None else 0,
        record.warmup if record is not None else None,
        capture_range,
    )
    if facts is not None:
        facts.export = export_facts(trace)
        health.checks += run_checks(facts)
    health.checks += also or []
    judged = advice_record(health, advice(trace, run=record))
    judged["export"] = export_stamp(Path(trace.path))  # what tells `show RUN` the file is still this one
    return judged


# where a stored run's findings come from: its capture read now, what was stored with it, or nothing at all
CAPTURE, STORED, NOTHING = "capture", "stored", "nothing"


@dataclass
class Judged:
    """A stored run's health and findings (`advise RUN`, `health RUN`)."""

    record: dict[str, Any]  # analysis.advice.record: health and findings
    health: Health
    notes: list[str] = field(default_factory=list)
    judged: str = CAPTURE  # where the findings come from: CAPTURE, STORED (the export is gone) or NOTHING


def judge_stored(
    trace: Trace | None,
    measured: Measured,
    agreement: pd.DataFrame | None,
    *,
    run: str,
    stored: dict[str, Any] | None = None,
    thresholds: Thresholds | None = None,
) -> Judged:
    """A stored run's health and findings: its capture's checks and findings from its trace (None: gone,
    then as stored with the run, `stored`), with what the run recorded (`measured.record`: torch.compile's
    counters, its roofline), and the run's own checks from `measured` (its stored figures) and `agreement`
    (as stored); where the trace is gone, the run's checks that read it as stored."""
    notes: list[str] = []
    facts = None
    judged = CAPTURE
    if trace is not None:
        rec = measured.record or RunRecord()  # not known: 0 steps timed, warmup None
        health = capture_health(trace, measured.stop, rec.measured_steps, rec.warmup, measured.capture_range)
        found = advice(trace, thresholds, measured.record or RunRecord())
        facts = export_facts(trace) if trace.format == "nsys-sqlite" else None
        record = advice_record(health, found)
    elif stored:
        judged = STORED
        record = dict(stored)
        record["not judged"] = _not_judged_when_gone(record.get("not judged") or [], run)
        health = Health(record.get("source") or f"run {run}")
        health.checks = [c for c in checks_of(record) if c.name not in RUN_CHECKS]
        notes.append(f"run {run}'s export is gone: the capture checks and findings stored with the run")
    else:
        judged = NOTHING
        record = {"source": None, "health": {}, "findings": []}
        health = Health(f"run {run}")
        notes.append(f"run {run} has no export or trace: only the run's own checks")
        if measured.stop is not None:  # no capture's checks to say it stopped: said here
            health.checks.append(run_stopped(measured.stop))
    checks = run_checks(run_facts(measured, agreement, facts, compared(measured)[1]))
    if trace is None and stored:  # the checks that read the export: as stored when it is gone
        kept = {c.name: c for c in checks_of(stored)}
        checks = [kept.get(c.name, c) if c.name in EXPORT_RUN_CHECKS else c for c in checks]
    health.checks += checks
    record["health"] = advice_record(health, [])["health"]
    record["untrusted"] = why_untrusted(health.checks) or None
    return Judged(record, health, notes, judged)


def _not_judged_when_gone(lines: list[str], run: str) -> list[str]:
    """What the findings stored with a run could not judge (they were judged on its capture alone, as the
    run ended), said as it stands now that its export is gone: `advise RUN` cannot judge it either."""
    out = []
    for line in lines:
        rule = line.partition(":")[0]
        if rule in NEEDS_RECORD:
            line = (
                f"{rule}: not judged: run {run}'s export is gone, and the findings stored with it were "
                f"judged on the capture alone, without {NEEDS_RECORD[rule]}"
            )
        out.append(line)
    return out


def busy_share(trace: Trace, phase: str, steps: Collection[int] | None = None) -> float | None:
    """A phase's GPU-busy share: the union of the GPU's work (kernels, copies, sets) inside the `phase`
    ranges whose payload (the step) is in `steps` (None: all), over the time of those ranges; None when the
    capture holds no GPU work or no such range.

    The in-process timers see the phase's wall time only; how much of it the GPU was working is in a capture
    that traced the GPU. Generate's decode is where it matters: a decode the host cannot launch fast enough
    leaves the GPU idle between small kernels (what CUDA-graph replay removes). The phase ranges close after
    their closing synchronise, so all of a phase's GPU work lies inside them."""
    if not any(trace.has(f) for f in ("kernels", "memcpy", "memset")) or not trace.has("nvtx"):
        return None
    ranges = _on_cpu(trace, nvtx_ranges(trace, names=[phase]))
    if steps is not None and ranges["payload"].notna().all():
        ranges = ranges[ranges["payload"].astype("int64").isin(list(steps))]
    if ranges.empty:
        return None
    events = gpu_events(trace)
    events = events[events["kind"] != "sync"]
    us, ue = merge(events["start"].to_numpy(), events["end"].to_numpy())
    starts, ends = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    busy, wall = int(clipped_sums(us, ue, starts, ends).sum()), int((ends - starts).sum())
    return busy / wall if wall else None


def _on_cpu(trace: Trace, ranges: pd.DataFrame) -> pd.DataFrame:
    """`ranges` less a Kineto trace's GPU copies of them (gpu_user_annotation): those time the GPU's work of
    the range, on the GPU's timeline, not the range (they would count each range twice)."""
    if trace.format.startswith("nsys"):
        return ranges
    return ranges[(ranges["domain"].astype(object) != GPU_DOMAIN).to_numpy()]
