"""`harness roofline`: FLOPs, bytes and arithmetic intensity per sub-block against a device's roofs."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from harness.commands.common import FormatOpt, cli_errors, note
from harness.commands.options import (
    Attention,
    AttentionOpt,
    BatchOpt,
    ContextOpt,
    Device,
    DeviceOpt,
    Precision,
    PrecisionOpt,
)
from harness.output import Format


class RooflineMode(StrEnum):
    train = "train"
    forward = "forward"


@cli_errors
def roofline_cmd(
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
    html: Annotated[Path | None, typer.Option("--html", help="Also write the log-log roofline here.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Analytic FLOPs and minimum bytes of every sub-block (embedding … optimizer), forward and backward,
    their arithmetic intensity, and where they sit against the device's compute and memory roofs.

    Roofs: the datasheet table for a known GPU (this one, or --gpu NAME), or --measure on --device.
    """
    from harness.output import emit_many
    from harness.roofline import analytic_report

    report = analytic_report(
        model, batch_size=batch_size, context_length=context_length, precision=precision.value,
        mode=mode.value, attention=attention.value, device=device.value, gpu=gpu, measure=measure,
    )  # fmt: skip
    title = (
        f"{report.model} {report.mode}, batch {report.batch_size} × context {report.context_length}, "
        f"{report.precision}, {report.attention} attention"
    )
    table = report.table
    if fmt is Format.table:  # no times yet: the measured columns would be empty on screen
        table = table.drop(columns=["time (ns)", "achieved TFLOP/s", "achieved GB/s", "of roof (%)"])
    tables = [("roofs", report.roofs_frame())] if report.roofs else []
    tables += [(f"sub-blocks: {title}", table), ("per phase", report.phases_frame())]
    emit_many(tables, fmt, notes=report.notes)
    if html is not None:
        from analysis.dashboard.roofline import roofline_figure

        try:
            against = f" · against {report.used.label}" if report.used else ""
            figure = roofline_figure(report.table, report.used, title + against)
            figure.write_html(html, include_plotlyjs=True)
        except OSError as e:
            from harness.errors import HarnessError, first_line

            raise HarnessError(f"cannot write {html}: {first_line(e)}") from None
        note(f"roofline written to {html}")


def register(app: typer.Typer) -> None:
    app.command("roofline", short_help="FLOPs, bytes and intensity per sub-block, on the device roofline.")(
        roofline_cmd
    )
