"""`harness doctor`: one table saying whether this machine is ready to run and profile."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli import lazy
from harness.cli.common import DbOpt, FormatOpt, WideOpt, cli_errors
from harness.cli.output import Format, emit


@cli_errors
def doctor_cmd(
    nsys_path: Annotated[
        str | None, typer.Option("--nsys-path", metavar="<path>", help="The nsys binary to check.")
    ] = None,
    self_test: Annotated[
        bool, typer.Option("--self-test/--no-self-test", help="Profile a one-range script end to end.")
    ] = True,
    db: DbOpt = None,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """nsys (path, version, flags), an NVTX self-test, python nvtx, torch, CUDA, NVML, the results database.

    Exits 1 when the self-test fails or the results database cannot be used.
    """

    checks = lazy.diagnose(nsys_path, db, run_self_test=self_test)
    emit(lazy.as_frame(checks), fmt, title="harness doctor", wide=wide)
    if any(c.item in ("self-test", "results database") and c.status == "fail" for c in checks):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor", short_help="Is this machine ready? nsys, an NVTX self-test, torch, CUDA.")(
        doctor_cmd
    )
