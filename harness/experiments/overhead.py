"""`harness overhead`: one configuration without and with a profiler (nsys, or torch.profiler), alternating,
each in a fresh process.

Without `ci_target` it makes `repeats` rounds. With it, rounds go on until the confidence interval of the
whole-step overhead is narrower than ±ci_target % for every profiled kind (nsys modes, or torch) and `repeats`
rounds are done, or until the next round would end after `max_time` seconds (two rounds at least).
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from analysis.compare.overhead import headline, overhead_table
from harness.core import machine
from harness.core.devices import resolve_device
from harness.core.errors import HarnessError
from harness.core.records import RunConfig, RunResult, phases_for
from harness.execution import nsys
from harness.execution.runner import new_run_id
from harness.execution.worker import run_isolated
from harness.profilers.base import check_writable, run_baseline
from harness.profilers.nsys import ProfileRequest, cuda_check, report_paths, run_profiled
from harness.profilers.overhead_steps import DEFAULT_MAX_TIME, experiment_load, label_for, step_table
from harness.profilers.torch import NAME, TRACE_SUFFIX

if TYPE_CHECKING:
    import pandas as pd

    from analysis.compare.overhead import Comparison
    from harness.profilers.torch import TorchRequest
    from harness.store.results import ResultsStore

# one profiled run: its result, what it is stored with, notes
ProfiledFn = Callable[[], tuple[RunResult, dict[str, Any], list[str]]]

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
    profiler: str = "nsys"

    @property
    def repeats(self) -> int:
        return len({repeat for _, repeat, _ in self.runs})


def measure_overhead(
    config: RunConfig,
    request: ProfileRequest | TorchRequest,
    *,
    repeats: int,
    modes: list[str],
    store: ResultsStore,
    ci_target: float | None = None,
    max_time: float | None = DEFAULT_MAX_TIME,
    progress: Callable[[str], None] | None = None,
) -> OverheadResult:

    profiler = "nsys" if isinstance(request, ProfileRequest) else "torch"
    kinds = (
        _nsys_runs(config, request, modes)
        if isinstance(request, ProfileRequest)
        else _torch_runs(config, request)
    )
    baseline_label = label_for(None, profiler)
    experiment = f"overhead-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    phases = phases_for(config.mode, config.world_size)
    runs: list[tuple[str, int, RunResult]] = []
    notes: list[str] = []
    found: dict[str, Comparison] = {}
    began = time.monotonic()
    attempt = done = failed_in_a_row = 0
    status = ""

    def one_round() -> list[tuple[str, int, RunResult]] | str:
        """One run without a profiler, then one per profiled kind (alternating, so drift hits both sides
        alike); all are stored. The round's runs, or why it failed."""
        out: list[tuple[str, int, RunResult]] = []
        baseline_id = None
        for label, profiled in [(baseline_label, None), *kinds]:
            if progress:
                progress(f"round {attempt + 1}{'' if ci_target else f'/{repeats}'}: {label}{status}")
            if profiled is None:
                result, _ = run_baseline(config)
                store.save(result, experiment=experiment)
                baseline_id = result.run_id
            else:
                result, how, run_notes = profiled()
                notes.extend(n for n in run_notes if n not in notes)
                store.save(result, experiment=experiment, baseline_run_id=baseline_id, **how)
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
    load = experiment_load(runs)
    busy = machine.busy_note(load, "the measurement")
    notes += [busy] if busy else []
    if done == 1:
        notes.append("one round: the interval holds the step-to-step noise only, not run-to-run drift")
    return OverheadResult(experiment, runs, table, notes, load, found, profiler)


def _nsys_runs(config: RunConfig, request: ProfileRequest, modes: list[str]) -> list[tuple[str, ProfiledFn]]:
    """(label, run) per nsys mode: the worker under nsys, stored with its mode and report paths."""

    info = nsys.find_nsys(request.nsys_path)
    cuda_check(info, resolve_device(config.device).type, request.force_cuda)  # refused before any run

    def under(mode: str) -> ProfiledFn:
        def run() -> tuple[RunResult, dict[str, Any], list[str]]:
            result, prof, notes = run_profiled(
                config, replace(request, mode=mode), info, new_run_id(config.model)
            )
            return result, {"profiler": "nsys", "nsys_mode": mode, **report_paths(prof)}, notes

        return run

    return [(label_for(mode), under(mode)) for mode in modes]


def _torch_runs(config: RunConfig, request: TorchRequest) -> list[tuple[str, ProfiledFn]]:
    """One (label, run): the worker under torch.profiler as `run --profiler torch` runs it, and its trace."""

    check_writable(request.profile_dir)

    def run() -> tuple[RunResult, dict[str, Any], list[str]]:
        run_id = new_run_id(config.model)
        trace = request.profile_dir.resolve() / f"{run_id}{TRACE_SUFFIX}"
        start = machine.snapshot()
        result = run_isolated(config, run_id, profiler=request.worker_spec(trace))
        load = machine.load_since(start)  # one process, as the baseline: the CPU shares mean the same
        if load:
            result.extra["machine"] = load.to_dict()
        return result, {"profiler": NAME, "artifacts": {"trace": str(trace)} if trace.exists() else None}, []

    return [(label_for("torch", NAME), run)]
