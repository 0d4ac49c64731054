"""`harness roofline`: the analytic roofline of one configuration, against datasheet or measured roofs.

Puts together workloads.roofline (FLOPs and bytes per sub-block), harness.roofs (the device's roofs) and
analysis.roofline (the table). Per-block times of a stored run plug into the same table later
(analysis.roofline.roofline_table's `times`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from analysis.roofline import Roofs, model_flops, roofline_table
from harness.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class RooflineReport:
    model: str
    batch_size: int
    context_length: int
    precision: str
    mode: str
    attention: str
    costs: pd.DataFrame  # workloads.roofline.subblock_costs
    table: pd.DataFrame  # analysis.roofline.roofline_table against `used`
    roofs: list[Roofs] = field(default_factory=list)  # every roof found (datasheet, measured)
    used: Roofs | None = None  # the one the table is placed against: measured if asked for, else datasheet
    notes: list[str] = field(default_factory=list)

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
        """Per pass: model (matmul) FLOPs, all FLOPs, bytes, and the least time the roofs allow."""
        grouped = self.table.groupby("pass", sort=False)
        out = grouped[["flops", "bytes"]].sum().reset_index().rename(columns={"pass": "phase"})
        out.insert(1, "model flops", out["phase"].map(model_flops(self.costs)).astype("int64"))
        out["roofline time (ns)"] = grouped["roofline time (ns)"].sum(min_count=1).to_numpy()
        return out


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
    import workloads
    from harness.devices import device_name, resolve_device
    from harness.roofs import measure_roofs, table_roofs
    from workloads.roofline import subblock_costs

    if model not in workloads.MODEL_NAMES:
        raise UsageError(f"unknown model {model!r}; known models: {', '.join(workloads.MODEL_NAMES)}")
    spec = workloads.get_spec(model)
    seq = context_length or spec.context_length
    for name, value in (("batch size", batch_size), ("context length", seq)):
        if value <= 0:
            raise UsageError(f"{name} must be a positive number, got {value}")
    if spec.family == "gpt2" and seq > spec.context_length:
        raise UsageError(
            f"{model} has learned positions for {spec.context_length} tokens; --context-length {seq} is more"
        )
    try:
        costs = subblock_costs(spec.with_overrides(context_length=seq), batch_size, seq, precision, mode,
                               attention=attention)  # fmt: skip
    except ValueError as e:
        raise UsageError(str(e)) from None
    report = RooflineReport(model, batch_size, seq, precision, mode, attention, costs, costs)
    if gpu:
        named = table_roofs(gpu, precision)
        if named is None:
            raise UsageError(
                f"no datasheet roofs for GPU {gpu!r}; known: A100, H100, H200, L40S, RTX 4090, …"
            )
        report.roofs.append(named)
    dev = resolve_device(device) if device != "auto" or measure or not gpu else None
    if dev is not None and dev.type == "cuda" and not gpu:
        own = table_roofs(device_name(dev), precision)
        if own is not None:
            report.roofs.append(own)
        else:
            report.notes.append(f"no datasheet roofs for {device_name(dev)}: pass --measure")
    if dev is not None and measure:
        report.roofs.append(measure_roofs(dev, precision))
        if dev.type == "cpu" and precision != "fp32":
            report.notes.append("on a CPU the compute roof is measured with an fp32 matmul")
    report.used = report.roofs[-1] if report.roofs else None
    if report.used is None:
        where = device_name(dev) if dev is not None else device
        report.notes.append(
            f"no roofs for {where} (the datasheet table has GPUs only): pass --measure to measure this "
            "device, or --gpu NAME for a GPU's datasheet roofs"
        )
    report.table = roofline_table(costs, None, report.used)
    return report
