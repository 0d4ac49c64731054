"""`harness roofline`: FLOPs, bytes and arithmetic intensity per sub-block against a device's roofs."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import (
    DbOpt,
    FormatOpt,
    RunRefCommand,
    WideOpt,
    cli_errors,
    file_option,
    note,
    on_command_line,
    refuse_inputs,
    refuse_page_on_stdout,
    run_reference,
    warn,
)
from harness.cli.options import (
    Attention,
    AttentionOpt,
    BatchOpt,
    ContextOpt,
    Device,
    DeviceOpt,
    Precision,
    PrecisionOpt,
)
from harness.cli.terminal.output import Format, emit_many
from harness.core.errors import HarnessError, UsageError, os_reason
from harness.experiments import roofline
from harness.store import results as results_db
from harness.store.blocks import resolve
from harness.store.location import resolve_url, sqlite_file


class RooflineMode(StrEnum):
    train = "train"
    forward = "forward"


# the configuration options: of a RUN, its own configuration is used instead
CONFIGURATION = {
    "model": "--model",
    "batch_size": "--batch-size",
    "context_length": "--context-length",
    "precision": "--precision",
    "mode": "--mode",
    "attention": "--attention",
    "device": "--device",
}


@cli_errors
def roofline_cmd(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(
            help="A stored run (id, unique prefix or `latest`): its configuration and measured times. "
            "Without it, the configuration options below.",
            callback=run_reference,
        ),
    ] = None,
    model: Annotated[
        str, typer.Option("--model", "-m", help="Model name: tiny, small, …, gpt2, char.")
    ] = "tiny",
    batch_size: BatchOpt = 8,
    context_length: ContextOpt = None,
    precision: PrecisionOpt = Precision.fp32,
    mode: Annotated[
        RooflineMode, typer.Option(help="train: forward, backward, optimizer; forward: no_grad.")
    ] = (RooflineMode.train),
    attention: AttentionOpt = Attention.math,
    device: DeviceOpt = Device.auto,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="Place against this GPU's datasheet roofs (e.g. H100, A100).")
    ] = None,
    measure: Annotated[
        bool, typer.Option("--measure", help="Measure the device's roofs: a large matmul and a large copy.")
    ] = False,
    html: Annotated[
        Path | None,
        file_option("--html", help="Also write the log-log roofline here."),
    ] = None,
    db: DbOpt = None,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Analytic FLOPs and minimum bytes of every sub-block (embedding … optimizer), forward and backward,
    their arithmetic intensity, and where they sit against the device's compute and memory roofs.

    With RUN: the run's model, batch, context, precision, mode and attention, its per-block times
    (--nvtx-detail) placed on the roofs (achieved FLOP/s and bytes/s, share of the roof), its phase times
    per phase, and MFU per phase and for the step.

    Roofs: the datasheet table for a known GPU (this one or the run's, or --gpu NAME), or --measure on
    --device (with RUN: on this machine's device of the run's kind).
    """

    given = [flag for name, flag in CONFIGURATION.items() if on_command_line(ctx, name)]
    if run is not None and given:
        raise UsageError(
            f"{', '.join(given)}: the roofline of run {run} is of the run's own configuration; "
            "these options go without RUN"
        )
    refuse_page_on_stdout(html)
    inputs = [sqlite_file(resolve_url(db))]  # the results database too where no RUN is read from it
    store = results_db.ResultsStore(db, readonly=True) if run is not None else None
    if run is not None and html is not None:  # the run's export, report and trace: its measurement
        found = resolve(store, run, nvtx_detail=False)
        inputs += [found.nsys_sqlite, found.nsys_rep, *(found.artifacts or {}).values()]
    if html is not None:  # --html never replaces what it draws from
        refuse_inputs(html, inputs, "--html")
    if run is not None:
        report = roofline.run_report(store, run, gpu=gpu, measure=measure)
        if report.warning:  # first: the tables are read knowing it
            warn(report.warning)
    else:
        report = roofline.analytic_report(
            model, batch_size=batch_size, context_length=context_length, precision=precision.value,
            mode=mode.value, attention=attention.value, device=device.value, gpu=gpu, measure=measure,
        )  # fmt: skip
    title = report.title
    table, phases = report.table, report.phases_frame()
    measured = ["time (ns)", "achieved TFLOP/s", "achieved GB/s", "of roof (%)"]
    if fmt is Format.table and table["time (ns)"].isna().all():  # the measured columns would be empty
        table = table.drop(columns=measured)
    if fmt is Format.table and phases["time (ns)"].isna().all():
        phases = phases.drop(columns=measured)
    if report.run_id:  # what was measured and where it sits against the roof decide; never left out
        deciding = ["time (ns)", "achieved TFLOP/s", "bound", "of roof (%)"]
        then = ["achieved GB/s", "intensity", "flops", "model flops", "bytes"]
        table.attrs.update(deciding=["sub-block", "pass", *deciding], priority=then)
        phases.attrs.update(deciding=["phase", *deciding], priority=then)
    tables = [("roofs", report.roofs_frame())] if report.roofs else []
    tables += [(f"sub-blocks: {title}", table), ("per phase", phases)]
    if report.phase_ns:
        tables.append(("MFU (model FLOPs / time / peak)", report.mfu_frame()))
    emit_many(tables, fmt, notes=[*report.notes, *report.above_roof()], wide=wide)
    if html is not None:
        try:
            roofline.write_page(report, html)
        except OSError as e:
            raise HarnessError(f"cannot write {html}: {os_reason(html, e)}") from None
        note(f"roofline written to {html}")


def register(app: typer.Typer) -> None:
    app.command(
        "roofline",
        cls=RunRefCommand,
    )(roofline_cmd)
