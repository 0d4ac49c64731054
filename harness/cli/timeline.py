"""`harness timeline REPORT --out FILE.json.gz`: an export or trace as a Chrome trace for Perfetto UI and
chrome://tracing (harness.experiments.pages), the whole of it or one step, phase or window."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import (
    OldOutputOpt,
    cli_errors,
    file_option,
    note,
    one_out,
    shown,
    text_option,
    warn,
)
from harness.cli.reading import EndOpt, NoCacheOpt, StartOpt
from harness.experiments import pages

ReportArg = Annotated[
    Path,
    typer.Argument(
        metavar="REPORT",
        show_default=False,
        readable=False,
        help="An nsys export (.sqlite), a report (.nsys-rep, .qdrep) or a PyTorch profiler trace (.json, "
        ".json.gz).",
    ),
]

PHASE_HELP = "With --step: only that phase of it (forward, …)."


@cli_errors
def timeline_cmd(
    report: ReportArg,
    out: Annotated[
        Path | None,
        file_option(
            "--out",
            "-o",
            show_default=False,
            help="The Chrome trace to write (gzipped when it ends in .gz; - for standard output).",
        ),
    ] = None,
    output: OldOutputOpt = None,
    step: Annotated[
        int | None,
        typer.Option(
            "--step",
            metavar="<n>",
            help="Only step N: the harness's step range, or a torch.profiler trace's ProfilerStep#N.",
        ),
    ] = None,
    phase: Annotated[
        str | None,
        text_option("--phase", "<name>", "a phase's name (forward, …)", PHASE_HELP),
    ] = None,
    start: StartOpt = None,
    end: EndOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Write kernels, memory copies and sets, CUDA API calls, NVTX ranges and OS runtime calls as a Chrome
    trace: processes, threads and streams named, an arrow from each launch to its kernel, the harness's
    steps and phases on a track of their own. Open it in https://ui.perfetto.dev or chrome://tracing."""
    target = one_out(out, output)
    written = pages.chrome_trace_of(
        report, target, cache=not no_cache, step=step, phase=phase, start=start, end=end
    )
    held = ", ".join(f"{n:,} {kind}" for kind, n in written.counts.items() if kind != "metadata")
    cut = f" ({written.window_words()})" if written.window else ""
    note(f"wrote {shown(target)}{cut}: {held or 'no events'}")
    for text in written.notes:  # what it left out, as every table says it
        note(text)
    for text in written.warnings:
        warn(text)


def register(app: typer.Typer) -> None:
    app.command("timeline")(timeline_cmd)
