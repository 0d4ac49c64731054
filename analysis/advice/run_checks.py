"""Run-level health: what a stored run says about its own trustworthiness, beside its capture's checks.

A run brings figures no trace holds: the profiler's overhead against the run without it (with its
confidence interval), the agreement of NVTX ranges with the in-process timers, the ranks that reported
steps against the ranks started, and how busy the machine was. Each check here is ok / warn / fail with its
evidence and what to do (analysis.advice.health.Check), from plain figures handed in by the caller
(harness/experiments/advice.py reads them from the results database; `run --nsys` from what it measured):
this module reads neither the database nor /proc.

Thresholds:
- overhead: warn from 5% of the step (a profiled phase that moved by 5% is no longer the phase measured
  without it), fail from 20% (nsys-ai's `doctor` fails a capture there); only warn where its 95% interval
  reaches below 0 (the overhead's own verdict is then inconclusive: no failure drawn from the noise).
- NVTX vs timers: warn from 2% (the 2% that changes the comparisons the harness makes), fail from 10%
  (the ranges no longer time the phases: a range pushed on another thread, a capture started late), once
  the difference is 50 µs a step or more: below that it is what a range's push and pop and a timer's read
  cost (15–20 µs a phase on a CPU under nsys), which a phase of a few tens of µs (one token's decode) shows
  as 10% and more although the ranges time it.
- NVTX vs timers warns instead of failing on a busy machine (the machine load check's reasons): there the
  load holds up a range's push or pop, which NVTX times and the timers do not (one NVTX call held up 6.6 ms
  made a 5 ms optimizer read +39.7% with two test runs sharing 2 CPUs), so a difference no longer tells a
  range that times another interval. Lost ranges fail on a busy machine too.
- NVTX vs timers also fails when a measured step the timers timed has no step range or lacks a phase range
  in the export (naming the first such step): the NVTX tables and the agreement leave it out silently.
- ranks: fail when a rank of a multi-rank run reported no step (its figures are missing from every table).
- machine: warn when the load measures (harness.core.machine) call the machine busy.
- device: fail when a run on a GPU (`--device cuda`) has an export without a single kernel: the profiler did
  not trace the GPU, and every GPU table would be empty or say "CPU run".
- program end: warn when the profiled program was ended by a signal (SIGKILL, SIGSEGV, …): what nsys had not
  yet taken from it is missing (a range still open then is not in the export at all). Only such a run has
  this check.
- measured steps: of a run stopped before its end (Ctrl-C, SIGTERM) that has no capture (whose checks say
  where it stopped), warn; fail when it finished no measured step. Only such a run has this check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from analysis.advice.base import Stop
from analysis.advice.checks import FAIL, OK, WARN, Check
from workloads.names import STEP, counted

OVERHEAD_WARN_PCT = 5.0
OVERHEAD_FAIL_PCT = 20.0  # nsys-ai's doctor fails here
AGREEMENT_WARN_PCT = 2.0
AGREEMENT_FAIL_PCT = 10.0
AGREEMENT_FLOOR_NS = 50_000  # a smaller difference a step is the ranges' and timers' own cost
UNTIMED = "NVTX vs timers"  # the check that says which timed steps the capture holds no NVTX range of
RUN_CHECKS = ("profiler overhead", UNTIMED, "ranks", "machine load", "device", "program end")
GPU_DEVICES = ("cuda",)


@dataclass
class Overhead:
    """The profiler's overhead on whole steps: percent of the baseline mean, with its confidence interval."""

    profiler: str
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    baseline: str  # the run it is measured against
    runs: int = 1  # profiled runs behind the figure (`harness overhead` alternates several)


@dataclass
class RunFacts:
    """What a run says about itself. None: the run has no such figure (the check says so and is ok)."""

    overhead: Overhead | None = None
    agreement: pd.DataFrame | None = None  # phase, steps, rel_diff (analysis.compare.agreement's table)
    world_size: int = 1
    ranks_seen: list[int] = field(default_factory=list)
    busy: list[str] | None = None  # why the machine was busy (empty: quiet; None: not recorded)
    timed: dict[int, list[str]] | None = None  # measured step -> the phases its timers timed
    export: ExportFacts | None = None  # what the run's export holds (None: no export read)
    device: str | None = None  # the device type the run asked for (cpu, cuda, mps)
    signal: int | None = None  # the signal that ended the profiled program (None: it exited)
    stopped: str | None = None  # how the run was stopped before its end ("interrupted by SIGINT"); None: not


@dataclass
class ExportFacts:
    """What a run's export holds, for the run's own checks (analysis.advice.coverage.export_facts)."""

    kernels: int  # kernels in the export
    calls: int  # CUDA API calls in the export
    # range name (step, phases) -> the step indices (payloads) it has; None: ranges without step indices
    ranged: dict[str, set[int]] | None
    nvtx_end: str | None  # when the harness's ranges end, said for people ("18.497 s"); None: no range


def run_checks(facts: RunFacts) -> list[Check]:
    return [
        _overhead(facts.overhead),
        _agreement(facts.agreement, facts.timed, facts.export, facts.stopped, facts.busy),
        _ranks(facts),
        _machine(facts.busy),
        _device(facts.device, facts.export),
        *([program_end(facts.signal)] if facts.signal is not None else []),
    ]


def program_end(signal: int) -> Check:
    """A program ended by a signal: its capture lacks what nsys had not yet taken from it."""
    return Check(
        "program end",
        WARN,
        f"the program was ended by signal {signal}: what nsys had not yet taken from it is missing (an NVTX "
        "range still open then is not in the export at all)",
        "let the program end by itself before the capture does, then profile it again",
    )


def run_stopped(stop: Stop) -> Check:
    """A run stopped before its end that has no capture to say so (its capture's checks do where it has
    one): its figures are of the steps it finished, none of them a failure to judge."""
    left = stop.planned - stop.measured
    said = f"{stop.said()}; the other {left:,} never ran"
    if not stop.measured:
        return Check("measured steps", FAIL, f"{said}: there is nothing to judge", "run it again to its end")
    return Check(
        "measured steps",
        WARN,
        f"{said}: its figures are of those it finished",
        f"run again to measure all {stop.planned}",
    )


def _overhead(o: Overhead | None) -> Check:
    name = "profiler overhead"
    if o is None:
        return Check(name, OK, "no baseline run without the profiler: no overhead figure")
    ci = (
        f"95% CI {o.ci_low_pct:+.1f}% to {o.ci_high_pct:+.1f}%"
        if math.isfinite(o.ci_low_pct) and math.isfinite(o.ci_high_pct)
        else "no 95% CI: too few measured steps"
    )
    evidence = f"{o.profiler} adds {o.effect_pct:+.1f}% to the step ({ci}) against {o.baseline}" + (
        f", {o.runs} runs" if o.runs > 1 else ", one run each"
    )
    status = FAIL if o.effect_pct >= OVERHEAD_FAIL_PCT else WARN if o.effect_pct >= OVERHEAD_WARN_PCT else OK
    if status == OK:
        return Check(name, OK, evidence)
    fix = (
        "compare phase times only with runs under the same profiler; lighten the capture (--nsys-mode light, "
        "fewer traced APIs, --nsys-capture measured)"
    )
    if o.runs == 1:
        fix += "; `harness overhead --ci-target 5` measures it with alternating repeats"
    limit = OVERHEAD_FAIL_PCT if status == FAIL else OVERHEAD_WARN_PCT
    evidence += f"; {limit:g}% or more"
    if o.ci_low_pct < 0:  # the overhead's own verdict is inconclusive: no failure drawn from the noise
        status = WARN
        evidence += " by the means, but the interval reaches below 0: not told from the noise between runs"
    return Check(name, status, evidence, fix)


def _agreement(
    table: pd.DataFrame | None,
    timed: dict[int, list[str]] | None = None,
    export: ExportFacts | None = None,
    stopped: str | None = None,
    busy: list[str] | None = None,
) -> Check:
    name = UNTIMED
    missing = _untimed(table, timed, export, stopped)
    if missing is not None:
        return missing
    if table is None or table.empty:
        return Check(name, OK, "no agreement table (a run without NVTX ranges read back)")
    diffs = table.assign(pct=table["rel_diff"].astype(float) * 100).dropna(subset=["pct"])
    if diffs.empty:
        return Check(name, OK, "no phase with both NVTX ranges and timers")
    if {"nvtx_mean_ns", "timer_mean_ns"} <= set(diffs.columns):
        gap = (diffs["nvtx_mean_ns"].astype(float) - diffs["timer_mean_ns"].astype(float)).abs()
        diffs = diffs.assign(gap=gap.fillna(float("inf")))
    else:  # a table of differences alone: each judged by its percentage
        diffs = diffs.assign(gap=float("inf"))
    flagged = diffs[(diffs["pct"].abs() >= AGREEMENT_WARN_PCT) & (diffs["gap"] >= AGREEMENT_FLOOR_NS)]
    pool = diffs if flagged.empty else flagged
    worst = pool.loc[pool["pct"].abs().idxmax()]
    pct = float(worst["pct"])
    evidence = f"largest difference {pct:+.2f}% ({worst['phase']}, {counted(int(worst['steps']), 'step')})"
    if flagged.empty:
        if abs(pct) < AGREEMENT_WARN_PCT:
            return Check(name, OK, f"{evidence}; every phase within {AGREEMENT_WARN_PCT:g}%")
        return Check(
            name,
            OK,
            f"{evidence}, {worst['gap'] / 1000:.0f} µs a step; every phase within {AGREEMENT_WARN_PCT:g}% or "
            f"{AGREEMENT_FLOOR_NS // 1000} µs a step (what the ranges and the timers themselves cost)",
        )
    status = FAIL if abs(pct) >= AGREEMENT_FAIL_PCT else WARN
    limit = AGREEMENT_FAIL_PCT if status == FAIL else AGREEMENT_WARN_PCT
    if status == FAIL and busy:
        return Check(
            name,
            WARN,
            f"{evidence}: {limit:g}% or more, on a busy machine ({'; '.join(busy)})",
            "the load holds up the ranges' push and pop, which NVTX times and the timers do not: run "
            "again on a quiet machine; if they still differ, the ranges time another interval",
        )
    return Check(
        name,
        status,
        f"{evidence}: {limit:g}% or more",
        "the ranges and the timers no longer time the same interval: look for a capture that started late, "
        "a range pushed on another thread or work left running across the synchronisation",
    )


def _untimed(
    table: pd.DataFrame | None,
    timed: dict[int, list[str]] | None,
    export: ExportFacts | None,
    stopped: str | None = None,
) -> Check | None:
    """A failure when measured steps the timers timed have no NVTX range (or lack a phase's), else None.
    From the export's ranges when it was read (naming the first such step), else from the stored agreement's
    step counts. Of a run that was stopped (`stopped`), timed steps that lack ranges only after the last
    whole one are where the profiler stopped recording before the run did: said (a warning), not as lost."""
    if not timed:
        return None
    name = UNTIMED
    fix = (
        "NVTX ranges were lost (or not traced): the NVTX tables and the agreement leave these steps out. "
        "Capture again with NVTX traced and a profiler that supports the program's CUDA (`harness doctor`), "
        "one profiling session at a time"
    )
    if export is not None and export.ranged is not None:
        ranged = export.ranged
        lacking = {
            step: [n for n in (STEP, *phases) if step not in ranged.get(n, set())]
            for step, phases in sorted(timed.items())
        }
        lacking = {s: names for s, names in lacking.items() if names}
        if not lacking:
            return None
        step, names = next(iter(lacking.items()))
        whole = [n for n in (STEP, *timed[step])]
        what = "no NVTX range" if names == whole else f"no {', '.join(names)} range"
        if stopped and min(lacking) > max((s for s in timed if s not in lacking), default=-1):
            return Check(
                name,
                WARN,
                f"the run was {stopped} and its profiler stopped recording before the run did: "
                f"{len(lacking)} of {len(timed)} timed measured steps, from step {step} on ({what}), are not "
                "whole in the capture; "
                + (f"the harness's ranges end at {export.nvtx_end}" if export.nvtx_end else "it holds none"),
                "the NVTX tables and the agreement hold the steps the capture recorded whole; run again to "
                "measure every step",
            )
        return Check(
            name,
            FAIL,
            f"{len(lacking)} of {len(timed)} timed measured steps lack{'s' if len(lacking) == 1 else ''} "
            f"NVTX ranges: step {step} is the first, with {what}; "
            + (
                f"the harness's ranges end at {export.nvtx_end}"
                if export.nvtx_end
                else "the export holds none"
            ),
            fix,
        )
    if table is None or table.empty:
        return None
    counted = dict(zip(table["phase"], table["steps"].astype(int), strict=True))
    short = [(p, n) for p, n in counted.items() if n < len(timed)]
    if not short:
        return None
    said = ", ".join(f"{p} {n} of {len(timed)}" for p, n in short)
    return Check(name, FAIL, f"NVTX ranges paired with fewer steps than the timers timed: {said}", fix)


def _device(device: str | None, export: ExportFacts | None) -> Check:
    name = "device"
    if device is None:
        return Check(name, OK, "device not recorded")
    if device not in GPU_DEVICES:
        return Check(name, OK, f"a {device} run: no GPU work to trace")
    if export is None:
        return Check(name, OK, f"a {device} run; no export read")
    if export.kernels:
        return Check(name, OK, f"a {device} run with {export.kernels:,} kernels in its export")
    return Check(
        name,
        FAIL,
        f"a --device {device} run whose export holds no kernel ({export.calls:,} CUDA API calls): the "
        "profiler did not trace the GPU work",
        "the nsys in use cannot trace this program's CUDA, or CUDA tracing was off: `harness doctor` says "
        "which nsys is used; install one that supports the program's CUDA and run again",
    )


def _ranks(facts: RunFacts) -> Check:
    name = "ranks"
    if facts.world_size <= 1:
        return Check(name, OK, "one process")
    missing = sorted(set(range(facts.world_size)) - set(facts.ranks_seen))
    if not missing:
        return Check(name, OK, f"all {facts.world_size} ranks reported steps")
    shown = ", ".join(map(str, missing[:8])) + (", …" if len(missing) > 8 else "")
    return Check(
        name,
        FAIL,
        f"{len(missing)} of {facts.world_size} ranks reported no step (rank {shown})",
        "the per-rank and straggler tables leave them out: look at those ranks' logs (a rank that died or "
        "hung), then run again",
    )


def _machine(busy: list[str] | None) -> Check:
    name = "machine load"
    if busy is None:
        return Check(name, OK, "not recorded for this run")
    if not busy:
        return Check(name, OK, "quiet while the run ran")
    return Check(
        name,
        WARN,
        f"busy while the run ran: {'; '.join(busy)}",
        "timings are noisier than usual: run again on a quiet machine, or compare only runs made together",
    )
