"""`harness run`, `harness sweep`, `harness runs`, `harness show`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.commands.common import DbOpt, FormatOpt, WideOpt, cli_errors, err, warn
from harness.commands.options import (
    Attention,
    AttentionOpt,
    BatchOpt,
    CompileOpt,
    ContextOpt,
    DetailOpt,
    Device,
    DeviceOpt,
    Mode,
    ModeOpt,
    NewTokensOpt,
    PowerOpt,
    PowerPeriodOpt,
    Precision,
    PrecisionOpt,
    SeedOpt,
    StepsOpt,
    VocabOpt,
    WarmupOpt,
    make_config,
)
from harness.commands.rank_options import (
    NnodesOpt,
    NodeRankOpt,
    NprocOpt,
    RankTimeoutOpt,
    RdzvOpt,
    with_ranks,
)
from harness.output import Format
from harness.signals import sigterm_raises

if TYPE_CHECKING:
    import pandas as pd

    from harness.profilers.nsys import ProfiledRun
    from harness.profilers.torch import TorchProfiledRun
    from harness.records import RunConfig, RunResult
    from harness.store import ResultsStore


class Capture(StrEnum):
    all = "all"
    measured = "measured"


class Profiler(StrEnum):
    nsys = "nsys"
    torch = "torch"


class NsysMode(StrEnum):
    light = "light"
    full = "full"


NsysOpt = Annotated[bool, typer.Option("--nsys", help="Same as --profiler nsys.")]
ProfilerOpt = Annotated[
    Profiler | None,
    typer.Option(
        "--profiler",
        help="nsys: under Nsight Systems; torch: torch.profiler over the measured steps. Each runs in a "
        "fresh process.",
    ),
]
RecordShapesOpt = Annotated[
    bool, typer.Option("--record-shapes", help="With --profiler torch: record operator input shapes.")
]
WithStackOpt = Annotated[
    bool, typer.Option("--with-stack", help="With --profiler torch: record Python stacks of operators.")
]
ProfileMemoryOpt = Annotated[
    bool, typer.Option("--profile-memory", help="With --profiler torch: record tensor allocations.")
]
NsysPathOpt = Annotated[
    str | None,
    typer.Option("--nsys-path", metavar="<path>", help="The nsys binary to use (or HARNESS_NSYS)."),
]
CaptureOpt = Annotated[
    Capture, typer.Option("--nsys-capture", help="measured: only the measured steps are recorded.")
]
NsysModeOpt = Annotated[
    NsysMode, typer.Option("--nsys-mode", help="light: --sample=none --cpuctxsw=none; full: nsys defaults.")
]
NsysArgOpt = Annotated[
    list[str] | None,
    typer.Option("--nsys-arg", metavar="<arg>", help="Passed to `nsys profile` as is (repeatable)."),
]
BaselineOpt = Annotated[
    bool,
    typer.Option(
        "--nsys-baseline/--no-nsys-baseline",
        help="With --nsys: also run without nsys first (fresh process) and report nsys's overhead.",
    ),
]
# --memory (harness/memory.py)
MemoryOpt = Annotated[
    bool,
    typer.Option(
        "--memory",
        help="Record the measured steps' memory: on CUDA the allocator's history as a snapshot pickle "
        "(pytorch.org/memory_viz; the dashboard's memory timeline), on the CPU torch.profiler's memory "
        "table.",
    ),
]
ProfileDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--profile-dir",
        metavar="<dir>",
        help="Where the profiler's files go [default: nsys_profiles, torch_profiles; --memory: "
        "memory_profiles].",
    ),
]


@cli_errors
def run_cmd(
    model: Annotated[
        str, typer.Argument(help="Model name: tiny, small, medium, large, xl, 2.7B, gpt2, char, …")
    ],
    mode: ModeOpt = Mode.train,
    device: DeviceOpt = Device.auto,
    precision: PrecisionOpt = Precision.fp32,
    compile: CompileOpt = False,
    batch_size: BatchOpt = 4,
    context_length: ContextOpt = None,
    vocab_size: VocabOpt = None,
    warmup: WarmupOpt = 5,
    steps: StepsOpt = 10,
    seed: SeedOpt = 0,
    attention: AttentionOpt = Attention.sdpa,
    new_tokens: NewTokensOpt = 32,
    nvtx_detail: DetailOpt = False,
    power: PowerOpt = False,
    power_period: PowerPeriodOpt = 50,
    profiler: ProfilerOpt = None,
    nsys: NsysOpt = False,
    nsys_path: NsysPathOpt = None,
    nsys_capture: CaptureOpt = Capture.all,
    nsys_mode: NsysModeOpt = NsysMode.light,
    nsys_arg: NsysArgOpt = None,
    profile_dir: ProfileDirOpt = None,
    nsys_baseline: BaselineOpt = True,
    record_shapes: RecordShapesOpt = False,
    with_stack: WithStackOpt = False,
    profile_memory: ProfileMemoryOpt = False,
    nproc: NprocOpt = 1,
    nnodes: NnodesOpt = 1,
    node_rank: NodeRankOpt = 0,
    rdzv_endpoint: RdzvOpt = None,
    rank_timeout: RankTimeoutOpt = 300.0,
    memory: MemoryOpt = False,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Run one workload, time forward/backward/optimizer per step, save it, print the summary."""
    from harness.commands.common import note as say_note
    from harness.commands.progress import Progress
    from harness.output import emit_many
    from harness.records import phases_for
    from harness.runner import run_workload, validate
    from harness.store import ResultsStore
    from harness.tables import energy_rows, extra_tables, results_table, throughput_table

    config = make_config(
        model, mode, device, precision, compile, batch_size, context_length, vocab_size,
        warmup, steps, seed, attention, new_tokens, nvtx_detail, power, power_period,
    )  # fmt: skip
    validate(config)
    config = with_ranks(config, nproc, nnodes, node_rank, rdzv_endpoint, rank_timeout)
    chosen = _profiler(profiler, nsys, record_shapes or with_stack or profile_memory)
    store = ResultsStore(db)  # fail on a bad --db before the work, not after
    from harness.devices import emulated_precision_note, resolve_device

    resolved = resolve_device(config.device)
    note = emulated_precision_note(resolved, [config.precision])
    if note:
        warn(note)
    if chosen == "torch" and config.world_size > 1:
        from harness.errors import UsageError

        raise UsageError("--profiler torch does not run across ranks yet: use --nsys with --nproc")
    config = _with_memory(config, memory, chosen, resolved)
    if chosen == "torch":
        from harness.profilers import DEFAULT_DIRS
        from harness.profilers.torch import TorchRequest
        from harness.profilers.torch import profile_run as torch_run

        treq = TorchRequest(
            profile_dir=profile_dir or DEFAULT_DIRS["torch"],
            record_shapes=record_shapes,
            with_stack=with_stack,
            profile_memory=profile_memory,
        )
        with sigterm_raises(), Progress(f"{config.model} {config.mode} under torch.profiler") as progress:
            tprof = torch_run(config, treq, store=store, progress=progress.stage)
        render_torch_profiled(tprof, format, wide=wide)
        if tprof.failed:
            raise typer.Exit(tprof.exit_status)
        return
    if chosen == "nsys":
        from harness.profilers import DEFAULT_DIRS
        from harness.profilers.nsys import ProfileRequest, profile_run

        request = ProfileRequest(
            nsys_path=nsys_path,
            capture=nsys_capture.value,
            mode=nsys_mode.value,
            extra_args=list(nsys_arg or []),
            profile_dir=profile_dir or DEFAULT_DIRS["nsys"],
            baseline=nsys_baseline,
        )
        with sigterm_raises(), Progress(f"{config.model} {config.mode} under nsys") as progress:
            profiled = profile_run(config, request, store=store, progress=progress.stage)
        render_profiled(profiled, format, wide=wide)
        if profiled.failed:
            raise typer.Exit(profiled.exit_status)
        return
    if config.world_size > 1:
        _run_ranks(config, store, format, wide)
        return
    with (
        sigterm_raises(),
        Progress(f"{config.model} {config.mode}", config.warmup + config.steps, unit="steps") as progress,
    ):
        result = run_workload(config, progress=progress.advance, memory_dir=profile_dir)
    unsaved = _save(store, result)
    if result.status == "oom":
        warn(f"out of memory: {result.error}")
    tables = [
        (f"run {result.run_id} ({result.device_name})", results_table([result])),
        ("throughput", throughput_table(result)),
    ]
    if result.extra.get("energy"):
        tables.append(("energy (measured steps)", energy_rows(result.extra["energy"])))
    tables += extra_tables(result.extra, phases_for(config.mode))
    emit_many(tables, format, wide=wide)
    _memory_notes(result.extra)
    for line in result.extra.get("power_notes", []):
        say_note(line)
    _finish([unsaved], [result])


def _run_ranks(config: RunConfig, store: ResultsStore, format: Format, wide: bool) -> None:
    """`run --nproc N`: the ranks under torchrun, stored as one run; per-rank and straggler tables."""

    from harness.commands.progress import Progress
    from harness.multirank import local_ranks, run_ranks
    from harness.output import emit_many
    from harness.rank_tables import rank_tables, result_frame
    from harness.tables import results_table, throughput_table

    what = f"{config.model} {config.mode} across {config.world_size} ranks (torchrun)"
    with sigterm_raises(), Progress(what) as progress:
        progress.stage(f"{config.nproc} ranks on this machine")
        result = run_ranks(config)
    unsaved = _save(store, result)
    ranks = local_ranks(config)
    which = "all ranks" if config.nnodes == 1 else f"ranks {ranks[0]}-{ranks[-1]} of {config.world_size}"
    tables = [(f"run {result.run_id} ({result.device_name}, {which})", results_table([result]))]
    per_rank, notes = rank_tables(result_frame(result))
    tables += per_rank
    if result.status == "ok":
        tables.append((f"throughput ({which})", throughput_table(result)))
    emit_many(tables, format, notes=notes if Format(format) is Format.table else [], wide=wide)
    if result.status in ("error", "oom"):
        err(f"run {result.run_id} failed: {result.error}; stored as {result.status}")
        for line in filter(None, [unsaved]):
            err(line)
        raise typer.Exit(1)
    _finish([unsaved], [result])


def _with_memory(config: RunConfig, memory: bool, profiler: str | None, device: Any) -> RunConfig:
    """--memory into the configuration (not with torch.profiler on the CPU: one profiler at a time there)."""
    from dataclasses import replace

    from harness.errors import UsageError

    if memory and profiler == "torch" and device.type != "cuda":
        raise UsageError(
            "--memory on the CPU is torch.profiler's memory table: with --profiler torch, use "
            "--profile-memory"
        )
    return replace(config, memory=memory)


def _memory_notes(extra: dict[str, Any]) -> None:
    from harness.commands.common import note

    memory = extra.get("memory") or {}
    if memory.get("error"):
        warn(memory["error"])
    if memory.get("snapshot"):
        note(f"memory snapshot: {memory['snapshot']} (opens in https://pytorch.org/memory_viz)")


def _profiler(profiler: Profiler | None, nsys: bool, torch_options: bool) -> str | None:
    """The profiler asked for: --profiler, or --nsys (its shorthand); they must not disagree."""
    from harness.errors import UsageError

    if nsys and profiler not in (None, Profiler.nsys):
        raise UsageError(f"--nsys means --profiler nsys; it cannot go with --profiler {profiler}")
    chosen = "nsys" if nsys else profiler.value if profiler else None
    if torch_options and chosen != "torch":
        raise UsageError("--record-shapes, --with-stack and --profile-memory need --profiler torch")
    return chosen


def _save(store: ResultsStore, result: RunResult, **how: Any) -> str | None:
    """Save; when the database will not take the run it is in a file by now: the line saying where."""
    from harness.store import UnsavedRun

    try:
        store.save(result, **how)
    except UnsavedRun as e:
        if e.signal is not None:  # Ctrl-C or SIGTERM while it waited on a locked database: say, then end
            from harness import signals

            err(str(e))
            raise typer.Exit(signals.exit_code(e.signal)) from None
        return str(e)
    return None


def _finish(unsaved: list[str | None], results: list[RunResult]) -> None:
    """Say what was not saved or was interrupted, and exit with the code that goes with it."""

    from harness import signals

    for line in filter(None, unsaved):
        err(line)
    stopped = next((r for r in results if r.status == "interrupted"), None)
    if stopped is not None:
        err(f"run {stopped.run_id} {stopped.error}; stored as interrupted")
        raise typer.Exit(signals.exit_code(signals.signal_in(stopped.error)))
    if any(unsaved):
        raise typer.Exit(1)


@cli_errors
def sweep_cmd(
    models: Annotated[
        str, typer.Option(metavar="<list>", help="Comma-separated model names.")
    ] = "tiny,small",
    precision: Annotated[
        str, typer.Option(metavar="<list>", help="Comma-separated: fp32,bf16,fp16.")
    ] = "fp32",
    compile: Annotated[str, typer.Option(metavar="<list>", help="Comma-separated: off,on.")] = "off",
    mode: ModeOpt = Mode.train,
    device: DeviceOpt = Device.auto,
    batch_size: BatchOpt = 4,
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            metavar="<list>",
            help="Comma-separated batch sizes to sweep (e.g. 1,2,4,8; with --power: FLOPs per watt "
            "against batch size). Default: --batch-size.",
        ),
    ] = None,
    context_length: ContextOpt = None,
    vocab_size: VocabOpt = None,
    warmup: WarmupOpt = 5,
    steps: StepsOpt = 10,
    seed: SeedOpt = 0,
    attention: AttentionOpt = Attention.sdpa,
    new_tokens: NewTokensOpt = 32,
    power: PowerOpt = False,
    power_period: PowerPeriodOpt = 50,
    nproc: NprocOpt = 1,
    nnodes: NnodesOpt = 1,
    node_rank: NodeRankOpt = 0,
    rdzv_endpoint: RdzvOpt = None,
    rank_timeout: RankTimeoutOpt = 300.0,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Run a grid of models × precisions × compile settings × batch sizes, each in a fresh process; print
    one table. The runs are stored as one experiment (sweep-…)."""
    import secrets
    from datetime import datetime

    from harness.commands.progress import Progress
    from harness.devices import emulated_precision_note, resolve_device
    from harness.errors import UsageError
    from harness.multirank import run_any
    from harness.output import emit
    from harness.store import ResultsStore
    from harness.sweep import grid
    from harness.tables import results_table

    def split(text: str) -> list[str]:
        return [t.strip() for t in text.split(",") if t.strip()]

    compile_map = {"off": False, "on": True, "false": False, "true": True}
    bad = [c for c in split(compile) if c.lower() not in compile_map]
    if bad:
        raise UsageError(f"--compile takes off,on; got {', '.join(bad)}")
    base = make_config(
        "tiny", mode, device, Precision.fp32, False, batch_size, context_length, vocab_size,
        warmup, steps, seed, attention, new_tokens, False, power, power_period,
    )  # fmt: skip
    base = with_ranks(base, nproc, nnodes, node_rank, rdzv_endpoint, rank_timeout)
    batches = _batch_sizes(split(batch_sizes)) if batch_sizes is not None else None
    compiles = [compile_map[c.lower()] for c in split(compile)]
    configs = grid(base, split(models), split(precision), compiles, batches)
    store = ResultsStore(db)
    note = emulated_precision_note(resolve_device(base.device), [c.precision for c in configs])
    if note:
        warn(note)
    experiment = f"sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    results: list[RunResult] = []
    unsaved: list[str | None] = []
    with sigterm_raises(), Progress(experiment, len(configs), unit="runs") as progress:
        for done, config in enumerate(configs):
            progress.stage(
                f"{config.model} {config.precision}{' compiled' if config.compile else ''}"
                + (f" batch {config.batch_size}" if batches else "")
            )
            result = run_any(config)  # Ctrl-C is passed on: the point ends "interrupted"
            unsaved.append(_save(store, result, experiment=experiment))
            results.append(result)
            progress.advance(done + 1)
            if result.status == "interrupted":
                break
    for r in results:
        if r.status not in ("ok", "interrupted"):
            first_line = (r.error or "").splitlines()[0][:200] if r.error else ""
            batch = f" batch {r.config.batch_size}" if batches else ""
            warn(f"{r.config.model} {r.config.precision}{batch}: {r.status.upper()}: {first_line}")
    title = f"{experiment} ({results[0].device_name if results else ''})"
    emit(results_table(results), format, title=title, wide=wide)
    if power:  # the sources are the same for every point: each line once
        from harness.commands.common import note as say_note

        for line in dict.fromkeys(line for r in results for line in r.extra.get("power_notes", [])):
            say_note(line)
    if len(results) < len(configs):
        warn(f"sweep stopped after {len(results)} of {len(configs)} points")
    _finish(unsaved, results)


def _batch_sizes(items: list[str]) -> list[int]:
    from harness.errors import UsageError

    bad = [b for b in items if not b.isdigit() or int(b) < 1]
    if bad or not items:
        raise UsageError(
            f"--batch-sizes takes positive integers, e.g. 1,2,4,8; got {', '.join(bad) or 'none'}"
        )
    from harness.bounds import check_count

    for b in items:
        check_count("--batch-sizes", int(b))
    return list(dict.fromkeys(int(b) for b in items))


@cli_errors
def runs_cmd(
    model: Annotated[str | None, typer.Option(metavar="<name>", help="Only this model.")] = None,
    device: Annotated[
        str | None, typer.Option(metavar="<type>", help="Only this device type (cpu, cuda, mps).")
    ] = None,
    precision: Annotated[str | None, typer.Option(metavar="<name>", help="Only this precision.")] = None,
    last: Annotated[int | None, typer.Option(metavar="<n>", help="Only the newest N.")] = None,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """List saved runs (newest last)."""
    from harness.output import emit
    from harness.store import ResultsStore, describe_url

    store = ResultsStore(db, readonly=True)
    df = store.runs(model=model, device=device, precision=precision, last=last)
    if format is Format.table:
        cols = {
            "run_id": "run", "created_at": "created", "model": "model", "mode": "mode", "device": "device",
            "precision": "precision", "compile": "compile", "status": "status", "profiler": "profiler",
            "baseline_run_id": "baseline run",
            "forward_mean_ns": "forward (ns)", "backward_mean_ns": "backward (ns)",
            "optimizer_mean_ns": "optimizer (ns)", "tokens_per_s": "tokens/s",
        }  # fmt: skip
        df = df[list(cols)].rename(columns=cols)
        # the run id (model-date-time) is what `harness show` takes: first, and never shortened
        df.attrs["priority"] = [
            "run", "forward (ns)", "backward (ns)", "optimizer (ns)", "tokens/s",
            "status", "model", "precision", "mode", "device", "compile", "profiler",
        ]  # fmt: skip
        df.attrs["whole"] = ["run"]
    notes = [] if len(df) else ["no runs yet"]
    emit(df, format, title=f"runs in {describe_url(store.url)}", notes=notes, wide=wide)


@cli_errors
def show_cmd(
    run_id: Annotated[str, typer.Argument(help="A run id (or a unique prefix) from `harness runs`.")],
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Show one run: configuration, environment, per-phase statistics, agreement, profile files."""
    from harness.output import emit_many
    from harness.show import show_tables
    from harness.store import ResultsStore

    store = ResultsStore(db, readonly=True)
    run = store.get(run_id)
    tables = show_tables(run, store.linked(run.id))
    emit_many(tables, format, wide=wide)


@cli_errors
def import_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(help="harness-unsaved-*.json files, written when the database would not take a run."),
    ],
    db: DbOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Store runs that could not be saved; importing a file again stores its run once."""
    import pandas as pd

    from harness.output import emit
    from harness.store import ResultsStore, describe_url

    store = ResultsStore(db)
    done = [store.import_file(f) for f in files]
    table = pd.DataFrame(
        [(str(d.file), d.run_id, "replaced" if d.replaced else "new") for d in done],
        columns=["file", "run", "stored"],
    )
    emit(table, format, title=f"imported into {describe_url(store.url)}")


def register(app: typer.Typer) -> None:
    # short help: one line each in `harness -h` at 80 columns
    app.command("run", short_help="Run one workload, time its phases, save and print the result.")(run_cmd)
    app.command("sweep", short_help="Run a grid of models × precisions × compile, a process each.")(sweep_cmd)
    app.command("runs", short_help="List saved runs (newest last).")(runs_cmd)
    app.command("show", short_help="Show one run: configuration, phases, agreement, files.")(show_cmd)
    app.command("import", short_help="Store runs saved to a file when the database would not take them.")(
        import_cmd
    )


def render_profiled(p: ProfiledRun, fmt: str, wide: bool = False) -> None:
    from analysis.agreement import for_people
    from harness.output import Format, emit_many
    from harness.profilers.nsys import TOP_KERNELS
    from harness.records import phases_for
    from harness.tables import extra_tables, results_table

    tables: list[tuple[str, pd.DataFrame]] = []
    rank_notes: list[str] = []
    if p.result is not None and p.result.steps:
        tables.append((f"run {p.run_id} under nsys {p.nsys_version}", results_table([p.result])))
        from harness.rank_tables import rank_tables, result_frame

        ranks, rank_notes = rank_tables(result_frame(p.result))
        tables += ranks
    if p.nvtx is not None:
        whose = f", rank {min(s.rank for s in p.result.steps)}'s report" if rank_notes and p.result else ""
        tables.append((f"NVTX ranges (measured steps{whose})", p.nvtx))
    if p.kernels is not None:
        tables.append((f"top {TOP_KERNELS} kernels", p.kernels))
    if p.agreement is not None and len(p.agreement):
        tables.append(("NVTX vs in-process timers", for_people(p.agreement)))
    if p.overhead is not None:
        tables.append(("nsys overhead (one run each; `harness overhead` alternates repeats)", p.overhead))
    if p.result is not None:
        tables += extra_tables(p.result.extra, phases_for(p.result.config.mode))
    files = []
    if p.profile is not None and p.profile.artifacts:  # one report per rank
        files = [f"{kind}: {path}" for kind, path in p.profile.artifacts.items()]
    elif p.profile is not None:
        files = [
            f"{kind}: {path}"
            for kind, path in (("report", p.profile.rep), ("export", p.profile.sqlite))
            if path
        ]
    if tables:
        emit_many(tables, fmt, notes=[*rank_notes, *files] if Format(fmt) is Format.table else [], wide=wide)
    for note in p.notes:
        warn(note)
    if p.error:
        err(p.error)
    for line in p.unsaved:
        err(line)


def render_torch_profiled(p: TorchProfiledRun, fmt: str, wide: bool = False) -> None:
    import pandas as pd

    from harness.output import Format, emit_many
    from harness.records import phases_for
    from harness.tables import extra_tables, results_table

    tables: list[tuple[str, pd.DataFrame]] = []
    if p.result is not None and p.result.steps:
        title = f"run {p.run_id} under torch.profiler ({p.result.device_name})"
        tables.append((title, results_table([p.result])))
    if p.ranges is not None:
        tables.append(("record_function ranges (measured steps)", p.ranges))
    tables += p.operators
    if p.result is not None:
        tables += extra_tables(p.result.extra, phases_for(p.result.config.mode))
    files = [f"trace: {p.trace}"] if p.trace else []
    if Format(fmt) is not Format.table and p.artifacts:
        tables.append(("files", pd.DataFrame(list(p.artifacts.items()), columns=["kind", "path"])))
    if tables:
        emit_many(tables, fmt, notes=files if Format(fmt) is Format.table else [], wide=wide)
    for note in p.notes:
        warn(note)
    if p.error:
        err(p.error)
    for line in p.unsaved:
        err(line)
