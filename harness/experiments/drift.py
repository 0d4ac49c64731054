"""The drift between runs of one configuration on one machine: how far fresh processes of it land apart.

It is not kept apart: it is measured again, each time it is asked for, from the stored runs that were made
together (an experiment: `run --repeats N`, `overhead`'s alternating rounds, `optimize`'s; a sweep's points
are one run each and add nothing), so a finished measurement is never lost or out of step with what it was
drawn from. The key is the device's name and every setting of the configuration that changes what its steps
time (`KEY`: model, mode, precision, batch, context, vocabulary, torch.compile, attention, ranks, the planted
cause, its knobs and fixes, ...; generate's tokens and CUDA graphs in generate runs only): runs of eager and
CUDA-graph decode, or of other --new-tokens, are not repeats of one another. Within an experiment, runs are
grouped by their whole configuration (an optimisation's candidate is not its baseline). Only runs without a
profiler that ended ok count. analysis.compare.drift says how it is pooled and used.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from analysis.compare.drift import Drift, drifts
from analysis.compare.overhead import STEP_SUM, step_key
from harness.core import machine, signals
from harness.core.records import (
    CONFIG_DEFAULTS,
    GENERATE_ONLY,
    UNTIMED_FIELDS,
    RunConfig,
    RunResult,
    new_id,
    timer_frame,
)
from harness.profilers import capture
from harness.profilers.base import run_baseline

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import ResultsStore, UnsavedRun

# a configuration's settings that change what its steps time: all but the counts, the seed, the rank layout's
# addresses (UNTIMED_FIELDS) and the device asked for (its name leads the key)
KEY = tuple(f.name for f in fields(RunConfig) if f.name not in UNTIMED_FIELDS | {"device"})
# what the store is asked by: indexed columns of the runs table (the rest of KEY is read from the config)
ASKED = ("model", "mode", "precision", "batch_size")


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def key_of(config: dict[str, Any], device_name: str) -> tuple[Any, ...]:
    """A configuration's drift key: the device's name, then KEY's fields (RunConfig's default where a stored
    configuration lacks one; None for generate's settings in a run of another mode)."""
    generate = config.get("mode", CONFIG_DEFAULTS["mode"]) == "generate"
    return (device_name, *(
        None if k in GENERATE_ONLY and not generate else _hashable(config.get(k, CONFIG_DEFAULTS.get(k)))
        for k in KEY
    ))  # fmt: skip


def _group(experiment: str, config: dict[str, Any]) -> str:
    """Runs made together of one whole configuration (its seed and counts of steps aside)."""
    same = {k: v for k, v in config.items() if k not in ("seed", "steps", "warmup")}
    return f"{experiment} {json.dumps(same, sort_keys=True, default=str)}"


def stored_drift(
    store: ResultsStore,
    keys: Iterable[tuple[Any, ...]],
    exclude: Iterable[str] = (),
    unstored: Iterable[tuple[RunResult, str]] = (),
) -> dict[str, Drift]:
    """Per phase (and STEP_SUM), the drift measured from the stored runs of the configurations `keys` name
    (`key_of`), pooled; runs in `exclude` (those being compared) left out. `unstored`: runs in hand, each
    with its experiment, counted as if stored (one already stored counts once). Empty: none measured."""
    keys = list(dict.fromkeys(keys))
    left_out = set(exclude)
    runs: dict[str, str] = {}  # run id -> its group
    for key in keys:
        device_name, fields = key[0], dict(zip(KEY, key[1:], strict=True))
        asked = {k: fields[k] for k in ASKED}
        for run_id, experiment, config in store.made_together(device_name=device_name, **asked):
            if run_id not in left_out and key_of(config, device_name) == key:
                runs[run_id] = _group(experiment, config)
    in_hand = {
        r.run_id: (r, experiment)
        for r, experiment in unstored
        if r.run_id not in runs and r.run_id not in left_out and r.status == "ok"
        and key_of(r.config.to_dict(), r.device_name) in keys
    }  # fmt: skip
    runs.update({i: _group(experiment, r.config.to_dict()) for i, (r, experiment) in in_hand.items()})
    if not runs:
        return {}
    import pandas as pd

    stored = [store.step_timings([i for i in runs if i not in in_hand])]
    timings = pd.concat([*stored, *(timer_frame(r) for r, _ in in_hand.values())], ignore_index=True)
    return drifts(_grouped(timings, runs))


def compared_drift(
    store: ResultsStore,
    keys: Iterable[tuple[Any, ...]],
    compared: dict[str, str | None],
    unstored: Iterable[RunResult] = (),
    *,
    one_a_side: bool,
) -> tuple[dict[str, Drift], bool]:
    """The drift the runs `compared` (run id -> its experiment) are judged against, and whether they are
    part of it. Measured from the other runs of their configurations (`stored_drift`, them left out), so that
    it does not follow their own difference; where that leaves none measured, they are one run a side
    (`one_a_side`) and they were both made in one experiment (two runs of one `run --repeats 3`), that
    experiment's own drift, as it measured it: them among its runs (those of `unstored`, compared runs in
    hand not stored yet, too). Several runs a side bring their own spread, which the comparison pools
    (analysis.compare.drift.compare_runs): counted again in the drift, they would narrow the interval."""
    keys = list(keys)
    drift = stored_drift(store, keys, exclude=compared)
    whole = drift.get(STEP_SUM)
    experiments = set(compared.values())
    alone = one_a_side and len(experiments) == 1 and None not in experiments
    if (whole is None or whole.df == 0) and alone:
        (experiment,) = experiments
        together = stored_drift(store, keys, unstored=[(r, experiment) for r in unstored])
        if (mine := together.get(STEP_SUM)) is not None and mine.df > 0:
            return together, True
    return drift, False


def _grouped(timings: pd.DataFrame, groups: dict[str, str]) -> pd.DataFrame:
    """Step timings (run_id, step, phase, duration_ns, warmup, rank) as analysis.compare.drift.drifts reads
    them: group, run, step (each rank's steps its own), phase, duration_ns, warmup."""
    keys = [step_key(int(s), int(r)) for s, r in zip(timings["step"], timings["rank"].fillna(0), strict=True)]
    return timings.assign(group=timings["run_id"].map(groups), run=timings["run_id"], step=keys)


def measured(results: list[RunResult]) -> dict[str, Drift]:
    """The drift of runs in hand of one configuration made together (`run --repeats`)."""
    import pandas as pd

    frames = [timer_frame(r) for r in results if r.status == "ok"]
    if not frames:
        return {}
    timings = pd.concat(frames, ignore_index=True)
    return drifts(_grouped(timings, dict.fromkeys(timings["run_id"], "runs")))


def drift_table(drift: dict[str, Drift], phases: Iterable[str]) -> pd.DataFrame:
    """Per phase and whole steps where a drift was measured (two runs or more): the runs, the degrees of
    freedom and one run's standard deviation (%)."""
    import pandas as pd

    rows = [
        (phase if phase != STEP_SUM else "step (sum)", d.runs, d.df, d.pct)
        for phase in [*phases, STEP_SUM]
        if (d := drift.get(phase)) is not None and d.df > 0
    ]
    return pd.DataFrame(rows, columns=["Phase", "Runs", "DoF", "Drift (%)"])


@dataclass
class Repeated:
    """`run --repeats N`: the runs, their experiment, the drift they show, and how busy the machine was."""

    experiment: str
    results: list[RunResult]
    drift: dict[str, Drift]
    unsaved: list[UnsavedRun] = field(default_factory=list)  # the store's refusals: those runs are in files
    load: machine.MachineLoad | None = None
    interrupted: int | None = None  # a signal that came between runs, or as one ended all the same


def repeat_runs(
    config: RunConfig,
    repeats: int,
    store: ResultsStore,
    progress: Callable[[str], None] | None = None,
    save: Callable[..., UnsavedRun | None] | None = None,
) -> Repeated:
    """`config` run `repeats` times, each in a fresh process, stored as one experiment (repeats-…): what the
    drift between runs of it on this machine is measured from. A run that does not end ok ends the
    repeats (kept and stored as it ended), as does a signal, wherever it comes (the run it came with
    stored as it ended). `save(store, result, experiment=…)`: how a run is stored (None:
    stored, else the store's refusal, which says where it went)."""
    experiment = new_id("repeats")
    results: list[RunResult] = []
    unsaved: list[UnsavedRun] = []
    pending: RunResult | None = None  # a run ended, not yet stored

    def keep(result: RunResult) -> None:
        if save is not None:
            refusal = save(store, result, experiment=experiment)
            unsaved.extend([refusal] if refusal else [])
        else:
            capture.save(store, result, experiment=experiment)
        results.append(result)

    stopped: int | None = None
    try:
        for i in range(repeats):
            if progress:
                progress(f"run {i + 1}/{repeats} (fresh process)")
            # held from the run's start to its save: one passed on to its worker stops the run (stored as
            # interrupted); one that came as the run ended (its worker done all the same) is acted on here,
            # after the run is stored as it ended
            with signals.deferred() as came:
                pending, _ = run_baseline(config)
                keep(pending)
                pending = None
                late = signals.taken(came)
            if late is not None and results[-1].status != "interrupted":  # an interrupted run says its own
                stopped = late
            if stopped is not None or results[-1].status != "ok":
                break
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM between runs: those run are kept and shown
        stopped = signals.signal_of(e)
        if pending is not None and (not results or results[-1] is not pending):
            keep(pending)
    load = machine.over_runs([r.extra.get("machine") for r in results])
    return Repeated(experiment, results, measured(results), unsaved, load, stopped)
