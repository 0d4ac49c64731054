"""`harness roofline [RUN]`: the roofline of one configuration, against datasheet or measured roofs.

Puts together workloads.roofline (FLOPs and bytes per sub-block), the device's roofs (below) and
analysis.runs.roofline (the table). Given a stored run, the configuration is the run's and its measured times
go in: per sub-block from its per-block times (--nvtx-detail: harness blocks), per phase from its step
timers, and MFU per phase and for the step.

A device's roofs come from the datasheet table (workloads.peak) or are measured on the device itself.

Measured: the best of a few timed runs of a large matmul (compute) and a large device-to-device copy
(bandwidth: each byte is read once and written once, so a copy of N bytes moves 2·N). On a GPU the matmul is
in the run's precision (bf16 by default); on a CPU it is fp32 (bf16 there is often emulated) and sizes are
small enough for a laptop. A measured roof is what this device reaches with PyTorch's own kernels, usually
below the datasheet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.advice.base import OptimizerRoof
from analysis.dashboard import roofline as roofline_view
from analysis.dashboard.panel import RunRoofline
from analysis.dashboard.runs import block_runs
from analysis.outputs import write_text
from analysis.runs.roofline import Roofs, above_roof, mfu_table, phase_table, roofline_table
from analysis.views.blocks import subblock_times
from harness.core.bounds import INT64_MAX
from harness.core.devices import device_name, resolve_device, synchronize
from harness.core.errors import HarnessError, UsageError
from harness.core.records import RunConfig, stored_phases
from harness.execution.checks import check_positions, check_positive, known_model
from harness.experiments.run_tables import block_records_of, unfinished_note, untrusted_blocks
from harness.store.blocks import resolve

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import ResultsStore
    from harness.store.schema import Run

import workloads
from workloads import peak
from workloads import roofline as costs_of
from workloads.names import counted


@dataclass
class RooflineReport:
    model: str
    batch_size: int
    context_length: int
    precision: str
    mode: str
    attention: str
    costs: pd.DataFrame  # workloads.roofline.subblock_costs
    table: pd.DataFrame  # analysis.runs.roofline.roofline_table against `used`
    roofs: list[Roofs] = field(default_factory=list)  # every roof found (datasheet, measured)
    used: Roofs | None = None  # the one the table is placed against: measured if asked for, else datasheet
    notes: list[str] = field(default_factory=list)
    run_id: str | None = None  # the stored run whose configuration and times these are
    device_name: str = ""
    source: str | None = None  # where the sub-block times come from (workloads.names BLOCK_*), None: none
    phase_ns: dict[str, float] = field(default_factory=dict)  # each phase's mean over the measured steps
    warning: str | None = None  # why the sub-block times cannot be trusted (a degraded run's capture)
    new_tokens: int | None = None  # generate: the tokens decoded after the prompt (context_length)
    unfinished: str | None = None  # the status of a run that did not finish (interrupted, oom, error)
    elsewhere: str | None = None  # the run's own device, where the roofs used are another GPU's (--gpu)

    def roofs_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "roofs": r.label,
                    "peak TFLOP/s": r.peak_flops / 1e12 if r.peak_flops else None,
                    "bandwidth GB/s": r.bandwidth / 1e9 if r.bandwidth else None,
                    "ridge (FLOP/byte)": r.ridge,
                    "used": r is self.used,
                }
                for r in self.roofs
            ],
            columns=["roofs", "peak TFLOP/s", "bandwidth GB/s", "ridge (FLOP/byte)", "used"],
        )

    def phases_frame(self) -> pd.DataFrame:
        """Per phase: model (matmul) FLOPs, all FLOPs, bytes, the least time the roofs allow and, for a run,
        its measured time placed on the roofs (analysis.runs.roofline.phase_table)."""
        return phase_table(self.costs, self.phase_ns, self.used)

    def above_roof(self) -> list[str]:
        """The measured points above their roof, each said with why (analysis.runs.roofline.above_roof)."""
        return above_roof(self.table, self.used, ran_on=self.elsewhere) + above_roof(
            self.phases_frame(), self.used, "phase", ran_on=self.elsewhere
        )

    def mfu_frame(self) -> pd.DataFrame:
        """MFU per phase and for the step (a run's phase times against the peak of the roofs used)."""
        return mfu_table(self.costs, self.phase_ns, self.used.peak_flops if self.used else None)

    @property
    def title(self) -> str:
        what = f"run {self.run_id}: " if self.run_id else ""
        shape = f"context {self.context_length}"
        if self.new_tokens is not None:
            shape = f"prompt {self.context_length} + {counted(self.new_tokens, 'token')}"
        stopped = f" ({self.unfinished}: did not finish)" if self.unfinished else ""
        return (
            f"{what}{self.model} {self.mode}, batch {self.batch_size} × {shape}, {self.precision}, "
            f"{self.attention} attention{stopped}"
        )


# (matmul side n, copy bytes): n×n×n matmul does 2·n³ FLOPs
GPU_SIZES = (8192, 1 << 30)
CPU_SIZES = (1024, 64 << 20)
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def table_roofs(name: str, precision: str) -> Roofs | None:
    """The datasheet roofs of the GPU called `name` (as torch names it, or a short name like "H100"); None
    when the table knows neither its peak nor its bandwidth."""
    flops, bandwidth = peak.peak_flops(name, precision), peak.peak_bandwidth(name)
    if flops is None and bandwidth is None:
        return None
    return Roofs(f"{name}, datasheet, {precision}", flops, bandwidth)


def _best_seconds(fn: Any, device: Any, repeats: int) -> float:
    """The fastest of `repeats` timed calls, after one untimed call (allocation, kernel selection)."""
    fn()
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        synchronize(device)
        best = min(best, (time.perf_counter_ns() - t0) / 1e9)
    return best


def measure_roofs(
    device: Any,
    precision: str = "bf16",
    *,
    matmul_n: int | None = None,
    copy_bytes: int | None = None,
    repeats: int = 5,
) -> Roofs:
    """Measure peak FLOP/s (an n×n matmul) and bandwidth (a copy) on a torch `device`.

    Defaults: n = 8192 and 1 GiB on a GPU; n = 1024 and 64 MiB on a CPU, where the matmul is fp32 whatever
    `precision` says.
    """
    import torch

    if device.type == "cpu":
        precision = "fp32"
    n, size = GPU_SIZES if device.type == "cuda" else CPU_SIZES
    n, size = matmul_n or n, copy_bytes or size
    matmul_s = _time_matmul(device, getattr(torch, DTYPES[precision]), n, repeats)
    copy_s, moved = _time_copy(device, size, repeats)
    label = f"{device_name(device)}, measured: {precision} matmul {n}×{n}, copy {moved // 2 >> 20} MiB"
    return Roofs(label, 2 * n**3 / matmul_s, moved / copy_s)


def _time_matmul(device: Any, dtype: Any, n: int, repeats: int) -> float:
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return _best_seconds(lambda: torch.mm(a, b, out=out), device, repeats)


def _time_copy(device: Any, size: int, repeats: int) -> tuple[float, int]:
    """Seconds for the best copy of `size` bytes, and the bytes it moves (read once, written once)."""
    import torch

    src = torch.ones(size // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return _best_seconds(lambda: dst.copy_(src), device, repeats), 2 * src.numel() * src.element_size()


def analytic_report(
    model: str,
    *,
    batch_size: int = 8,
    context_length: int | None = None,
    precision: str = "fp32",
    mode: str = "train",
    attention: str = "math",
    device: str = "auto",
    gpu: str | None = None,
    measure: bool = False,
) -> RooflineReport:
    """FLOPs, bytes and intensity of every sub-block of `model`, placed against the roofs of `gpu` (a name
    from the datasheet table), of `device` (its datasheet entry), or measured on `device` (`measure`)."""
    spec = known_model(model)
    seq = spec.context_length if context_length is None else context_length
    check_positive({"--batch-size": batch_size, "--context-length": seq})
    check_positions(model, spec, seq)
    try:
        costs = costs_of.subblock_costs(spec.with_overrides(context_length=seq), batch_size, seq, precision,
                                        mode, attention=attention)  # fmt: skip
    except ValueError as e:
        raise UsageError(str(e)) from None
    _check_counts(costs, f"batch {batch_size} × context {seq}")
    report = RooflineReport(model, batch_size, seq, precision, mode, attention, costs, costs)
    dev = resolve_device(device) if device != "auto" or measure or not gpu else None
    name = device_name(dev) if dev is not None else device
    _find_roofs(
        report, dev.type if dev is not None else None, name, gpu=gpu, measure_on=dev if measure else None
    )
    report.table = roofline_table(costs, None, report.used)
    return report


def _check_counts(costs: pd.DataFrame, size: str) -> None:
    """UsageError where the step's FLOPs or bytes pass what the tables hold (int64): summed per phase there,
    they would wrap round to negative counts shown as data."""
    for column in ("flops", "bytes"):
        if sum(int(x) for x in costs[column]) > INT64_MAX:
            raise UsageError(
                f"{size}: a step's {column} pass 2^63, more than the table can count; give smaller sizes"
            )


def _find_roofs(
    report: RooflineReport, kind: str | None, name: str, *, gpu: str | None, measure_on: Any = None
) -> None:
    """The roofs of GPU `gpu` (datasheet), else of the device of type `kind` called `name` (its datasheet
    entry, for a GPU), and those measured on torch device `measure_on`; the last found is the one used."""
    precision = report.precision
    if gpu is not None:  # an empty --gpu "" names no GPU: refused, never taken for none given
        known = peak.datasheet_name(gpu)
        named = table_roofs(known, precision) if known is not None else None
        if named is None:
            raise UsageError(f"no datasheet roofs for GPU {gpu!r}; known: {', '.join(peak.DATASHEET_NAMES)}")
        report.roofs.append(named)
    if kind == "cuda" and not gpu:
        own = table_roofs(name, precision)
        if own is not None:
            report.roofs.append(own)
        else:
            report.notes.append(f"no datasheet roofs for {name}: pass --measure")
    if measure_on is not None:
        report.roofs.append(measure_roofs(measure_on, precision))
        if measure_on.type == "cpu" and precision != "fp32":
            report.notes.append("on a CPU the compute roof is measured with an fp32 matmul")
    report.used = report.roofs[-1] if report.roofs else None
    if report.used is not None and not report.used.peak_flops:  # a V100 or T4 in bf16
        report.notes.append(
            f"{report.used.label}: the datasheet has no {precision} peak for it, so there is no compute "
            "roof: no bound, attainable FLOP/s, share of the roof or MFU"
        )
    if report.used is None:
        report.notes.append(
            f"no roofs for {name} (the datasheet table has GPUs only): pass --measure to measure this "
            "device, or --gpu NAME for a GPU's datasheet roofs"
        )


def _other_device(report: RooflineReport, kind: str | None, name: str, gpu: str) -> str | None:
    """Where a run's times are placed against --gpu's datasheet roofs and the run ran elsewhere (a CPU,
    another GPU): what its shares of the roofs and MFU then say. None when the run's GPU has those roofs, or
    when measured roofs (--measure) are the ones used."""
    gpu = peak.datasheet_name(gpu) or gpu
    named = table_roofs(gpu, report.precision)
    if named is None or report.used != named:
        return None
    own = table_roofs(name, report.precision) if kind == "cuda" else None
    if own is not None and (own.peak_flops, own.bandwidth) == (named.peak_flops, named.bandwidth):
        return None
    where = f"{name} (a {kind.upper() if kind else 'device'})" if kind != "cuda" else name
    return (
        f"run {report.run_id} ran on {where}, not on {gpu}: its times are placed against {gpu}'s datasheet "
        f"roofs, so the shares of the roof and MFU say how far it is from {gpu}'s peak, not how well it used "
        "its own device"
    )


def _measuring_device(run: Run) -> Any:
    """This machine's device of the kind `run` ran on, for --measure. Without one, a UsageError of its own:
    resolve_device's names --device, which goes without RUN."""
    kind = run.device if run.device in ("cpu", "cuda", "mps") else "auto"
    try:
        return resolve_device(kind)
    except UsageError:
        raise UsageError(
            f"run {run.id} ran on {kind}: --measure measures this machine's {kind} device, and this machine "
            "has none; without --measure it is placed against its GPU's datasheet roofs (or --gpu NAME's)"
        ) from None


def run_report(
    store: ResultsStore, ref: str, *, gpu: str | None = None, measure: bool = False
) -> RooflineReport:
    """The roofline of stored run `ref` (an id, a unique prefix or `latest`): its configuration, its
    per-block times per sub-block (where it has them, else none), its phase times per phase and MFU.

    Roofs: `gpu`'s datasheet; else the run's GPU's datasheet; with `measure`, measured on this machine's
    device of the run's kind (a CPU run's only roofs)."""
    run = resolve(store, ref, nvtx_detail=False)
    if run.mode not in costs_of.MODES:
        raise UsageError(
            f"run {run.id} is a {run.mode} run; the roofline takes {', '.join(costs_of.MODES)} runs"
        )
    if run.model not in workloads.MODEL_NAMES:
        raise HarnessError(f"run {run.id} is of model {run.model!r}, which this harness does not know")
    info = run.model_info or {}
    spec = workloads.get_spec(run.model).with_overrides(
        vocab_size=info.get("vocab_size"), context_length=run.context_length
    )
    seq = run.context_length or spec.context_length
    new_tokens = (run.config or {}).get("new_tokens") or RunConfig.new_tokens  # generate: prompt, then these
    costs = costs_of.subblock_costs(
        spec, run.batch_size, seq, run.precision, run.mode, attention=run.attention, new_tokens=new_tokens
    )
    report = RooflineReport(run.model, run.batch_size, seq, run.precision, run.mode, run.attention, costs,
                            costs, run_id=run.id, device_name=run.device_name,
                            new_tokens=new_tokens if run.mode == "generate" else None)  # fmt: skip
    measured = [t for t in run.step_timings if not t.warmup]
    steps = {t.step for t in measured}
    if not steps:
        raise HarnessError(f"run {run.id} has no measured steps (status {run.status})")
    if (unfinished := unfinished_note(run, len(steps), "times")) is not None:
        report.unfinished = run.status
        report.notes.append(unfinished)
    for phase in stored_phases(run):  # across ranks: the all-reduce too
        values = [t.duration_ns for t in measured if t.phase == phase]
        if values:
            report.phase_ns[phase] = sum(values) / len(values)
    found = block_records_of(store, run)
    times = None
    if found is not None:
        report.source = found.source
        report.warning = untrusted_blocks(run, found.source)
        times = subblock_times(found.records, found.steps)
        if "optimizer" in report.phase_ns:  # the optimizer phase is the AdamW update, nothing else
            times.loc[len(times)] = ("optimizer", "optimizer", report.phase_ns["optimizer"])
        first = " of its first rank" if (run.world_size or 1) > 1 else ""  # as harness blocks has them
        report.notes.append(
            f"sub-block times: {report.source}{first} (harness blocks {run.id}); {untimed(costs, times)}"
        )
    else:
        report.notes.append(
            f"run {run.id} has no per-block times (made without --nvtx-detail): times per phase only"
        )
    here = _measuring_device(run) if measure else None
    _find_roofs(report, run.device, run.device_name or run.device, gpu=gpu, measure_on=here)
    if measure:
        report.notes.append("roofs measured on this machine now, not during the run")
    if gpu and (elsewhere := _other_device(report, run.device, run.device_name or run.device, gpu)):
        report.notes.append(elsewhere)
        report.elsewhere = run.device_name or run.device
    report.table = roofline_table(costs, times, report.used)
    return report


def untimed(costs: pd.DataFrame, times: pd.DataFrame) -> str:
    """The sub-block rows of `costs` that `times` (sub-block, pass, time_ns) has no time for, named per pass
    (`every backward row` where the pass has none): what this model has, not a fixed list."""
    timed = set(zip(times["sub-block"], times["pass"], strict=True))
    parts = []
    for phase, rows in costs.groupby("pass", sort=False):
        names = [b for b in rows["sub-block"] if (b, phase) not in timed]
        if len(names) == len(rows):
            parts.append(f"every {phase} row")
        elif names:
            parts.append(f"{', '.join(names)} ({phase})")
    return f"without a time: {'; '.join(parts)}" if parts else "every sub-block timed"


def dashboard_roofline(store: ResultsStore, runs: pd.DataFrame, blocks: pd.DataFrame) -> RunRoofline | None:
    """The dashboard's roofline: the newest of the runs the blocks panel draws (block_runs: per
    configuration, one without a profiler preferred), against its GPU's datasheet roofs (none for a CPU:
    measuring here would not be the run's machine). None when no run has block times; a run that cannot be
    placed is left out."""
    ok = block_runs(runs, blocks)
    ok = ok[ok["mode"].isin(costs_of.MODES)]
    for run_id in reversed(list(ok["run_id"])):
        try:
            report = run_report(store, run_id)
        except HarnessError:
            continue
        notes = [n for n in report.notes if not n.startswith("no roofs for")]
        if report.used is None:
            where = report.device_name or "this device"
            notes.append(
                f"no roofs for {where} (datasheet GPUs only): points only; "
                f"`harness roofline {run_id} --measure --html FILE` measures this machine's"
            )
        return RunRoofline(run_id, report.table, report.used, report.title, notes + report.above_roof())
    return None


def write_page(report: RooflineReport, out: Path) -> None:
    """The log-log roofline of `report`, a page of its own, its folder made if missing (OSError as raised)."""
    against = f" · against {report.used.label}" if report.used else ""
    figure = roofline_view.roofline_figure(report.table, report.used, report.title + against)
    write_text(out, figure.to_html(include_plotlyjs=True))


def optimizer_roof(store: ResultsStore, run_id: str) -> OptimizerRoof | None:
    """The optimizer phase of stored run `run_id` against its memory roof (its GPU's datasheet roofs, as
    `harness roofline RUN` places it), for the advice; None where the run has no optimizer phase or its
    device no datasheet roofs (a CPU)."""
    try:
        report = run_report(store, run_id)
    except HarnessError:
        return None
    if report.used is None or not report.used.bandwidth or "optimizer" not in report.phase_ns:
        return None
    table = phase_table(report.costs, report.phase_ns, report.used)
    row = table[table["phase"] == "optimizer"]
    if row.empty or row["of roof (%)"].isna().all():
        return None
    r = row.iloc[0]
    return OptimizerRoof(
        of_roof_pct=float(r["of roof (%)"]),
        time_ns=float(r["time (ns)"]),
        roofline_ns=float(r["roofline time (ns)"]),
        bytes=float(r["bytes"]),
        achieved_gbs=float(r["achieved GB/s"]),
        roof=report.used.label,
    )
