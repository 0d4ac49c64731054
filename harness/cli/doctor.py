"""`harness doctor`: one table saying whether this machine is ready to run and profile."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import DbOpt, FormatOpt, WideOpt, cli_errors
from harness.cli.terminal.output import Format, emit
from harness.experiments import doctor as checkup


@cli_errors
def doctor_cmd(
    nsys_path: Annotated[
        str | None, typer.Option("--nsys-path", metavar="<path>", help="The nsys binary to check.")
    ] = None,
    self_test: Annotated[
        bool,
        typer.Option(
            "--self-test/--no-self-test",
            help="Profile a one-range script end to end (on a GPU, also a kernel, cuBLAS and a CUDA graph).",
        ),
    ] = True,
    db: DbOpt = None,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """nsys (path, version, flags), an NVTX self-test, python nvtx, torch, CUDA, NVML, whether this nsys
    traces this CUDA, a GPU self-test (kernel, cuBLAS, CUDA graph: on a machine with a GPU), the results
    database.

    Exits 1 when the nsys is missing, not nsys or incomplete, a self-test fails, the nsys records nothing of
    this CUDA, or the results database cannot be used.
    """

    checks = checkup.diagnose(nsys_path, db, run_self_test=self_test)
    emit(checkup.as_frame(checks), fmt, title="harness doctor", wide=wide)
    if checkup.failed(checks):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)
