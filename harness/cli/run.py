"""`harness run`, `harness sweep` and `harness import` (runs the database would not take, stored now)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.analysis import AS_TORCH_SORTS, OperatorView, check_sort, operator_options
from harness.cli.common import (
    DbOpt,
    FormatOpt,
    WideOpt,
    cli_errors,
    comma_list,
    count_option,
    err,
    on_command_line,
    positive_ints,
    warn,
)
from harness.cli.common import note as say_note
from harness.cli.options import (
    DEFAULT,
    NO_PROFILER_ARGS,
    ONE_RANK,
    Profiler,
    ProfilerArgs,
    Ranks,
    Workload,
    asked,
    asked_ranks,
    make_config,
    prepare,
    profiler_options,
    rank_options,
    with_ranks,
    workload_options,
)
from harness.cli.terminal.output import Format, emit, emit_many
from harness.cli.terminal.progress import Progress
from harness.core import signals
from harness.core.bounds import MAX_REPEATS
from harness.core.errors import HarnessError, UsageError
from harness.core.machine import busy_note, describe
from harness.core.records import config_phases, new_id
from harness.core.signals import sigterm_raises
from harness.energy.run import NOTES
from harness.profilers import capture, registry
from harness.profilers.capture import save_once

if TYPE_CHECKING:
    from harness.core.records import RunConfig, RunResult
    from harness.store.database import Imported
    from harness.store.results import ResultsStore

from harness.cli import render
from harness.execution.checks import check_effect, checked
from harness.execution.ranks import multirank
from harness.experiments import drift, run_tables, sweep
from harness.experiments.run_tables import results_table
from harness.store import results as results_db
from harness.store import unsaved
from harness.store.location import named, refuse_target, resolve_url
from workloads.names import counted

NsysOpt = Annotated[bool, typer.Option("--nsys", help="Same as --profiler nsys.")]
ProfilerOpt = Annotated[
    Profiler | None,
    typer.Option(
        "--profiler",
        help="nsys: under Nsight Systems; torch: torch.profiler over the measured steps. Each runs in a "
        "fresh process.",
    ),
]
RepeatsOpt = Annotated[
    int,
    count_option(
        "--repeats",
        1,
        f"Run it N times (at most {MAX_REPEATS}), each in a fresh process, stored as one experiment: the "
        "drift between runs of this configuration on this machine, which `diff`, its --gate and `optimize` "
        "judge one run a side against. No profiler.",
        most=MAX_REPEATS,
    ),
]
# --memory (harness/execution/memory.py)
MemoryOpt = Annotated[
    bool,
    typer.Option(
        "--memory",
        help="Record the measured steps' memory: on CUDA the allocator's history as a snapshot pickle "
        "(pytorch.org/memory_viz; the dashboard's memory timeline), on the CPU torch.profiler's memory "
        "table.",
    ),
]


@cli_errors
@workload_options()
@profiler_options()
@operator_options()
@rank_options()
def run_cmd(
    ctx: typer.Context,
    model: Annotated[
        str, typer.Argument(help="Model name: tiny, small, medium, large, xl, 2.7B, gpt2, char, …")
    ],
    workload: Workload,
    profiler: ProfilerOpt = None,
    nsys: NsysOpt = False,
    profiling: ProfilerArgs = NO_PROFILER_ARGS,
    view: OperatorView = AS_TORCH_SORTS,
    ranks: Ranks = ONE_RANK,
    memory: MemoryOpt = False,
    repeats: RepeatsOpt = 1,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Run one workload, time forward/backward/optimizer per step, save it, print the summary."""

    p = profiling
    chosen = _profiler(profiler, nsys, p.record_shapes or p.with_stack or p.profile_memory, view)
    if repeats > 1 and (chosen is not None or memory):
        raise UsageError("--repeats runs without a profiler (and without --memory): leave them out")
    args = {
        **p.values(),
        "top": view.top,
        "sort": None if view.sort == AS_TORCH_SORTS.sort else check_sort(view.sort),
    }
    ready = prepare(model, workload, ranks, db, chosen, args, memory=memory, ctx=ctx)
    if repeats > 1:
        _repeat(ready.config, ready.store, repeats, format, wide)
        return
    config, plugin = ready.config, ready.profiler
    label, total = plugin.progress(config)
    with sigterm_raises(), Progress(label, total, unit="steps" if total else "") as progress:
        outcome = plugin.run(config, ready.options, store=ready.store, progress=progress)
    render.render(outcome, format, wide)
    if outcome.failed:
        raise typer.Exit(outcome.exit_status)


def _repeat(config: RunConfig, store: ResultsStore, repeats: int, format: Format, wide: bool) -> None:
    """`run --repeats N`: N runs in fresh processes, one experiment; their table and the drift they show."""
    with sigterm_raises(), Progress(f"{config.model} {config.mode} × {repeats}", repeats, unit="runs") as bar:

        def save(store: ResultsStore, result: RunResult, **how: Any) -> results_db.UnsavedRun | None:
            refusal = _save(store, result, **how)
            if result.status != "interrupted":  # done: ended and stored (a run stopped is not done)
                bar.advance(bar.done + 1)
            return refusal

        done = drift.repeat_runs(config, repeats, store, progress=bar.stage, save=save)
    results = done.results
    device = render.on_device(results)
    notes = [f"machine: {describe(done.load)}"] if done.load else []
    if busy := busy_note(done.load, "the repeats"):  # as overhead warns: the drift is judged by later
        warn(f"{busy}, and so is the drift between runs measured from them")
    if not any(d.df > 0 for d in done.drift.values()):
        notes.append("fewer than two runs ended ok: no drift measured")
    table = results_table(results, serving=True, ids=True)
    power, power_lines = render.power_notes(_power_notes(results), format)  # the same source for each run
    emit_many(
        [
            (f"{done.experiment}: {counted(len(results), 'run')}{device}", table),
            ("drift between runs (one run's standard deviation of its mean)",
             drift.drift_table(done.drift, config_phases(config))),
            *power,
        ],
        format, notes=notes, wide=wide,
    )  # fmt: skip
    for line in power_lines:
        say_note(line)
    if done.interrupted is not None:
        render.stopped_between("run --repeats", "runs", done.interrupted, len(results), repeats, done.unsaved)
    # out of memory is a result, but one that ended the repeats short of the N asked
    render.finish(list(done.unsaved), results, "; the repeats stopped there", oom_ends=True)


def _profiler(
    profiler: Profiler | None, nsys: bool, torch_options: bool, view: OperatorView = AS_TORCH_SORTS
) -> str | None:
    """The profiler asked for: --profiler, or --nsys (its shorthand); they must not disagree."""

    if nsys and profiler not in (None, "nsys"):
        raise UsageError(f"--nsys means --profiler nsys; it cannot go with --profiler {profiler}")
    chosen = "nsys" if nsys else profiler.value if profiler else None
    if torch_options and chosen != "torch":
        raise UsageError("--record-shapes, --with-stack and --profile-memory need --profiler torch")
    if view != AS_TORCH_SORTS and chosen != "torch":
        raise UsageError(
            "--sort and --top order the operator table of --profiler torch; without it there is none "
            "(`harness operators TRACE` takes them too)"
        )
    return chosen


def _save(store: ResultsStore, result: RunResult, **how: Any) -> results_db.UnsavedRun | None:
    """save_once, where a signal that came while it waited on a locked database ends the command: the
    refusal's line (it says where the run went), then the signal's exit code."""
    try:
        return save_once(store, result, signal_ends=True, **how)
    except results_db.UnsavedRun as e:  # raised only with its signal
        err(str(e))
        raise typer.Exit(e.exit_code) from None


@cli_errors
@workload_options(
    omit=("precision", "compile", "nvtx_detail", "context_length"),
    after={"batch_size": ("batch_sizes", "context_lengths")},
)
@rank_options()
def sweep_cmd(
    ctx: typer.Context,
    models: Annotated[
        str, typer.Option(metavar="<list>", help="Comma-separated model names.")
    ] = "tiny,small",
    precision: Annotated[
        str, typer.Option(metavar="<list>", help="Comma-separated: fp32,bf16,fp16.")
    ] = "fp32",
    compile: Annotated[str, typer.Option(metavar="<list>", help="Comma-separated: off,on.")] = "off",
    workload: Workload = DEFAULT,
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            metavar="<list>",
            help="Comma-separated batch sizes to sweep (e.g. 1,2,4,8; with --power: FLOPs per watt "
            "against batch size). Default: --batch-size.",
        ),
    ] = None,
    context_lengths: Annotated[
        str | None,
        typer.Option(
            "--context-length",
            "-t",
            metavar="<list>",
            help="Comma-separated context lengths to sweep (e.g. 128,512,1024). Default: the model's.",
        ),
    ] = None,
    ranks: Ranks = ONE_RANK,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Run a grid of models × precisions × compile settings × batch sizes × context lengths, each in a
    fresh process; print one table. The runs are stored as one experiment (sweep-…). A point that fails
    makes it exit 1 once every point has run (one out of memory is a result, stored as oom)."""

    axes = {"--models": models, "--precision": precision, "--compile": compile}
    items = {option: comma_list(option, given) for option, given in axes.items()}
    for option, given in axes.items():
        if not items[option]:  # an empty axis is an empty grid: nothing would run
            raise UsageError(f"{option} names nothing ({given!r}): give a comma-separated list")

    compile_map = {"off": False, "on": True, "false": False, "true": True}
    bad = [c for c in items["--compile"] if c.lower() not in compile_map]
    if bad:
        raise UsageError(f"--compile takes off,on; got {', '.join(bad)}")
    base = with_ranks(make_config("tiny", workload), ranks)
    batches = positive_ints("--batch-sizes", batch_sizes, "1,2,4,8") if batch_sizes is not None else None
    contexts = (
        positive_ints("--context-length", context_lengths, "128,512,1024")
        if context_lengths is not None
        else None
    )
    compiles = [compile_map[c.lower()] for c in items["--compile"]]
    # asked of the command line, not of the value: -b 4 is the default's value, and it was given
    if batches is not None and on_command_line(ctx, "batch_size"):
        raise UsageError("--batch-sizes gives the batch sizes swept: leave --batch-size out")
    points = [
        checked(c)
        for c in sweep.grid(base, items["--models"], items["--precision"], compiles, batches, contexts)
    ]
    given = {**asked(workload, ctx=ctx), **asked_ranks(ranks)}
    unused = [line for p in points for line in check_effect(p.config, given, p.device.type)]
    configs = [p.config for p in points]
    store = results_db.ResultsStore(db)
    for line in dict.fromkeys([*(line for p in points for line in p.warnings), *unused]):  # each line once
        warn(line)
    experiment = new_id("sweep")

    def point(config: RunConfig) -> str:
        """A point by what tells it apart: `tiny bf16 compiled batch 8` (batch and context where swept)."""
        return (
            f"{config.model} {config.precision}{' compiled' if config.compile else ''}"
            + (f" batch {config.batch_size}" if batches else "")
            + (f" context {config.context_length}" if contexts else "")
        )

    results: list[RunResult] = []
    unsaved: list[results_db.UnsavedRun | None] = []
    between: int | None = None  # a signal that came between points, outside a worker
    pending: RunResult | None = None  # a point run, not yet stored
    with sigterm_raises(), Progress(experiment, len(configs), unit="runs") as progress:
        try:
            for done, config in enumerate(configs):
                progress.stage(point(config))
                # held from the point's start to its save (as `run --repeats` holds them): Ctrl-C is passed
                # on to its worker, the point ends "interrupted"; one that came as it ended is acted on here
                with signals.deferred() as came:
                    pending = multirank.run_any(config)
                    unsaved.append(_save(store, pending, experiment=experiment))
                    results.append(pending)
                    pending = None
                    late = signals.taken(came)
                if results[-1].status == "interrupted":  # stored, but not a point done
                    break
                progress.advance(done + 1)
                if late is not None:  # the point ended as it came: done, and the sweep stops there
                    between = late
                    break
        except KeyboardInterrupt as e:  # the points run are stored: shown, then the signal's exit code
            between = signals.signal_of(e)
            if pending is not None:  # it came as a finished point was being stored: stored now
                unsaved.append(_save(store, pending, experiment=experiment))
                results.append(pending)
    for r in results:
        if r.status not in ("ok", "interrupted"):
            first_line = (r.error or "").splitlines()[0][:200] if r.error else ""
            warn(f"{point(r.config)} (run {r.run_id}) ended {r.status}: {first_line}")
    title = f"{experiment}{render.on_device(results)}"
    table = run_tables.results_table(results, serving=True, ids=True)
    power, power_lines = render.power_notes(_power_notes(results), format)  # each line once for the sweep
    shared = sweep.shared_settings(results, table["context"].tolist() if len(table) else [])
    notes = [shared] if shared else []  # the columns no run differs in are left out of the terminal's table
    if power:  # csv and json: the points' table and the notes' (as `run --power` gives them)
        emit_many([(title, table), *power], format, notes=notes, wide=wide)
    else:
        emit(table, format, title=title, notes=notes, wide=wide)
    for line in power_lines:
        say_note(line)
    if between is not None:
        render.stopped_between("sweep", "points", between, len(results), len(configs), unsaved)
    if len(results) < len(configs):
        warn(f"sweep stopped after {len(results)} of {len(configs)} points")
    render.finish(unsaved, results)


def _power_notes(results: list[RunResult]) -> list[str]:
    """The --power notes of several runs (render.power_notes says each line once: their sources are the
    same); none without it."""
    return [line for r in results for line in r.extra.get(NOTES, [])]


@cli_errors
def import_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="harness-unsaved-*.json files, written when the database would not take a run.",
            readable=False,
        ),
    ],
    replace: Annotated[
        bool,
        typer.Option(
            "--replace", help="Replace a stored run of the same id (without it such a file is refused)."
        ),
    ] = False,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Store runs that could not be saved, every field checked. A run already stored is never replaced
    unless --replace (which says what it replaced); importing the same file again writes nothing."""
    import pandas as pd

    # a --db no command can use is said first, as every command says it
    refuse_target(resolve_url(db), named(db))
    store: ResultsStore | None = None  # opened once a file is read: a bad one creates no database
    done: list[Imported] = []
    for i, f in enumerate(files):
        try:
            pending = unsaved.read(f, registry.NAMES)
            capture.finish(pending.result)  # its figures as a run saved at once has them
            store = store or results_db.ResultsStore(db)
            done.append(store.import_file(f, profilers=registry.NAMES, replace=replace, pending=pending))
        except HarnessError as e:  # its line says it of this file: the others are said with it
            raise HarnessError(f"{e}{_others(done, files[i + 1 :])}", exit_code=e.exit_code) from None
        except KeyboardInterrupt as e:  # Ctrl-C: which files went in, as a refusal says it
            sig = signals.signal_of(e)
            raise HarnessError(
                signals.interrupted(
                    sig,
                    f"while importing {f}: its run is stored whole or not at all (importing it again "
                    "stores it, or says it is stored)",
                )
                + _others(done, files[i + 1 :]),
                exit_code=signals.exit_code(sig),
            ) from None
    table = pd.DataFrame(
        [(str(d.file), d.run_id, d.stored) for d in done],
        columns=["file", "run", "stored"],
    )
    # what became of each file is what the table says: never left out to fit, nor the id a user copies
    table.attrs.update(deciding=["stored"], whole=["run"], narrow=["file"])
    assert store is not None  # files is never empty: each was stored or refused
    emit(table, format, title=f"imported into {results_db.describe_url(store.url)}", wide=wide)
    for d in done:
        if d.stored == "replaced":
            say_note(f"run {d.run_id} replaced: it was {d.was}")


def _others(done: list[Imported], after: list[Path]) -> str:
    """What an import that stopped at a file says of the others: those stored before it, those not tried."""
    before = ", ".join(f"{d.file} ({d.stored}: run {d.run_id})" for d in done)
    rest = ", ".join(map(str, after))
    return (f"; imported before it: {before}" if before else "") + (
        f"; not tried after it: {rest}" if rest else ""
    )


def register(app: typer.Typer) -> None:
    # short help: one line each in `harness -h` at 80 columns
    app.command("run")(run_cmd)
    app.command("sweep")(sweep_cmd)
    app.command("import")(import_cmd)
