"""Coverage over time: did the capture record the GPU work and the NVTX ranges of every step, or did a trace
stop part way while the program went on?

Real captures break that way without a word from the profiler: on an H100 with a CUDA 13 program, nsys 2023.4
recorded every CUDA API call and NVTX range of 7 training steps but only 13 kernels (its trace of kernels
stopped in the first step); Kineto loses GPU events when CUPTI's buffers are lost. Counts over the whole
capture hide it (13 kernels is "some kernels"); time does not. So each check here lines up, per step, the
kernel launch calls the host made against the GPU work they launched (kernels, copies and sets with the same
process and correlation id), the NVTX ranges against the CUDA calls that go on after them, and the step
ranges against one another and against their phase ranges (analysis.advice.step_ranges).

Steps are those analysis.advice.steps finds: the harness's `step` ranges, Kineto's `ProfilerStep#N`, or
plain `step` ranges; measured steps are those inside the harness's `measured` range (all without one). NVTX
lost in the middle of the measured steps leaves their launch calls in the `measured` range but in no step.

Times are said in seconds on the capture's own clock: nsys's timeline (nanoseconds since its session
started), or, for a Kineto trace, since its first event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from analysis.advice.base import Stop
from analysis.advice.checks import FAIL, OK, WARN, Check, Health
from analysis.advice.launches import launches
from analysis.advice.run_checks import ExportFacts
from analysis.advice.step_ranges import among, broken_steps, inverted_check, ranges_check, steps_said
from analysis.advice.step_table import step_table
from analysis.advice.steps import UNKNOWN_WARMUP, Steps, seconds, steps
from analysis.intervals import covered, in_windows
from analysis.trace.trace import Trace
from analysis.views.timeline import time_zero
from workloads.names import ALL_PHASES, STEP, counted

# Launch calls without GPU work over the whole capture: from this share on the capture fails. A few are
# normal: a launch that fails (a bad configuration) runs nothing; launches made while a stream is being
# captured into a CUDA graph run nothing until the graph is launched; the capture's last calls may launch
# kernels that end after the capture stops. The largest share of any shared export or trace is 0.50%
# (torchrun_2gpu: 20 of 4,006, its last calls; the others 0: docs/advice.md lists each); a trace of kernels
# that stopped leaves most calls without (h100-medium cut after step 5 of 15: 79.6%).
MISSING_FAIL_PCT = 1.0
# A measured step fails when more than this share of its launch calls have no GPU work: what a trace that
# stopped leaves (every launch after the stop), never a few failed launches.
STEP_MISSING_SHARE = 0.5
# NVTX that stops while CUDA goes on: more launch calls after the last step's range than in an average step
# (a harness run launches nothing after its steps but the synchronisation that ends them).
AFTER_STEPS_SHARE = 1.0
# A measured step with no CUDA at all fails when the steps that launch (warm-up ones too) launch this many
# kernels each on average (a step of a GPU program launches hundreds; a CPU step none)
QUIET_AGAINST = 10


def _step_at(st: Steps, t: int) -> str:
    f = st.frame
    inside = f[(f["start"] <= t) & (f["end"] > t)]
    if len(inside):
        return f" (step {int(inside['step'].iloc[-1])})"
    before = f[f["end"] <= t]
    return f" (after step {int(before['step'].iloc[-1])})" if len(before) else " (before the first step)"


# why a step whose range is broken (step_ranges.broken_steps) is left out of the checks per step
BROKEN = (
    "its step range lasts no time or does not hold its phase ranges (NVTX steps fails it), so what the range "
    "holds is not the step's work"
)
FIX_NVTX_LOST = (
    "the NVTX tables, the split by phase and NVTX vs timers miss those steps. Capture again with a profiler "
    "that supports the program's CUDA (`harness doctor`), one session at a time"
)
FIX_GPU = (
    "the profiler stopped recording GPU work while the program went on: every table of kernels and GPU "
    "time, and every finding, misses it. Check that the profiler supports the program's CUDA (`harness "
    "doctor`) and that no other profiling session ran at the same time, then capture again"
)

FIX_CALLS = (
    "the profiler lost the CUDA calls that launched this GPU work while it recorded the work itself: tables "
    "by launch call, by NVTX range and by phase leave the work out. Check that the profiler supports the "
    "program's CUDA (`harness doctor`) and that no other profiling session ran at the same time, then "
    "capture again"
)


@dataclass
class Coverage:
    """What both checks read: the trace's steps and its launch calls with their GPU work."""

    steps: Steps
    launches: pd.DataFrame


def coverage_of(trace: Trace, warmup: int | None = None) -> Coverage:
    """`warmup`: the run's warm-up steps, where its record is at hand (analysis.advice.steps)."""
    return Coverage(steps(trace, warmup), launches(trace))


def gpu_coverage(trace: Trace, health: Health, cov: Coverage | None = None) -> Check:
    """Each launch call against the GPU work it launched, over the capture and per measured step."""
    name = "GPU coverage"
    cov = cov or coverage_of(trace)
    calls = cov.launches
    if calls.empty:
        if trace.has("runtime"):  # CUDA traced: its calls launch no kernel (weatherbench2: a memset)
            n = len(trace.frame("runtime", ["start"]))
            return Check(name, OK, f"no kernel launch calls to follow ({n:,} CUDA API calls, none a launch)")
        return Check(name, OK, "no kernel launch calls to follow (no CUDA API trace, or a CPU run)")
    zero = time_zero(trace)
    kernel_calls = calls[~calls["graph"].astype(bool)]
    missing = kernel_calls[kernel_calls["work"] == 0]
    pct = 100 * len(missing) / len(kernel_calls) if len(kernel_calls) else 0.0
    st = cov.steps
    table = step_table(trace, st.frame, calls) if len(st.frame) else pd.DataFrame()
    if len(table):
        health.details["GPU coverage by step"] = table
    stopped = _stop(calls, kernel_calls, st, zero)
    which = among(
        table.loc[table["Measured"], "Step"].tolist() if len(table) else [], st.has_measured or st.by_record
    )
    broken = broken_steps(trace, st) if len(table) else []
    aside = ""
    if broken:  # the NVTX steps check fails them: what lies in their ranges is not their work
        keys = list(zip(table["Step"], table["Start (ns)"], strict=True))
        table = table[[k not in set(broken) for k in keys]]
        aside = f"; {steps_said([s for s, _ in broken])} not judged: {BROKEN}"
    measured = table[table["Measured"]] if len(table) else table
    if len(measured):
        lost = measured[
            (measured["Launch calls"] > 0)
            & (measured["Without GPU work"] > STEP_MISSING_SHARE * measured["Launch calls"])
        ]
        quiet = _quiet(table, kernel_calls, zero, which)
        if len(lost):
            first = lost.iloc[0]
            return Check(
                name,
                FAIL,
                f"{which(lost['Step'].tolist())} launch{'es' if len(lost) == 1 else ''} kernels that never "
                f"ran: step "
                f"{first['Step']} (from {seconds(first['Start (ns)'], zero)}) has "
                f"{first['Without GPU work']:,} of {first['Launch calls']:,} launch calls without GPU work; "
                f"{stopped}" + (f"; {quiet[0]}" if quiet else "") + aside,
                FIX_GPU,
            )
        if quiet and st.warmup_unknown:  # quiet steps may be warm-up ones: not a failure it can tell
            return Check(name, WARN, f"{UNKNOWN_WARMUP}; {quiet[0]}{aside}", quiet[1])
        if quiet:
            return Check(name, FAIL, quiet[0] + aside, quiet[1])
    if pct >= MISSING_FAIL_PCT:
        said = f"{len(missing):,} of {len(kernel_calls):,} kernel launch calls ({pct:.2f}%) have no GPU work"
        return Check(name, FAIL, f"{said}; {stopped}{aside}", FIX_GPU)
    return Check(name, OK, _covered(calls, kernel_calls, missing, pct, table, zero) + aside)


def _stop(calls: pd.DataFrame, kernel_calls: pd.DataFrame, st: Steps, zero: int) -> str:
    """When the trace of kernels stops: the last launch call that has its GPU work, and the calls after it."""
    covered = calls[calls["work"] > 0]
    if covered.empty:
        return "no launch call has GPU work: the trace of kernels recorded nothing"
    stop = int(covered["start"].max())
    after = kernel_calls[kernel_calls["start"] > stop]
    if after.empty:
        return (
            f"they are not where a trace stopped: launch calls have GPU work to the last, at "
            f"{seconds(stop, zero)}"
        )
    return (
        f"the trace of kernels stops at {seconds(stop, zero)}{_step_at(st, stop)}: the {len(after):,} launch "
        f"calls after it, to {seconds(kernel_calls['start'].max(), zero)}, have none"
    )


def _quiet(
    table: pd.DataFrame, kernel_calls: pd.DataFrame, zero: int, which: Callable[[list[int]], str]
) -> tuple[str, str] | None:
    """Measured steps with no launch call (of a kernel or a graph) while other steps (warm-up ones too)
    launch, said with what to do: the CUDA trace has a gap there, or stopped. Steps where kernels without a
    launch call ran are said apart: there only the launch calls were lost."""
    busy = table[table["Launch calls"] >= QUIET_AGAINST]
    measured = table[table["Measured"]]
    launched = measured[["Launch calls", "Graph launches", "Kernels", "Copies", "Sets"]].sum(axis=1)
    silent = measured[launched == 0]
    if busy.empty or silent.empty:
        return None
    ran = silent["Kernels without launch call"] > 0

    def gap(steps: pd.DataFrame, has: str, stops: str) -> str:
        start = seconds(int(steps["Start (ns)"].iloc[0]), zero)
        resumes = kernel_calls[kernel_calls["start"] > steps["End (ns)"].max()]
        if len(resumes):
            return f"{has} from {start} to {seconds(resumes['start'].min(), zero)}"
        return f"{stops} {start}"

    said = []
    if (~ran).any():
        quiet = silent[~ran]
        launch = f"launches {busy['Launch calls'].iloc[0]:,}" if len(busy) == 1 else (
            f"launch {busy['Launch calls'].mean():,.0f}"
        )  # fmt: skip
        said.append(
            f"{which(quiet['Step'].tolist())} recorded no launch call and no GPU work while "
            f"{steps_said(busy['Step'].tolist())} {launch} kernels{'' if len(busy) == 1 else ' each'}: "
            + gap(quiet, "the CUDA trace has nothing", "the CUDA trace stops before")
        )
    if ran.all():
        lost, one = silent, len(silent) == 1
        api = gap(lost, "the CUDA API trace has no launch call", "the CUDA API trace stops before")
        said.append(
            f"{which(lost['Step'].tolist())} recorded no launch call while {_orphans(lost):,} kernels ran in "
            f"{'it' if one else 'them'}: {'its' if one else 'their'} launch calls are missing ({api})"
        )
        return "; ".join(said), FIX_CALLS
    if ran.any():
        lost = silent[ran]
        said.append(
            f"{steps_said(lost['Step'].tolist())} recorded no launch call while "
            f"{_orphans(lost):,} kernels ran in {'it' if len(lost) == 1 else 'them'}"
        )
    return "; ".join(said), FIX_GPU


def _orphans(steps: pd.DataFrame) -> int:
    return int(steps["Kernels without launch call"].sum())


def _covered(
    calls: pd.DataFrame, kernel_calls: pd.DataFrame, missing: pd.DataFrame, pct: float, table: pd.DataFrame,
    zero: int,
) -> str:  # fmt: skip
    """The evidence of a capture whose GPU work is all there."""
    evidence = f"{len(kernel_calls) - len(missing):,} of {len(kernel_calls):,} kernel launch calls ran"
    if len(missing):
        evidence += (
            f"; {len(missing):,} ({pct:.2f}%) did not, from {seconds(missing['start'].min(), zero)} (below "
            f"{MISSING_FAIL_PCT:g}%: failed launches, launches into a CUDA graph being captured, the "
            "capture's last calls)"
        )
    graphs = calls[calls["graph"].astype(bool)]
    if len(graphs):
        evidence += f"; {len(graphs):,} graph launches, {int((graphs['work'] > 0).sum()):,} with GPU work"
    if len(table):
        measured = table[table["Measured"]]
        if measured.empty:
            evidence += f"; no measured step among {steps_said(table['Step'].tolist())} (all warm-up)"
        else:
            evidence += (
                f"; {counted(len(measured), 'step')} checked, "
                f"{measured['Launch calls'].median():,.0f} launch calls each"
            )
        warm = table[~table["Measured"] & (table["Launch calls"] == 0)]
        if len(warm) and (measured["Launch calls"] > 0).any():
            evidence += (
                f"; warm-up {steps_said(warm['Step'].tolist())}: no launch call recorded (not measured)"
            )
    return evidence


def _ended_early(stop: Stop, cut: list[tuple[int, list[str]]], whole: list[int]) -> str | None:
    """Where a stopped run's capture ends before the steps the run finished, said; None: it holds them all."""
    finished = stop.first + stop.measured - 1  # the last measured step the run finished
    last, names = cut[0] if cut else (max(whole, default=stop.first - 1), [])
    if last > finished or (last == finished and not cut):
        return None
    said = f"its capture ends before the run did (the profiler stopped recording first): step {last} "
    said += f"has no {', '.join(names)} range{'s' * (len(names) > 1)}" if cut else "is its last whole step"
    if last < finished:
        span = f"step {finished} is" if last + 1 == finished else f"steps {last + 1}–{finished} are"
        said += f", and the run's {span} not in it"
    return said + f"; the other {stop.planned - stop.measured:,} measured steps never finished"


def nvtx_steps(
    trace: Trace, health: Health, cov: Coverage | None = None, stop: Stop | None = None, timed: int = 0
) -> Check:
    """Every measured step has its step and phase ranges, and no CUDA work goes on after the last step. Of a
    run that was stopped (`stop`), the step it stopped in lacks the ranges it never reached and the steps
    after it are not there: said as such (a warning), not as ranges the profiler lost. `timed`: the measured
    steps the run's timers timed (0: not known), what steps lacking ranges are counted against."""
    name = "NVTX steps"
    cov = cov or coverage_of(trace)
    st = cov.steps
    zero = time_zero(trace)
    if inverted := inverted_check(trace, st, zero):
        return inverted
    if st.frame.empty:
        return Check(name, OK, "no step ranges (the harness's `step`, or ProfilerStep#N)")
    f = st.frame
    kernel_calls = cov.launches[~cov.launches["graph"].astype(bool)]
    in_steps = int(
        in_windows(kernel_calls["pid"].to_numpy(), kernel_calls["start"].to_numpy(), {"n": None}, f)[
            "n"
        ].sum()
    )
    after = kernel_calls[kernel_calls["start"] >= st.nvtx_end]
    per_step = in_steps / len(f)
    if per_step > 0 and len(after) > AFTER_STEPS_SHARE * per_step:
        last = int(f.loc[f["end"].idxmax(), "step"])
        return Check(
            name,
            FAIL,
            f"the step ranges stop after step {last} at {seconds(st.nvtx_end, zero)}, but {len(after):,} "
            f"kernel launch calls ({100 * len(after) / len(kernel_calls):.0f}%) follow, to "
            f"{seconds(after['start'].max(), zero)}: NVTX recording stopped while the program went on",
            "the NVTX tables, the split by phase and NVTX vs timers miss every step after it. Capture again "
            "with a profiler that supports the program's CUDA (`harness doctor`), one session at a time",
        )
    if st.source != "harness":
        if broken := ranges_check(trace, st, zero):
            return broken
        return Check(name, OK, f"{len(f)} steps ({st.source}), no launch call after the last one")
    expected = frozenset().union(*f["phases"])
    checked = f[f["measured"]]
    which = "measured step" if st.has_measured or st.by_record else "step"
    lacking = [
        (int(r.step), _ordered(expected - r.phases)) for r in checked.itertuples() if expected - r.phases
    ]
    ended = f"the harness's ranges end at {seconds(st.nvtx_end, zero)}"
    whole = [int(s) for s in checked["step"] if int(s) not in dict(lacking)]
    cut = [(s, n) for s, n in lacking if s > max(whole, default=-1)] if stop is not None else []
    lost = [(s, n) for s, n in lacking if (s, n) not in cut]
    if lost:
        step, names = lost[0]
        steps = [s for s, _ in lost]
        unstepped = None  # more measured steps than their ranges show (how many, the timers know)
        if timed <= len(checked) and stop is None:
            unstepped = _unstepped(st, kernel_calls, per_step, zero)
        said = _lacking(steps, len(checked), which, timed if stop is None else 0, unstepped is not None)
        said += f" step {step} has no {', '.join(names)}" + (f"; {unstepped}" if unstepped else "")
        return Check(
            name,
            FAIL,
            f"{said}; {ended}" + (f"; {stop.said()}" if stop else ""),
            "NVTX events were lost: the NVTX tables, the split by phase and NVTX vs timers leave these steps "
            "out. Capture again with a profiler that supports the program's CUDA (`harness doctor`)",
        )
    if broken := ranges_check(trace, st, zero):
        return broken
    if (unstepped := _unstepped(st, kernel_calls, per_step, zero)) is not None:
        return Check(name, FAIL, f"{unstepped}; {ended}", FIX_NVTX_LOST)
    if gap := _gap(f):  # lost with their CUDA work, or in a CPU run: no launch call tells
        has = "has" if len(gap) == 1 else "have"
        among = steps_said(checked["step"].astype(int).tolist())
        evidence = f"{steps_said(gap)} {has} no range among the {which}s ({among}): NVTX recording lost "
        evidence += f"them; {ended}"
        return Check(name, FAIL, evidence, FIX_NVTX_LOST)
    if stop is not None:
        if early := _ended_early(stop, cut, whole):
            fix = f"the NVTX tables and the split by phase hold the steps recorded whole; run {stop.planned}"
            return Check(name, WARN, f"{stop.said()}; {early}; {ended}", f"{fix} steps again")
        at = cut[0][0] if cut else None
        never = max(stop.planned - stop.measured - (1 if cut else 0), 0)
        evidence = stop.said(at)
        if cut:
            names = cut[0][1]
            evidence += f": step {at} has no {', '.join(names)} range{'s' if len(names) > 1 else ''} (it "
            evidence += "stopped inside it)"
        after = (
            f"the {never:,} measured step{'s' if never != 1 else ''} after it"
            if cut
            else f"the other {never:,}"
        )
        evidence += f"; {after} never ran; {ended}"
        return Check(
            name,
            WARN,
            evidence,
            f"the NVTX tables and the split by phase hold the {stop.measured} measured steps finished before "
            f"the stop; run again to measure all {stop.planned}",
        )
    each = "each with" if len(checked) != 1 else "with"
    evidence = f"{counted(len(checked), which)} ({steps_said(checked['step'].tolist())}), {each} "
    evidence += ", ".join(_ordered(expected))
    if st.by_record:
        evidence += "; no `measured` range: the steps after the run's warm-up ones checked"
    elif not st.has_measured:
        evidence += "; no `measured` range: every step checked"
    warm = [(int(r.step), _ordered(expected - r.phases)) for r in f[~f["measured"]].itertuples()]
    warm = [(s, n) for s, n in warm if n]
    if warm:
        evidence += "; warm-up, not measured: " + ", ".join(f"step {s} lacks {', '.join(n)}" for s, n in warm)
    return Check(name, OK, evidence)


def _lacking(steps: list[int], recorded: int, which: str, timed: int, more: bool) -> str:
    """`6 of 10 measured steps (by the run's timers) lack NVTX ranges: 5 have none;`: counted against the
    steps the run timed where that is known, else against the steps whose ranges were recorded, said so
    where the capture shows more (`more`)."""
    lack = "lacks" if len(steps) == 1 else "lack"
    named = f" ({steps_said(steps)})" if len(steps) > 1 else ""
    if timed > recorded:
        none = timed - recorded
        return (
            f"{len(steps) + none} of {timed} {which}s (by the run's timers) lack NVTX ranges: {none} "
            f"{'has' if none == 1 else 'have'} none;"
        )
    of = f"the {recorded} {which}s recorded" if more else f"{recorded} {which}s"
    return f"{len(steps)} of {of} {lack} NVTX ranges{named}:"


def _unstepped(st: Steps, calls: pd.DataFrame, per_step: float, zero: int) -> str | None:
    """Whole steps whose NVTX ranges were lost while the program went on, said; None: none. Their launch
    calls lie in the measured range (from the first step to the last without one) but in no step range."""
    f = st.frame
    spans = st.spans or [(int(g["start"].min()), int(g["end"].max()), p) for p, g in f.groupby("pid")]
    pid, start = calls["pid"].to_numpy(), calls["start"].to_numpy()
    stepped = list(zip(f["start"], f["end"], f["pid"], strict=True))
    inside = covered(pid, start, spans) & ~covered(pid, start, stepped)
    if per_step <= 0 or inside.sum() <= AFTER_STEPS_SHARE * per_step:
        return None
    lost, first = calls[inside], int(start[inside].min())
    before = f[f["start"] < first]
    where = "before any step"
    if len(before):
        where = f"after step {int(before.loc[before['start'].idxmax(), 'step'])}"
    gap = _gap(f)
    return (
        f"{len(lost):,} kernel launch calls ({100 * len(lost) / len(calls):.0f}%) in the "
        + ("`measured` range" if st.spans else "steps' span")
        + f" lie in no step range, from {seconds(first, zero)} ({where}) to "
        f"{seconds(lost['start'].max(), zero)}"
        + (f"; {steps_said(gap)} {'has' if len(gap) == 1 else 'have'} no range" if gap else "")
        + ": NVTX recording lost steps while the program went on"
    )


def _gap(f: pd.DataFrame) -> list[int]:
    """The step numbers missing between a process's first and last measured step: steps whose ranges were
    all lost (the harness numbers its steps one after another)."""
    gap: set[int] = set()
    for _, g in f[f["measured"]].groupby("pid"):
        have = set(g["step"].astype(int))
        gap |= set(range(min(have), max(have) + 1)) - have
    return sorted(gap)


def _ordered(names: frozenset[str]) -> list[str]:
    order = {n: i for i, n in enumerate((STEP, *ALL_PHASES))}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def export_facts(trace: Trace) -> ExportFacts:
    """What a run's own checks need of its export: kernels, CUDA calls, the steps each harness range has."""
    st = steps(trace)
    # no step range at all: no step has its ranges; ranges without step indices (payloads): cannot tell
    ranged: dict[str, set[int]] | None = None if st.source in ("step ranges", "ProfilerStep") else {}
    if st.source == "harness":
        ranged = {}
        for step, phases in zip(st.frame["step"], st.frame["phases"], strict=True):
            for name in phases:
                ranged.setdefault(name, set()).add(int(step))
    return ExportFacts(
        kernels=trace.count("kernels") if trace.has("kernels") else 0,
        calls=trace.count("runtime") if trace.has("runtime") else 0,
        ranged=ranged,
        nvtx_end=seconds(st.nvtx_end, time_zero(trace)) if len(st.frame) else None,
    )
