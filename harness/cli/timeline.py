"""`harness timeline REPORT --out FILE.json.gz`: an export or trace as a Chrome trace for Perfetto UI and
chrome://tracing (analysis.views.chrome_trace), the whole of it or one step, phase or window."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analysis.views import chrome_trace
from harness.cli.common import OldOutputOpt, cli_errors, file_option, note, one_out, refuse_inputs, shown
from harness.cli.reading import NoCacheOpt
from harness.core.signals import sigterm_raises
from harness.experiments import opening

ReportArg = Annotated[
    Path,
    typer.Argument(
        metavar="REPORT",
        show_default=False,
        help="An nsys export (.sqlite), a report (.nsys-rep, .qdrep) or a PyTorch profiler trace (.json, "
        ".json.gz).",
    ),
]


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
        int | None, typer.Option("--step", metavar="<n>", help="Only the harness's step N (its NVTX range).")
    ] = None,
    phase: Annotated[
        str | None,
        typer.Option("--phase", metavar="<name>", help="With --step: only that phase of it (forward, …)."),
    ] = None,
    start: Annotated[
        int | None, typer.Option("--start", metavar="<ns>", help="Only events that end at or after this.")
    ] = None,
    end: Annotated[
        int | None, typer.Option("--end", metavar="<ns>", help="Only events that start at or before this.")
    ] = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Write kernels, memory copies and sets, CUDA API calls, NVTX ranges and OS runtime calls as a Chrome
    trace: processes, threads and streams named, an arrow from each launch to its kernel, the harness's
    steps and phases on a track of their own. Open it in https://ui.perfetto.dev or chrome://tracing."""
    target = one_out(out, output)
    refuse_inputs(target, opening.files_read(report), "--out")
    with opening.open_report(report, cache=not no_cache) as trace:  # closed: its private copy goes
        refuse_inputs(target, [trace.path], "--out")
        window = chrome_trace.window_of(trace, step=step, phase=phase, start=start, end=end)
        with sigterm_raises():  # as Ctrl-C: the half-written file is removed, not left beside the output
            written = chrome_trace.write_chrome_trace(trace, target, window)
    held = ", ".join(f"{n:,} {kind}" for kind, n in written.counts.items() if kind != "metadata")
    cut = f" (window {window[0]:,}..{window[1]:,} ns)" if window else ""
    note(f"wrote {shown(target)}{cut}: {held or 'no events'}")
    for text in written.notes:  # what it left out, as every table says it
        note(text)


def register(app: typer.Typer) -> None:
    app.command("timeline")(timeline_cmd)
