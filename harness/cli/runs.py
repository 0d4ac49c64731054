"""`harness runs` and `harness show`: the stored runs, listed and shown. Apart from `run`, so that reading
the results database loads no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.advice_lines import advice_tables, say_findings, say_health, since_capture
from harness.cli.common import (
    RUN_REF_HELP,
    DbOpt,
    DeviceOpt,
    FormatOpt,
    LastOpt,
    ModelOpt,
    PrecisionOpt,
    RunRefCommand,
    WideOpt,
    cli_errors,
    note,
    run_reference,
    warn,
)
from harness.cli.terminal.output import Format, emit, emit_many
from harness.experiments import show
from harness.experiments.run_tables import SERVING_MEANS
from harness.store import results as results_db

if TYPE_CHECKING:
    from harness.store.results import ResultsStore

PHASE_COLUMNS = (
    "forward (ns)", "backward (ns)", "allreduce (ns)", "optimizer (ns)", "prefill (ns)", "decode (ns)"
)  # fmt: skip
# generate's serving figures compared across runs, as a sweep's table names them (its run's stored figures)
SERVING_COLUMNS = dict(
    zip(("ttft_mean_ns", "tpot_mean_ns", "decode_tokens_per_s"), SERVING_MEANS, strict=True)
)


@cli_errors
def runs_cmd(
    model: ModelOpt = None,
    device: DeviceOpt = None,
    precision: PrecisionOpt = None,
    last: LastOpt = None,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """List saved runs (newest last)."""

    store = results_db.ResultsStore(db, readonly=True)
    # a run whose row or steps (its means are made of them) cannot be read is left out: the others are
    # listed, it is said after them, exit 1
    df = store.runs(model=model, device=device, precision=precision, last=last, steps=True)
    df = df.drop(columns=["advice"])  # `harness advise RUN` and `show RUN` say it
    if format is Format.table:
        cols = {
            "run_id": "run", "created_at": "created", "model": "model", "mode": "mode", "device": "device",
            "precision": "precision", "compile": "compile", "batch_size": "batch",
            "context_length": "context", "new_tokens": "new tokens", "status": "status",
            "profiler": "profiler",
            "baseline_run_id": "baseline run", "experiment": "experiment",
            "forward_mean_ns": "forward (ns)", "backward_mean_ns": "backward (ns)",
            "allreduce_mean_ns": "allreduce (ns)",
            "optimizer_mean_ns": "optimizer (ns)", "prefill_mean_ns": "prefill (ns)",
            "decode_mean_ns": "decode (ns)", **SERVING_COLUMNS, "tokens_per_s": "tokens/s",
        }  # fmt: skip
        df = df[list(cols)].rename(columns=cols)
        # the phases of the modes listed, and generate's setting and serving figures: a column no run listed
        # has is left out
        optional = (*PHASE_COLUMNS, *SERVING_MEANS, "new tokens")
        unused = [c for c in optional if len(df) and df[c].isna().all()]
        df = df.drop(columns=unused)
        # the run id (model-date-time) is what `harness show` takes: first, and never shortened; then
        # what tells runs of one model apart (a run under nsys from its baseline, a failed one), then times
        df.attrs["priority"] = [
            "run", "status", "profiler", "baseline run", *(c for c in PHASE_COLUMNS if c in df), "tokens/s",
            *(c for c in SERVING_MEANS if c in df), "model", "precision", "mode", "device", "compile",
            "batch", "context", "new tokens", "experiment",
        ]  # fmt: skip
        # the run id names the model; what else a run was configured with is shown first where runs differ
        df.attrs["settings"] = [
            "profiler", "precision", "mode", "device", "compile", "batch", "context", "new tokens"
        ]  # fmt: skip
        df.attrs["whole"] = ["run"]
        df.attrs["narrow"] = ["baseline run"]  # an id shown for itself in its own row: its ends tell it
    given = dict(model=model, device=device, precision=precision, last=last)
    notes = [] if len(df) or store.left_out else [_no_runs(store, **given)]
    if notes and format is Format.table:  # for people, the note alone: an empty table says nothing more
        note(notes[0])
        return
    if len(df) or format is not Format.table:
        emit(df, format, title=f"runs in {results_db.describe_url(store.url)}", notes=notes, wide=wide)


def _no_runs(store: ResultsStore, **filters: object) -> str:
    """Why `harness runs` lists nothing: no run at all, or none that matches the filters (named)."""
    given = " ".join(f"--{k} {v}" for k, v in filters.items() if v is not None and k != "last")
    if not given:
        return "no runs yet"
    return store.unmatched(given)


@cli_errors
def show_cmd(
    run_id: Annotated[
        str,
        typer.Argument(
            help=f"{RUN_REF_HELP[0].upper()}{RUN_REF_HELP[1:]} (`harness runs` lists them).",
            callback=run_reference,
        ),
    ],
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Show one run: configuration, environment, per-phase statistics, agreement, profile files."""

    store = results_db.ResultsStore(db, readonly=True)
    run = store.get(run_id)
    tables = show.show_tables(run, store.linked(run.id))
    # a paired run that cannot be read: this one is shown without it, which is said, and it ends ok
    damaged = store.take_left_out()
    files: list[str] = []
    if format is Format.table:
        tables, files = show.paths_apart(tables)
    elif run.advice:
        tables += advice_tables(run.advice)
    # the advice was judged as the run was captured: said where its export is gone or changed since
    since = since_capture(run.advice, run.id) if run.advice else None
    if run.advice and format is Format.table:  # first: a degraded run's tables are read knowing it
        say_health(run.advice, run.id if run.status == "degraded" else None)
        if since:
            note(since)
    elif since:  # csv and json: on stderr, beside the health and findings tables they carry
        files.append(since)
    emit_many(tables, format, wide=wide, notes=files)
    if run.advice and format is Format.table:
        say_findings(run.advice, run.id)
    for line in damaged:
        warn(f"{line}; run {run.id} is shown without it")


def register(app: typer.Typer) -> None:
    app.command("runs")(runs_cmd)
    app.command("show", cls=RunRefCommand)(show_cmd)
