"""`harness overhead`: one configuration without and with a profiler (nsys, or torch.profiler), alternating,
each in a fresh process.

Without `ci_target` it makes `repeats` rounds. With it, rounds go on until the confidence interval of the
whole-step overhead is narrower than ±ci_target % for every profiled kind (nsys modes, or torch) and `repeats`
rounds are done, or until the next round would end after `max_time` seconds (two rounds at least).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from analysis.compare.overhead import baseline_label as label_of_baseline
from analysis.compare.overhead import headline, overhead_steps, overhead_table, overhead_verdict
from harness.core import machine, signals
from harness.core.errors import HarnessError
from harness.core.records import RunConfig, RunResult, config_phases, new_id, timer_frame
from harness.profilers import capture
from harness.profilers.base import NothingRecorded, run_baseline
from workloads.names import counted

if TYPE_CHECKING:
    import pandas as pd

    from analysis.compare.overhead import Comparison
    from harness.profilers.base import Profiler, ProfilerOptions
    from harness.store.results import ResultsStore

DEFAULT_MAX_TIME = 600.0  # s: with --ci-target, no round is started that would end later
MIN_ROUNDS = 2  # with a CI target: the interval sees run-to-run drift only from two rounds on
MAX_FAILED_ROUNDS = 2  # in a row, after a round succeeded: give up and report the rounds that worked


def workload_of(config: RunConfig) -> str:
    """The configuration as the overhead table's title names it: model, mode and how it ran where that is
    not eager (a generate run's decode path above all: its overhead under a profiler is what tells them
    apart)."""
    how = " (CUDA-graph decode)" if config.cuda_graphs else " (torch.compile)" if config.compile else ""
    return f"{config.model} {config.mode}{how}"


def pair_table(
    base: pd.DataFrame, profiled: pd.DataFrame, label: str, profiler: str, phases: tuple[str, ...]
) -> pd.DataFrame:
    """Per phase, one run without a profiler against one under `profiler` (`label`), each given by its
    timers (step, phase, duration_ns, warmup, rank), with intervals and verdicts."""
    baseline = label_of_baseline([profiler])
    steps = overhead_steps([(baseline, 0, base), (label, 0, profiled)])
    return overhead_table(steps, phases, baseline)


def step_table(runs: list[tuple[str, int, RunResult]]) -> pd.DataFrame:
    """The measured steps' phase durations of (label, repeat, run) triples, what overhead_table reads."""
    return overhead_steps((label, repeat, timer_frame(r)) for label, repeat, r in runs)


@dataclass
class OverheadResult:
    experiment: str
    runs: list[tuple[str, int, RunResult]]  # label, repeat, result
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    load: machine.MachineLoad | None = None  # before the first run to after the last
    headline: dict[str, Comparison] = field(default_factory=dict)  # label -> whole-step comparison
    profiler: str = "nsys"
    interrupted: int | None = None  # the signal (Ctrl-C, SIGTERM) that stopped it; the rounds before it kept

    @property
    def verdicts(self) -> list[str]:
        """Each profiled kind's whole-step verdict, one line a person can act on."""
        return [overhead_verdict(c, label) for label, c in self.headline.items()]

    @property
    def repeats(self) -> int:
        return len({repeat for _, repeat, _ in self.runs})


def measure_overhead(
    config: RunConfig,
    profiler: Profiler,
    options: ProfilerOptions,
    *,
    repeats: int,
    modes: list[str],
    store: ResultsStore,
    ci_target: float | None = None,
    max_time: float | None = DEFAULT_MAX_TIME,
    progress: Callable[[str], None] | None = None,
) -> OverheadResult:
    """`repeats` rounds (or until `ci_target`) of the run without a profiler, then under `profiler` (one run
    per kind it has: nsys's modes), each in a fresh process, all stored as one experiment."""
    kinds = profiler.overhead_runs(config, options, modes)
    baseline_label = label_of_baseline([profiler.name])
    experiment = new_id("overhead")
    phases = config_phases(config)
    runs: list[tuple[str, int, RunResult]] = []
    notes: list[str] = []
    found: dict[str, Comparison] = {}
    began = time.monotonic()
    attempt = done = failed_in_a_row = 0
    status = ""
    stopped: int | None = None
    made: list[str] = []  # the runs stored

    def one_round() -> list[tuple[str, int, RunResult]] | str:
        """One run without a profiler, then one per profiled kind (alternating, so drift hits both sides
        alike); all are stored (their ids added to `made`). The round's runs, or why it failed or stopped
        (`stopped`: the signal; a round whose last run ended ok as it came is whole, and returned)."""
        nonlocal stopped
        out: list[tuple[str, int, RunResult]] = []
        baseline_id = None
        order = [(baseline_label, None), *kinds]
        for i, (label, profiled) in enumerate(order):
            if progress:
                progress(f"round {attempt + 1}{'' if ci_target else f'/{repeats}'}: {label}{status}")
            # held from the run's start to its save: Ctrl-C passed on to the run stops it (interrupted); one
            # that came as it ended all the same is acted on once the run is stored
            with signals.deferred() as came:
                if profiled is None:
                    result, _ = run_baseline(config)
                    capture.save(store, result, experiment=experiment)
                    baseline_id = result.run_id
                else:
                    try:
                        result, how, run_notes = profiled()
                    except NothingRecorded as e:
                        return f"{label}: {e}"
                    notes.extend(n for n in run_notes if n not in notes)
                    capture.save(store, result, experiment=experiment, baseline_run_id=baseline_id, **how)
                made.append(result.run_id)
                late = signals.taken(came)
            if result.status == "interrupted":  # Ctrl-C or SIGTERM: no more rounds
                stopped = signals.signal_in(result.error)
                return f"{label} run {result.run_id} {result.error}; stored as interrupted"
            stopped = late
            ended = result.status in ("ok", "degraded")  # degraded: its capture's checks failed, said
            if late is not None and (not ended or i < len(order) - 1):  # the round is not whole
                return signals.interrupted(late, f"as run {result.run_id} ({label}) ended {result.status}")
            if not ended:
                return f"{label} run {result.run_id} failed ({result.status}): {result.error}"
            out.append((label, attempt, result))
        return out

    while True:
        try:
            outcome = one_round()
        except KeyboardInterrupt as e:  # between runs, outside their workers: the runs before it are stored
            stopped = signals.signal_of(e)
            outcome = signals.interrupted(stopped, "between runs")
        attempt += 1
        if isinstance(outcome, str):
            if stopped is not None:  # the rounds done are kept and shown
                if not done:
                    kept = f"; {counted(len(made), 'run')} of {experiment} stored" if made else ""
                    raise HarnessError(f"{outcome}{kept}", exit_code=signals.exit_code(stopped))
                notes.append(f"stopped in round {attempt}: {outcome}")
                break
            if not done:  # nothing measured yet: most likely the configuration itself fails
                raise HarnessError(outcome)
            failed_in_a_row += 1
            notes.append(f"round {attempt} left out: {outcome.strip().splitlines()[0]}")
            if failed_in_a_row >= MAX_FAILED_ROUNDS:
                notes.append(f"stopped after {MAX_FAILED_ROUNDS} failed rounds in a row")
                break
            continue
        runs += outcome
        done += 1
        failed_in_a_row = 0
        if stopped is not None:  # it came as the round's last run ended
            notes.append(f"stopped after round {attempt}: {signals.name(stopped)} came as its last run ended")
            break
        if done < (repeats if ci_target is None else MIN_ROUNDS):
            continue
        found = headline(step_table(runs), phases, baseline_label)
        if ci_target is None:
            break
        noise = max(c.noise_pct if c.noise_pct == c.noise_pct else math.inf for c in found.values())
        status = f" (±{noise:.1f}% so far, target ±{ci_target:g}%)"
        if noise < ci_target and done >= repeats:
            break
        elapsed = time.monotonic() - began
        if max_time is not None and elapsed + elapsed / attempt > max_time:
            reached = "under" if noise < ci_target else "not yet under"
            notes.append(
                f"stopped after {done} rounds ({elapsed:.0f} s): another would pass --max-time "
                f"{max_time:g} s; the interval is ±{noise:.1f}%, {reached} ±{ci_target:g}%"
            )
            break
    found = found or headline(step_table(runs), phases, baseline_label)
    table = overhead_table(step_table(runs), phases, baseline_label)
    load = machine.over_runs([r.extra.get("machine") for _, _, r in runs])
    busy = machine.busy_note(load, "the measurement")
    notes += [busy] if busy else []
    if done == 1:
        notes.append("one round: the interval holds the step-to-step noise only, not run-to-run drift")
    return OverheadResult(experiment, runs, table, notes, load, found, profiler.name, stopped)
