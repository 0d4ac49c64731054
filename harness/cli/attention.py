"""`harness attention`: forward/backward time and peak memory of attention over head dim × seq len."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import DbOpt, FormatOpt, WideOpt, cli_errors, comma_list, err, positive_ints, warn
from harness.cli.options import Device, DeviceOpt, Precision, SeedOpt
from harness.cli.terminal.output import Format, emit
from harness.cli.terminal.progress import Progress
from harness.core import signals
from harness.core.devices import emulated_precision_note, resolve_device
from harness.core.errors import HarnessError
from harness.core.records import AttentionSweep
from harness.core.signals import sigterm_raises
from harness.experiments.attention import AttentionConfig, attention_table, run_attention_sweep, validate
from harness.store import results as results_db
from workloads.names import counted


class _NotStored(Exception):
    """The results database would not take a measured cell: the sweep stops, its cells are shown."""


@cli_errors
def attention_cmd(
    batch_size: Annotated[int, typer.Option("--batch", "--batch-size", "-b")] = 8,
    heads: Annotated[int, typer.Option("--heads", help="Attention heads; head dim is per head.")] = 1,
    head_dims: Annotated[str, typer.Option("--head-dims", help="Comma-separated.")] = "16,32,64,128",
    seq_lens: Annotated[str, typer.Option("--seq-lens", help="Comma-separated.")] = "128,256,512",
    precision: Annotated[
        Precision, typer.Option(help="dtype of q, k and v (the computation runs in it; no autocast).")
    ] = Precision.fp32,
    impl: Annotated[
        str,
        typer.Option(
            "--impl",
            help="Comma-separated: math (QKᵀ, softmax, ·V), sdpa (fused), compiled (torch.compile of math, "
            "compiled per cell: slow on a CPU).",
        ),
    ] = "math,sdpa",
    warmup: Annotated[int, typer.Option(help="Untimed forward+backward calls per cell.")] = 3,
    trials: Annotated[int, typer.Option(help="Timed forward+backward calls per cell.")] = 10,
    causal: Annotated[bool, typer.Option("--causal/--no-causal", help="Mask future positions.")] = True,
    device: DeviceOpt = Device.auto,
    seed: SeedOpt = 0,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Time one attention call, forward and backward, for every head dim × seq len; OOM cells are recorded."""

    config = AttentionConfig(
        batch_size=batch_size,
        num_heads=heads,
        head_dims=tuple(positive_ints("--head-dims", head_dims, "16,32,64,128")),
        seq_lens=tuple(positive_ints("--seq-lens", seq_lens, "128,256,512")),
        precision=precision.value,
        impls=tuple(dict.fromkeys(comma_list("--impl", impl))),
        warmup=warmup,
        trials=trials,
        causal=causal,
        device=device.value,
        seed=seed,
    )
    validate(config)
    store = results_db.ResultsStore(db)  # fail on a bad --db before the work, not after
    note = emulated_precision_note(resolve_device(config.device), [config.precision])
    if note:
        warn(note)
    total = len(config.impls) * len(config.head_dims) * len(config.seq_lens)
    sweeps: list[AttentionSweep] = []  # the sweep, once a cell finished: what is shown if it is cut short
    stopped: int | None = None
    refused: list[str] = []  # why the database would not take the last cell: the sweep stops there
    with sigterm_raises(), Progress("attention", total, unit="cells") as bar:
        done = 0

        def show(cell) -> None:  # type: ignore[no-untyped-def]
            bar.stage(f"{cell.impl} head_dim {cell.head_dim} seq_len {cell.seq_len}")

        def save(sweep, cell) -> None:  # type: ignore[no-untyped-def]
            nonlocal done
            sweeps[:] = [sweep]  # measured: shown, whatever the database does with it
            try:
                with signals.deferred():  # a finished cell is stored whole
                    store.save_attention(sweep, cell)
            except HarnessError as e:
                refused.append(str(e))
                raise _NotStored from None
            done += 1
            bar.advance(done)

        try:
            sweeps[:] = [run_attention_sweep(config, on_cell=save, progress=show)]
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the cells measured are kept and shown
            stopped = signals.signal_of(e)
        except _NotStored:
            pass
    if stopped is not None and not sweeps:
        err(f"attention interrupted by {signals.name(stopped)} before a cell finished; nothing stored")
        raise typer.Exit(signals.exit_code(stopped))
    sweep = sweeps[0]
    failed = [c for c in sweep.cells if c.status == "error"]
    for c in failed:
        warn(f"{c.impl} head_dim {c.head_dim} seq_len {c.seq_len}: {c.error}")
    oom = [c for c in sweep.cells if c.status == "oom"]
    notes = [
        f"batch {config.batch_size}, {counted(config.num_heads, 'head')}, {config.precision}, "
        f"{'causal' if config.causal else 'no mask'}; {counted(config.trials, 'timed call')} after "
        f"{config.warmup} "
        "warm-up per cell",
        f"peak memory: {sweep.memory_source}",
    ]
    if oom:
        first = oom[0]
        notes.append(
            f"{len(oom)} of {len(sweep.cells)} cells ran out of memory (OOM), the first ({first.impl}, "
            f"head_dim {first.head_dim}, seq_len {first.seq_len}) with: {first.error}"
        )
    emit(
        attention_table(sweep),
        format,
        title=f"attention {sweep.sweep_id} on {sweep.device_name}",
        notes=notes,
        wide=wide,
    )
    if refused:
        n, last = len(sweep.cells), sweep.cells[-1]
        before = {1: "", 2: "the cell before it is stored, "}.get(n, f"the {n - 1} before it are stored, ")
        err(
            f"attention {sweep.sweep_id} stopped after {n} of {total} cells: the results database would not "
            f"take the last ({last.impl} head_dim {last.head_dim} seq_len {last.seq_len}): {refused[0]}; "
            f"{before}every cell measured is shown"
        )
        raise typer.Exit(1)
    if stopped is not None:
        n = len(sweep.cells)
        err(
            f"attention {sweep.sweep_id} interrupted by {signals.name(stopped)} after {n} of {total} cells; "
            + ("the cell measured is stored" if n == 1 else f"the {n} measured are stored")
        )
        raise typer.Exit(signals.exit_code(stopped))
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("attention")(attention_cmd)
