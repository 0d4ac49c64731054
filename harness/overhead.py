"""`harness overhead`: one configuration without and with nsys, alternating, each in a fresh process.

Without `ci_target` it makes `repeats` rounds. With it, rounds go on until the confidence interval of the
whole-step overhead is narrower than ±ci_target % for every nsys mode (and `repeats` rounds are done), or
until the next round would end after `max_time` seconds (two rounds at least).
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from harness import machine
from harness.overhead_steps import experiment_load, label_for, step_table
from harness.profile import run_baseline
from harness.profilers.nsys import ProfileRequest, report_paths, run_profiled
from harness.records import RunConfig, RunResult, phases_for
from harness.runner import new_run_id

if TYPE_CHECKING:
    import pandas as pd

    from analysis.overhead import Comparison
    from harness.store import ResultsStore

DEFAULT_MAX_TIME = 600.0
MIN_ROUNDS = 2  # with a CI target: the interval sees run-to-run drift only from two rounds on
MAX_FAILED_ROUNDS = 2  # in a row, after a round succeeded: give up and report the rounds that worked


@dataclass
class OverheadResult:
    experiment: str
    runs: list[tuple[str, int, RunResult]]  # label, repeat, result
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    load: machine.MachineLoad | None = None  # before the first run to after the last
    headline: dict[str, Comparison] = field(default_factory=dict)  # label -> whole-step comparison

    @property
    def repeats(self) -> int:
        return len({repeat for _, repeat, _ in self.runs})


def measure_overhead(
    config: RunConfig,
    request: ProfileRequest,
    *,
    repeats: int,
    modes: list[str],
    store: ResultsStore,
    ci_target: float | None = None,
    max_time: float | None = DEFAULT_MAX_TIME,
    progress: Callable[[str], None] | None = None,
) -> OverheadResult:
    from analysis.overhead import headline, overhead_table
    from harness import nsys
    from harness.errors import HarnessError

    info = nsys.find_nsys(request.nsys_path)
    experiment = f"overhead-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    phases = phases_for(config.mode)
    runs: list[tuple[str, int, RunResult]] = []
    notes: list[str] = []
    found: dict[str, Comparison] = {}
    began = time.monotonic()
    attempt = done = failed_in_a_row = 0
    status = ""

    def one_round() -> list[tuple[str, int, RunResult]] | str:
        """One run without nsys, then one per mode (alternating, so drift hits both sides alike); all
        are stored. The round's runs, or why it failed."""
        out: list[tuple[str, int, RunResult]] = []
        baseline_id = None
        for mode in [None, *modes]:
            label = label_for(mode)
            if progress:
                progress(f"round {attempt + 1}{'' if ci_target else f'/{repeats}'}: {label}{status}")
            if mode is None:
                result, _ = run_baseline(config)
                store.save(result, experiment=experiment)
                baseline_id = result.run_id
            else:
                run_id = new_run_id(config.model)
                result, prof, run_notes = run_profiled(config, replace(request, mode=mode), info, run_id)
                notes.extend(n for n in run_notes if n not in notes)
                store.save(
                    result, profiler="nsys", nsys_mode=mode, experiment=experiment,
                    baseline_run_id=baseline_id, **report_paths(prof),
                )  # fmt: skip
            if result.status != "ok":
                return f"{label} run {result.run_id} failed ({result.status}): {result.error}"
            out.append((label, attempt, result))
        return out

    while True:
        outcome = one_round()
        attempt += 1
        if isinstance(outcome, str):
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
        if done < (repeats if ci_target is None else MIN_ROUNDS):
            continue
        found = headline(step_table(runs), phases)
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
    found = found or headline(step_table(runs), phases)
    table = overhead_table(step_table(runs), phases)
    load = experiment_load(runs)
    busy = machine.busy_note(load, "the measurement")
    notes += [busy] if busy else []
    if done == 1:
        notes.append("one round: the interval holds the step-to-step noise only, not run-to-run drift")
    return OverheadResult(experiment, runs, table, notes, load, found)
