"""torch.compile's cost, kept apart from the steady state: the first step compiles (Dynamo traces, Inductor
generates and builds kernels), so it is always a warmup step, and its excess over the measured steps'
median is the compile time a run reports. (RunConfig makes the first step of a --compile run a warmup
step.)"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from analysis.compare.compile import (
    NOT_COMPILED,
    NOT_COMPILED_NOTE,
    SAME_CONFIG,
    SETUP,
    baseline_choice,
    compile_comparison,
    compile_pairs,
    unpaired_compiled,
)
from analysis.runs.steady import REMAINDER
from harness.core.errors import UsageError
from harness.core.records import CONFIG_DEFAULTS, UNTIMED_FIELDS, RunResult

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import ResultsStore


def record_inductor_cache(result: RunResult) -> None:
    """With --compile: whether Inductor's FX graph cache was warm (graphs loaded, none compiled afresh),
    from torch's own counters, into result.extra["inductor_cache"]. A warm cache makes the first step
    short, so a compile time means little without it."""
    if not result.config.compile:
        return
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - torch without dynamo
        return
    hits = int(counters["inductor"].get("fxgraph_cache_hit", 0))
    misses = int(counters["inductor"].get("fxgraph_cache_miss", 0))
    result.extra["inductor_cache"] = {"hits": hits, "misses": misses, "state": cache_state(hits, misses)}


RECOMPILE_LIMIT = "recompile limit"  # in the reason Dynamo counts when it stops recompiling a function


def dynamo_counts() -> dict[str, int]:
    """Dynamo's own counters so far in this process (all 0 before anything was compiled): frames compiled,
    graphs made, graph breaks. Read without importing Dynamo: a process that never compiled has not."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {"frames": 0, "graphs": 0, "graph_breaks": 0, "recompile_limit_hits": 0}
    counters = utils.counters
    return {
        "frames": int(counters["frames"].get("ok", 0)),
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        # Dynamo gave up recompiling a function (its recompile limit, 8 by default) and runs it eagerly
        "recompile_limit_hits": int(
            sum(n for why, n in counters["unimplemented"].items() if RECOMPILE_LIMIT in why.lower())
        ),
    }


def record_dynamo(result: RunResult, before: dict[str, int]) -> None:
    """What torch.compile did during the run (the counters' growth since `before`) into
    result.extra["dynamo"], where it compiled anything: a graph per step is a recompile per step."""
    after = dynamo_counts()
    grown = {name: after[name] - before.get(name, 0) for name in after}
    if grown["frames"] or grown["graphs"]:
        result.extra["dynamo"] = grown


def cache_state(hits: int, misses: int) -> str:
    """warm (every graph from the cache), cold (none), partly warm, or unknown (the cache not consulted)."""
    if hits and not misses:
        return "warm"
    if misses and not hits:
        return "cold"
    return "partly warm" if hits else "unknown"


# what a configuration holds that is not its setup (SAME_CONFIG, compile itself, what no step times)
NOT_SETUP = UNTIMED_FIELDS | {*SAME_CONFIG, "compile", "vocab_size"}


def setup(config: dict[str, Any]) -> str:
    """The rest of a run's configuration its times depend on, as one value (analysis.compare.compile's
    SETUP): an eager run with --nvtx-detail, --memory or a plant is no baseline for a plain compiled run."""
    whole = {**CONFIG_DEFAULTS, **config}  # a field stored runs predate has its default
    return json.dumps({k: v for k, v in whole.items() if k not in NOT_SETUP}, sort_keys=True, default=str)


def with_setup(store: ResultsStore, runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` (the store's rows) with their SETUP column, by which eager and compiled runs are paired."""
    configs = store.configs(list(runs["run_id"]))
    return runs.assign(**{SETUP: [setup(configs.get(r, {})) for r in runs["run_id"]]})


def compile_table(
    store: ResultsStore,
    *,
    model: str | None = None,
    device: str | None = None,
    baseline: str | None = None,
) -> pd.DataFrame:
    """analysis.compare.compile.compile_comparison over the stored runs (of one model / device); `baseline`
    names the eager run to compare with (a unique prefix will do); a run whose steps the store leaves out
    (damaged: harness.store.leaving) is passed over for the one before it. The lines saying which eager run
    is the baseline, whether the compiled run found Inductor's cache warm and how to read the table are in
    `table.attrs["notes"]`; the compiled runs no row holds (no eager run of their configuration), per
    configuration, in `table.attrs["unpaired"]`."""

    if baseline is not None:
        chosen = store.get(baseline)  # one line and exit 2 when there is no such run
        if chosen.compile or chosen.status != "ok" or (chosen.profiler or "none") != "none":
            raise UsageError(
                f"--baseline {baseline}: run {chosen.id} is not an eager run without a profiler that "
                "finished ok; `harness runs` lists the runs"
            )
        baseline = chosen.id
        model, device = model or chosen.model, device or chosen.device
    runs = with_setup(store, store.runs(model=model, device=device))
    steps = store.step_timings(list(runs["run_id"])) if len(runs) else None
    if steps is None:
        import pandas as pd

        steps = pd.DataFrame(columns=["run_id", "step", "phase", "duration_ns", "warmup"])
    # a run whose steps the store left out as damaged is no side of a pair: the one before it is taken (the
    # command names the damaged one after its table)
    damaged = runs["run_id"].isin(list(store.left_out or {}))
    passed_over, runs = runs[damaged], runs[~damaged]
    table = compile_comparison(runs, steps, baseline)
    if baseline is not None and table.empty:
        raise UsageError(f"--baseline {baseline}: no compiled run of the same configuration to compare with")
    pairs = compile_pairs(runs, baseline)
    notes = baseline_choice(runs, pairs, baseline, passed_over)
    for _, compiled in pairs:
        cache = ((store.get(compiled["run_id"]).summary or {}).get("inductor_cache")) or {}
        notes.append(f"compiled run {compiled['run_id']}: {cache_note(cache)}")
    notes.append(
        "medians of the measured steps with their 95% intervals; speed-up = eager / compiled (interval: "
        "bootstrap of the step medians; one run a side holds the step-to-step noise only); compile = first "
        f"step − median, not clipped at zero, so the rows add up to the step's; a negative compile time is "
        "a phase whose first step was faster than its median (its compilation counted in another phase); "
        f"{REMAINDER} = the step's median − the phases' medians"
    )
    uncompiled = [p for p in dict.fromkeys(table["phase"]) if p in NOT_COMPILED]
    if uncompiled:
        notes.append(
            f"no compile time for {', '.join(uncompiled)}: {NOT_COMPILED_NOTE}, nor for {REMAINDER}; the "
            "step's compile time is the whole first step − median, the eager phases' included"
        )
    table.attrs["notes"] = notes
    table.attrs["unpaired"] = unpaired_compiled(runs)  # the command says what would pair them
    return table


def cache_note(cache: dict) -> str:
    """What a run's stored `inductor_cache` says about its compile time."""
    state = cache.get("state")
    if state is None:
        return "Inductor cache state not recorded (a run from before it was)"
    counts = f"{cache.get('hits', 0)} FX graphs from the cache, {cache.get('misses', 0)} compiled"
    meaning = {
        "warm": "the cache was warm: the compile time is a cache load, not a compilation",
        "cold": "the cache was cold: the compile time is a full compilation",
        "partly warm": "the cache was partly warm: the compile time is partly a cache load",
        "unknown": "the cache was not consulted",
    }[state]
    return f"{meaning} ({counts})"
