"""`harness run`, `harness sweep`, `harness runs`, `harness show`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from harness.commands.common import DbOpt, FormatOpt, cli_errors, warn
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
    Precision,
    PrecisionOpt,
    SeedOpt,
    StepsOpt,
    VocabOpt,
    WarmupOpt,
    make_config,
)
from harness.output import Format


class Capture(StrEnum):
    all = "all"
    measured = "measured"


class NsysMode(StrEnum):
    light = "light"
    full = "full"


NsysOpt = Annotated[bool, typer.Option("--nsys", help="Profile under Nsight Systems (child process).")]
NsysPathOpt = Annotated[
    str | None, typer.Option("--nsys-path", envvar="HARNESS_NSYS", help="The nsys binary to use.")
]
CaptureOpt = Annotated[
    Capture, typer.Option("--nsys-capture", help="measured: only the measured steps are recorded.")
]
NsysModeOpt = Annotated[
    NsysMode, typer.Option("--nsys-mode", help="light: --sample=none --cpuctxsw=none; full: nsys defaults.")
]
NsysArgOpt = Annotated[
    list[str] | None, typer.Option("--nsys-arg", help="Passed to `nsys profile` as is (repeatable).")
]
BaselineOpt = Annotated[
    bool,
    typer.Option(
        "--nsys-baseline/--no-nsys-baseline",
        help="With --nsys: also run without nsys first (fresh process) and report nsys's overhead.",
    ),
]
ProfileDirOpt = Annotated[Path, typer.Option("--profile-dir", help="Where .nsys-rep and .sqlite go.")]


def _progress():
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )


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
    nsys: NsysOpt = False,
    nsys_path: NsysPathOpt = None,
    nsys_capture: CaptureOpt = Capture.all,
    nsys_mode: NsysModeOpt = NsysMode.light,
    nsys_arg: NsysArgOpt = None,
    profile_dir: ProfileDirOpt = Path("nsys_profiles"),
    nsys_baseline: BaselineOpt = True,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Run one workload, time forward/backward/optimizer per step, save it, print the summary."""
    from harness.output import emit_many
    from harness.runner import run_workload, validate
    from harness.store import ResultsStore
    from harness.tables import results_table, throughput_table

    config = make_config(
        model, mode, device, precision, compile, batch_size, context_length, vocab_size,
        warmup, steps, seed, attention, new_tokens, nvtx_detail,
    )  # fmt: skip
    validate(config)
    store = ResultsStore(db)  # fail on a bad --db before the work, not after
    from harness.devices import emulated_precision_note, resolve_device

    note = emulated_precision_note(resolve_device(config.device), [config.precision])
    if note:
        warn(note)
    if nsys:
        from harness.profile import ProfileRequest, profile_run, render_profiled

        request = ProfileRequest(
            nsys_path=nsys_path,
            capture=nsys_capture.value,
            mode=nsys_mode.value,
            extra_args=list(nsys_arg or []),
            profile_dir=profile_dir,
            baseline=nsys_baseline,
        )
        from rich.console import Console

        with Console(stderr=True).status("starting") as status:
            profiled = profile_run(config, request, store=store, progress=status.update)
        render_profiled(profiled, format)
        if profiled.failed:
            raise typer.Exit(1)
        return
    with _progress() as bar:
        task = bar.add_task(f"{config.model} {config.mode}", total=config.warmup + config.steps)
        result = run_workload(config, progress=lambda done, total: bar.update(task, completed=done))
    store.save(result)
    if result.status == "oom":
        warn(f"out of memory: {result.error}")
    emit_many(
        [
            (f"run {result.run_id} ({result.device_name})", results_table([result])),
            ("throughput", throughput_table(result)),
        ],
        format,
    )


@cli_errors
def sweep_cmd(
    models: Annotated[str, typer.Option(help="Comma-separated model names.")] = "tiny,small",
    precision: Annotated[str, typer.Option(help="Comma-separated: fp32,bf16,fp16.")] = "fp32",
    compile: Annotated[str, typer.Option(help="Comma-separated: off,on.")] = "off",
    mode: ModeOpt = Mode.train,
    device: DeviceOpt = Device.auto,
    batch_size: BatchOpt = 4,
    context_length: ContextOpt = None,
    vocab_size: VocabOpt = None,
    warmup: WarmupOpt = 5,
    steps: StepsOpt = 10,
    seed: SeedOpt = 0,
    attention: AttentionOpt = Attention.sdpa,
    new_tokens: NewTokensOpt = 32,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Run a grid of models × precisions × compile settings, each in a fresh process; print one table."""
    import secrets
    from datetime import datetime

    from harness.devices import emulated_precision_note, resolve_device
    from harness.errors import UsageError
    from harness.output import emit
    from harness.store import ResultsStore
    from harness.sweep import grid, run_isolated
    from harness.tables import results_table

    def split(text: str) -> list[str]:
        return [t.strip() for t in text.split(",") if t.strip()]

    compile_map = {"off": False, "on": True, "false": False, "true": True}
    bad = [c for c in split(compile) if c.lower() not in compile_map]
    if bad:
        raise UsageError(f"--compile takes off,on; got {', '.join(bad)}")
    base = make_config(
        "tiny", mode, device, Precision.fp32, False, batch_size, context_length, vocab_size,
        warmup, steps, seed, attention, new_tokens, False,
    )  # fmt: skip
    configs = grid(base, split(models), split(precision), [compile_map[c.lower()] for c in split(compile)])
    store = ResultsStore(db)
    note = emulated_precision_note(resolve_device(base.device), [c.precision for c in configs])
    if note:
        warn(note)
    experiment = f"sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    results = []
    with _progress() as bar:
        task = bar.add_task("sweep", total=len(configs))
        for config in configs:
            label = f"{config.model} {config.precision}{' compiled' if config.compile else ''}"
            bar.update(task, description=label)
            result = run_isolated(config)
            store.save(result, experiment=experiment)
            results.append(result)
            bar.advance(task)
    for r in results:
        if r.status != "ok":
            first_line = (r.error or "").splitlines()[0][:200] if r.error else ""
            warn(f"{r.config.model} {r.config.precision}: {r.status.upper()}: {first_line}")
    emit(results_table(results), format, title=f"{experiment} ({results[0].device_name if results else ''})")


@cli_errors
def runs_cmd(
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    device: Annotated[str | None, typer.Option(help="Only this device type (cpu, cuda, mps).")] = None,
    precision: Annotated[str | None, typer.Option(help="Only this precision.")] = None,
    last: Annotated[int | None, typer.Option(help="Only the newest N.")] = None,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """List saved runs (newest last)."""
    from harness.output import emit
    from harness.store import ResultsStore, describe_url

    store = ResultsStore(db)
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
    emit(df, format, title=f"runs in {describe_url(store.url)}", notes=[] if len(df) else ["no runs yet"])


@cli_errors
def show_cmd(
    run_id: Annotated[str, typer.Argument(help="A run id (or a unique prefix) from `harness runs`.")],
    db: DbOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Show one run: configuration, environment, per-phase statistics, agreement, profile files."""
    from harness.output import emit_many
    from harness.show import show_tables
    from harness.store import ResultsStore

    store = ResultsStore(db)
    run = store.get(run_id)
    tables = show_tables(run, store.linked(run.id))
    emit_many(tables, format)


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("sweep")(sweep_cmd)
    app.command("runs")(runs_cmd)
    app.command("show")(show_cmd)
