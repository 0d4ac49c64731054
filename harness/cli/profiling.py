"""`harness overhead`: how much a profiler (nsys, or torch.profiler) slows the work, per phase."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import (
    DbOpt,
    FormatOpt,
    WideOpt,
    check_finite_positive,
    cli_errors,
    comma_list,
    count_option,
    on_command_line,
    warn,
)
from harness.cli.options import (
    DEFAULT,
    NO_PROFILER_ARGS,
    ONE_RANK,
    Capture,
    Profiler,
    ProfilerArgs,
    Ranks,
    Workload,
    prepare,
    profiler_options,
    rank_options,
    workload_options,
)
from harness.cli.terminal.output import Format, emit
from harness.cli.terminal.progress import Progress
from harness.core import signals
from harness.core.bounds import MAX_REPEATS
from harness.core.errors import UsageError
from harness.core.machine import describe
from harness.core.signals import sigterm_raises
from harness.experiments import overhead
from workloads.names import counted


@cli_errors
@workload_options(omit=("nvtx_detail", "power", "power_period"))
@profiler_options(omit=("nsys_mode", "nsys_baseline", "record_shapes", "with_stack", "profile_memory"))
@rank_options()
def overhead_cmd(
    ctx: typer.Context,
    model: Annotated[str, typer.Argument(help="Model name, as for `harness run`.")],
    repeats: Annotated[
        int,
        count_option(
            "--repeats",
            1,
            f"Runs of each kind (at most {MAX_REPEATS}), alternating, each in a fresh process.",
            most=MAX_REPEATS,
        ),
    ] = 3,
    nsys_modes: Annotated[
        str,
        typer.Option(
            "--nsys-mode",
            metavar="<list>",
            help="nsys modes to compare with no nsys: light, full or light,full.",
        ),
    ] = "light",
    profiler: Annotated[
        Profiler,
        typer.Option("--profiler", help="The profiler to measure: nsys (its --nsys-mode list) or torch."),
    ] = Profiler.nsys,
    ci_target: Annotated[
        float | None,
        typer.Option(
            "--ci-target",
            help="Keep alternating runs until the 95% interval of the whole-step overhead is under ±PCT "
            "and --repeats rounds are done, or until --max-time runs out (two rounds at least).",
            metavar="PCT",
        ),
    ] = None,
    max_time: Annotated[
        float,
        typer.Option(help="With --ci-target: start no round that would end after this many seconds."),
    ] = overhead.DEFAULT_MAX_TIME,
    workload: Workload = DEFAULT,
    profiling: ProfilerArgs = NO_PROFILER_ARGS,
    ranks: Ranks = ONE_RANK,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Run a configuration without a profiler and under it, alternating; print per-phase overhead (%)."""

    # each mode once: `light,light` would run nsys light twice a round, pooled as one mode's runs
    mode_list = list(dict.fromkeys(comma_list("--nsys-mode", nsys_modes)))
    bad = [m for m in mode_list if m not in ("light", "full")]
    if bad or not mode_list:
        raise UsageError(f"--nsys-mode takes light, full or light,full; got {nsys_modes!r}")
    # given, not only other than the default: `--nsys-mode light` changes nothing of torch.profiler either
    nsys_only = profiling.nsys_arg or profiling.nsys_capture is not Capture.all
    nsys_only = nsys_only or on_command_line(ctx, "nsys_modes")
    if profiler != "nsys" and (mode_list != ["light"] or nsys_only):
        raise UsageError("--nsys-mode, --nsys-arg and --nsys-capture are for --profiler nsys")
    check_finite_positive("--ci-target", ci_target, "percentage")
    if max_time != overhead.DEFAULT_MAX_TIME and ci_target is None:
        raise UsageError("--max-time bounds the rounds --ci-target adds: give --ci-target, or leave it out")
    check_finite_positive("--max-time", max_time, "number of seconds")
    ready = prepare(model, workload, ranks, db, profiler.value, profiling.values(), ctx=ctx)
    config = ready.config
    with sigterm_raises(), Progress(f"{profiler.value} overhead, {overhead.workload_of(config)}") as progress:
        result = overhead.measure_overhead(
            config, ready.profiler, ready.options, repeats=repeats, modes=mode_list, store=ready.store,
            ci_target=ci_target, max_time=max_time, progress=progress.stage,
        )  # fmt: skip
    for note in result.notes:
        warn(note)
    n, rounds = result.repeats * config.steps, counted(result.repeats, "round")
    notes = [
        f"whole steps{said}: {verdict}" for said, verdict in zip(_whose(result), result.verdicts, strict=True)
    ]
    if result.load:
        notes.append(f"machine: {describe(result.load)}")
    emit(
        result.table,
        format,
        title=f"{result.profiler} overhead, {overhead.workload_of(config)} on "
        f"{result.runs[0][2].device_name} ({rounds} × {counted(config.steps, 'step')} = "
        f"{counted(n, 'step')} each; "
        f"{result.experiment})",
        notes=notes,
        wide=wide,
    )
    if result.interrupted is not None:  # stopped by Ctrl-C or SIGTERM: the rounds before it are shown
        raise typer.Exit(signals.exit_code(result.interrupted))


def _whose(result: overhead.OverheadResult) -> list[str]:
    """Whose whole-step verdict each line is, where the verdict does not say it (`inconclusive: …`) and
    several kinds were measured (`--nsys-mode light,full`): `, nsys light`; else nothing."""
    several = len(result.headline) > 1
    return [f", {label}" if several and label not in verdict else "" for label, verdict in
            zip(result.headline, result.verdicts, strict=True)]  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("overhead")(overhead_cmd)
