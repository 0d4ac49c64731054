"""`harness compare-compile`: eager against torch.compile, per configuration and phase, from stored runs."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.common import DbOpt, DeviceOpt, FormatOpt, ModelOpt, WideOpt, cli_errors, note, run_reference
from harness.cli.options import run_command
from harness.cli.terminal.output import Format, emit

if TYPE_CHECKING:
    import pandas as pd

from harness.execution import compiled
from harness.store import results as results_db


@cli_errors
def compare_compile_cmd(
    model: ModelOpt = None,
    device: DeviceOpt = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            metavar="<run>",
            help="The eager run to compare with (default: the newest eager run of each configuration).",
            callback=run_reference,
        ),
    ] = None,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Eager against compiled for each configuration run both ways: median ms per phase, speed-up, and the
    compiled run's first step beyond its median (compilation)."""

    store = results_db.ResultsStore(db, readonly=True)
    table = compiled.compile_table(store, model=model, device=device, baseline=baseline)
    notes = table.attrs.get("notes", [])
    unpaired = _unpaired_notes(store, table.attrs.get("unpaired", []))
    if table.empty:  # why it is empty, not how the rows it does not have are read
        given = " ".join(f"--{k} {v}" for k, v in (("model", model), ("device", device)) if v)
        if given and not len(store.runs(model=model, device=device)):
            notes = [store.unmatched(given)]
        else:
            run = f"harness run {model or 'tiny'} --device {device or 'cpu'}"
            notes = [
                "no configuration has both an eager and a compiled run without a profiler: run it twice, "
                f"e.g. `{run}` and `{run} --compile`"
            ]
        if format is Format.table:  # for people the lines alone; scripts get the empty table too
            for line in [*notes, *unpaired]:
                note(line)
            return
    if format is Format.table:
        table = _intervals_as_text(table)
    emit(
        table,
        format,
        title=f"eager vs torch.compile ({results_db.describe_url(store.url)})",
        notes=[*notes, *unpaired],
        wide=wide,
    )


def _unpaired_notes(store: results_db.ResultsStore, unpaired: list[list[dict]]) -> list[str]:
    """One line per configuration whose compiled runs no row holds: their ids, the configuration in short,
    and the `harness run` line of the eager run that would pair them (the compiled run's settings)."""
    lines = []
    configs = store.run_configs([group[-1]["run_id"] for group in unpaired])
    for group in unpaired:
        last = group[-1]
        ids = ", ".join(r["run_id"] for r in group)
        which = f"compiled run {ids} is" if len(group) == 1 else f"compiled runs {ids} are"
        tokens = f", {last['new_tokens']} new tokens" if last["mode"] == "generate" else ""
        short = (
            f"{last['model']} {last['mode']} {last['precision']}, batch {last['batch_size']}, "
            f"context {last['context_length']}{tokens}, {last['device']}"
        )
        config = configs.get(last["run_id"])  # None: gone since the table was read
        again = (
            run_command(replace(config, compile=False), last["device"])
            if config is not None
            else f"harness run {last['model']} --device {last['device']}"
        )
        lines.append(
            f"{which} not in the table ({short}): no eager run of its configuration to compare with; "
            f"`{again}` makes one"
        )
    return lines


def _intervals_as_text(table: pd.DataFrame) -> pd.DataFrame:
    """On screen each interval is one column (`0.80…1.35`), so a narrow terminal keeps both bounds or
    neither; csv and json keep the bounds as numbers."""
    out = table.copy()
    low, high = out.pop("speed-up CI low"), out.pop("speed-up CI high")
    text = [f"{a:.2f}…{b:.2f}" if a == a and b == b else "—" for a, b in zip(low, high, strict=True)]
    out.insert(out.columns.get_loc("speed-up") + 1, "speed-up 95% CI", text)
    priority = list(table.attrs.get("priority", []))
    out.attrs["priority"] = [
        "speed-up 95% CI" if c == "speed-up CI low" else c for c in priority if c != "speed-up CI high"
    ]
    return out


def register(app: typer.Typer) -> None:
    app.command("compare-compile")(compare_compile_cmd)
