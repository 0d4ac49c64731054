"""Kernels launched inside the NVTX ranges of one name (`harness kernels --range NAME`, the doctor's
self-test): the name as `harness nvtx` prints it, whichever way it prints it (DOMAIN:NAME, or PyTorch's
ranges grouped by operator, `aten::addmm` for `aten::addmm, seq = 7, op_id = 12`), or as recorded.

A kernel counts for a range when its launch call starts inside the range in the kernel's process (any
thread). A Kineto trace's GPU copies of its ranges (`gpu_user_annotation`, domain `GPU`) lie on the GPU's
timeline, where no launch call is: they are refused, naming the range to give instead. Light at import,
as every table module: the function imports what it computes with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.errors import ExportError

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.trace import Trace

GPU_DOMAIN = "GPU"  # analysis.readers.kineto: a Kineto trace's gpu_user_annotation ranges


def kernels_in_ranges(
    trace: Trace, range_name: str, *, names: str = "demangled", extra: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Kernels (name_id, duration, extra fields) launched while a range named `range_name` was open in
    their process (any thread). Where none was, a note says so (the table is empty, not wrong)."""
    from analysis.joins.nvtx_credits import _containing, _require
    from analysis.joins.nvtx_ranges import all_ranges, grouped_tags, tagged

    _require(trace)
    ranges = all_ranges(trace)
    printed = tagged(ranges)
    picked = (ranges["name"] == range_name) | (printed == range_name)
    if not picked.any():  # as `harness nvtx` groups PyTorch's ranges: by operator, or by operator and sizes
        for by in ("op", "shape"):
            grouped, _ = grouped_tags(ranges, by)
            if (picked := (grouped.astype(object) == range_name)).any():
                break
    if not picked.any():
        raise ExportError(f"no NVTX range named {range_name!r} in {trace.path}")
    chosen = ranges[picked.to_numpy()].reset_index(drop=True)
    if not trace.format.startswith("nsys") and (chosen["domain"].astype(object) == GPU_DOMAIN).all():
        cpu = chosen["name"].iloc[0]
        on_cpu = ((ranges["name"] == cpu) & (ranges["domain"].astype(object) != GPU_DOMAIN)).any()
        raise ExportError(
            f"{range_name!r} is a range on the GPU's timeline (the trace's gpu_user_annotation), where no "
            "kernel is launched: "
            + (
                f"name the range on the CPU, --range {cpu!r}"
                if on_cpu
                else "the trace has no such range on the CPU"
            )
        )
    from analysis.joins.runtime import kernel_launches

    launches = kernel_launches(trace, names=names, extra=extra)
    hit, _ = _containing(chosen, launches, by_thread=False, point=True)
    out = launches[hit >= 0].reset_index(drop=True)
    out.attrs["notes"] = list(launches.attrs.get("notes", []))
    if out.empty:
        n = len(chosen)
        out.attrs["notes"].append(
            f"the NVTX range {range_name!r} launched no kernel ({n:,} range{'s' if n != 1 else ''} of that "
            "name, no kernel launch call inside)"
        )
    return out
