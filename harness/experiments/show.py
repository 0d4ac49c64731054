"""The tables `harness show RUN_ID` prints for one stored run, and for the run it is paired with."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.machine import MachineLoad, describe
from harness.core.records import PROGRAM_MODE, stored_phases
from harness.energy.run import NOTES_TITLE, energy_rows
from harness.experiments.overhead import pair_table
from harness.experiments.ranks import rank_tables, run_frame
from harness.experiments.run_tables import (
    AGREEMENT_TITLE,
    as_nsys_writes,
    extra_tables,
    peak_label,
    run_step_stats,
    stored_agreement,
)
from harness.store.schema import stored_std, stored_time
from workloads.names import MEASURED_STATUSES
from workloads.plants.catalogue import KNOBS, Knobs

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import Run


def _profiler(run: Run) -> str:
    return run.profiler + (f" ({run.nsys_mode})" if run.nsys_mode else "")


def _machine(run: Run) -> str | None:

    data = (run.summary or {}).get("machine")
    return describe(MachineLoad.from_dict(data)) if data else None


PHASE_COLUMNS = ["Phase", "Steps", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"]


def phase_table(run: Run) -> pd.DataFrame:
    """The step (its phases summed: the first figure people compare), then each phase."""
    import pandas as pd

    step = run_step_stats(run)
    stats = [asdict(step)] if step is not None else []
    table = pd.DataFrame(
        [
            {
                "Phase": p["phase"],
                "Steps": p["count"],
                "Avg (ns)": p["mean_ns"],
                "Med (ns)": p["median_ns"],
                "Min (ns)": p["min_ns"],
                "Max (ns)": p["max_ns"],
                "StdDev (ns)": stored_std(p),
            }
            for p in [*stats, *(run.summary or {}).get("phases", [])]
        ],
        columns=PHASE_COLUMNS,  # a run that measured no step: its header still, in csv too
    )
    if len(table):  # None (one step) as NaN: a column of numbers, however few steps
        table["StdDev (ns)"] = table["StdDev (ns)"].astype(float)
        table = as_nsys_writes(table)
    return table


PATH_FIELDS = ("nsys report", "nsys sqlite")  # and every file.*


def run_fields(shown: dict[str, Any]) -> dict[str, Any]:
    """The run's fields from what `harness show RUN --format json` printed: the object keyed by field it
    writes, or the list of {"field", "value"} pairs that earlier versions wrote (as
    shared/fixtures/nsys/h100-medium/run.json holds), their "warmup / steps" ("5 / 10") read as numbers."""
    run = shown["run"]
    if not isinstance(run, list):
        return dict(run)
    fields: dict[str, Any] = {}
    for row in run:
        if row["field"] == "warmup / steps":
            warmup, steps = str(row["value"]).split("/")
            fields["warmup steps"], fields["measured steps"] = int(warmup), int(steps)
        else:
            fields[row["field"]] = row["value"]
    return fields


def paths_apart(tables: list[tuple[str, pd.DataFrame]]) -> tuple[list[tuple[str, pd.DataFrame]], list[str]]:
    """For people: the run table without its paths, and `field: path` lines to print whole, each on its own
    line (a path wrapped inside a table cell breaks where it cannot be copied back); a file no longer there
    is said to be so. The power notes take a row each (the table would show their newlines as `\\n`)."""
    out, lines = [], []
    for name, df in tables:
        if name == "run":
            is_path = df["field"].isin(PATH_FIELDS) | df["field"].astype(str).str.startswith("file.")
            lines += [
                f"{f}: {v}" + ("" if Path(str(v)).exists() else " (no such file: moved or deleted)")
                for f, v in zip(df["field"][is_path], df["value"][is_path], strict=True)
                if v
            ]
            df = _note_rows(df[~is_path].reset_index(drop=True))
            df.attrs["wrap"] = ["value"]
        out.append((name, df))
    return out, lines


def _note_rows(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (field, value) with the power notes' one row made one row per note, the field named once."""
    import pandas as pd

    at = df.index[df["field"] == NOTES_TITLE]
    if not len(at) or not isinstance(notes := df.at[at[0], "value"], str):
        return df
    lines = notes.split("\n")
    rows = pd.DataFrame(
        {"field": [NOTES_TITLE] + [""] * (len(lines) - 1), "value": pd.Series(lines, dtype=object)}
    )
    return pd.concat([df.iloc[: at[0]], rows, df.iloc[at[0] + 1 :]], ignore_index=True)


def timers(run: Run) -> pd.DataFrame:
    """The stored run's steps as the results store gives them (`step_timings`), from the run itself."""
    import pandas as pd

    return pd.DataFrame(
        [(run.id, s.step, s.phase, s.duration_ns, s.warmup, s.rank or 0) for s in run.step_timings],
        columns=["run_id", "step", "phase", "duration_ns", "warmup", "rank"],
    )


def pair_tables(run: Run, linked: Sequence[Run]) -> list[tuple[str, pd.DataFrame]]:
    """The paired runs' phases, and per profiled run its overhead against the baseline with intervals."""
    tables = []
    for other in linked:
        role = "baseline run" if other.id == run.baseline_run_id else "profiled run"
        what = (
            "no profiler"
            if other.profiler == "none"
            else " ".join(filter(None, (other.profiler, other.nsys_mode)))
        )
        short = (
            ""
            if other.status in MEASURED_STATUSES
            else f", ended {other.status}: the steps it measured before"
        )
        tables.append((f"{role} {other.id} ({what}{short}): phases", phase_table(other)))
        base, profiled = (other, run) if role == "baseline run" else (run, other)
        label = " ".join(x for x in (profiled.profiler, profiled.nsys_mode) if x)
        phases = stored_phases(run)
        table = pair_table(timers(base), timers(profiled), label, profiled.profiler, phases)
        # a run that stopped short (out of memory, failed, interrupted) gives the steps it measured before,
        # not the run it was: an overhead drawn from them is said to be so (the dashboard leaves such out)
        partial = "".join(
            f"; {r.id} ended {r.status}: its steps are those it measured before"
            for r in (base, profiled)
            if r.status not in MEASURED_STATUSES
        )
        tables.append((f"overhead of {profiled.id} against {base.id} (one run each{partial})", table))
    return tables


def _knobs(config: dict) -> dict[str, object]:
    """The train step's knobs set away from their defaults (`--optimizer`, `--loader-workers`, …) and the
    fixes `harness optimize` applied, by name: shown only where a run has them."""
    default = Knobs()
    out: dict[str, object] = {
        name.replace("_", " "): config[name]
        for name in KNOBS
        if name in config and config[name] != getattr(default, name)
    }
    if config.get("fixes"):
        out["fixes"] = ", ".join(config["fixes"])
    return out


def _program(run: Run) -> dict[str, object]:
    """A `profile -- CMD` run: the command it ran and how that ended (the harness timed nothing in it)."""
    summary = run.summary or {}
    if run.mode != PROGRAM_MODE or not summary.get("command"):
        return {}
    return {"command": shlex.join(summary["command"]), "exit code": summary.get("exit_code")}


def _measured(run: Run) -> dict[str, object]:
    """The measured steps the run holds; the steps asked for beside them where it ended short of those (a
    run interrupted, out of memory): its configuration's count is not what its tables are drawn from."""
    measured = len({t.step for t in run.step_timings if not t.warmup})
    if run.status in MEASURED_STATUSES or measured == run.steps or run.mode == PROGRAM_MODE:
        return {"measured steps": run.steps}
    return {"measured steps": measured, "steps asked": run.steps}


# the rows of a run that describe the workload the harness ran and timed (a program's run has none of them)
WORKLOAD_FIELDS = frozenset(
    {"precision", "compile", "attention", "batch size", "context length", "warmup steps", "measured steps",
     "parameters", "tokens/s", "achieved TFLOP/s", "MFU (%)"}
)  # fmt: skip


def show_tables(run: Run, linked: Sequence[Run] = ()) -> list[tuple[str, pd.DataFrame]]:
    """`linked`: the runs paired with `run` (its baseline, or the profiled runs it is the baseline of). A
    program's run (`profile -- CMD`) has no steps: no phase or step table, its command instead."""
    import pandas as pd

    info = {
        "run": run.id,
        "created": stored_time(run.created_at),
        "status": run.status + (f" ({run.error})" if run.error else ""),
        "model": run.model,
        "mode": run.mode,
        **_program(run),
        "device": f"{run.device} ({run.device_name})" if run.device_name else run.device,
        "precision": run.precision,
        "compile": run.compile,
        "attention": run.attention,
        # a planted cause (`run --plant`), shown only where one was: most runs have none
        **({"plant": plant} if (plant := (run.config or {}).get("plant")) else {}),
        **_knobs(run.config or {}),
        "batch size": run.batch_size,
        "context length": run.context_length,
        # generate's tokens to decode: its serving table says so only where a step was measured
        **({"new tokens": (run.config or {}).get("new_tokens")} if run.mode == "generate" else {}),
        "warmup steps": run.warmup,
        **_measured(run),
        "parameters": run.params,
        "tokens/s": run.tokens_per_s,
        "achieved TFLOP/s": run.achieved_flops / 1e12 if run.achieved_flops else None,
        "MFU (%)": run.mfu * 100 if run.mfu else None,
        peak_label(run.device): run.peak_memory_bytes / 2**20 if run.peak_memory_bytes else None,
        "profiler": _profiler(run),
        "experiment": run.experiment,
        "baseline run": run.baseline_run_id,
        "ranks": run.world_size,
        "profiled runs": ", ".join(r.id for r in linked if r.baseline_run_id == run.id) or None,
        "machine": _machine(run),
        "nsys report": run.nsys_rep,
        "nsys sqlite": run.nsys_sqlite,
        NOTES_TITLE: "\n".join((run.summary or {}).get("power_notes", [])) or None,
    }
    if run.mode == PROGRAM_MODE:  # a program's run measured no workload: none of its settings or figures
        info = {k: v for k, v in info.items() if k not in WORKLOAD_FIELDS and k != peak_label(run.device)}
    # other profilers' files and one report per rank (nsys's one report is the two rows above)
    files = (run.artifacts or {}).items()
    info.update({f"file.{k}": v for k, v in files if not k.startswith("nsys_") or ".rank" in k})
    info.update({f"env.{k}": v for k, v in (run.env or {}).items()})
    # values keep their types (object column) so the table formats numbers and csv/json keep them exact
    config = pd.DataFrame({"field": list(info), "value": pd.Series(list(info.values()), dtype=object)})
    config.attrs["wrap"] = ["value"]  # paths and error texts: wrapped whole, never cut in the middle
    config.attrs["record"] = True  # json: one object keyed by field (harness.cli.terminal.output.to_json)
    phases = phase_table(run)
    steps = timers(run).drop(columns="run_id")
    many = steps["rank"].nunique() > 1  # a run across ranks: a row per rank and step
    index = ["rank", "step", "warmup"]
    per_step = (
        steps.pivot_table(index=index, columns="phase", values="duration_ns", aggfunc="first", sort=False)
        .astype("Int64")  # whole nanoseconds, as stored (a phase a step lacks is empty, not NaN)
        .reset_index()
        .rename(columns=lambda c: f"{c} (ns)" if c not in index else c)
        if len(steps)
        else steps[index]
    )
    per_step.columns.name = None
    if not many:  # rank 0 in every row: csv and json keep the column (one set of columns for every run)
        per_step.attrs["terminal_drops"] = ["rank"]
    tables = [("run", config)]
    if run.mode != PROGRAM_MODE or len(steps):
        tables += [("phases (measured steps)", phases), ("steps", per_step)]
    if many:
        ranks, notes = rank_tables(run_frame(run))
        tables += ranks
        if notes:
            tables.append(("communication", pd.DataFrame({"note": notes})))
    if (run.summary or {}).get("energy"):
        tables.append(("energy (measured steps)", energy_rows(run.summary["energy"])))

    tables += extra_tables(run.summary or {}, stored_phases(run), degraded=run.status == "degraded")
    if run.agreement:
        tables.append((AGREEMENT_TITLE, stored_agreement(run.agreement)))
    return tables + pair_tables(run, linked)
