"""Rules that read the copies between host and device in the steps: host-to-device copies from pageable
memory, and device-to-host copies every step. The memory kinds are CUPTI's, as the export records them
(`srcKind`, `dstKind`: nsys's ENUM_CUDA_MEM_KIND has Pageable 0, Pinned 1, Device 2; the trace model counts
from 1, analysis.readers.nsys); a Kineto trace names them (`Memcpy HtoD (Pageable -> Device)`)."""

from __future__ import annotations

import pandas as pd

from analysis.advice.base import Finding, Seen
from analysis.advice.where import ms
from analysis.readers.global_ids import PROCESS_MASK
from analysis.readers.kineto_build import COPY_KINDS, MEMORY_KINDS

HTOD, DTOH = COPY_KINDS["HtoD"], COPY_KINDS["DtoH"]
PAGEABLE = MEMORY_KINDS["Pageable"]
SCALAR_BYTES = 64  # a device-to-host copy this small is a scalar read (.item()): host-sync's, not a data copy


def _step_copies(seen: Seen) -> pd.DataFrame:
    """The copies in the measured steps with their calls' host time: start, end, bytes, copy_kind,
    src_kind, dst_kind, pid, call (ns; 0 where the call is not in the capture)."""
    if not seen.trace.has("memcpy") or seen.steps.empty:
        return pd.DataFrame()
    m = seen.trace.frame(
        "memcpy",
        ["start", "end", "bytes", "copy_kind", "src_kind", "dst_kind", "correlation_id", "global_pid"],
    )
    m = m.assign(pid=m["global_pid"].to_numpy() & PROCESS_MASK)
    cs = seen.calls
    if len(cs):
        calls = cs.assign(call=cs["end"] - cs["start"], call_start=cs["start"])
        m = m.merge(
            calls[["pid", "correlation_id", "call", "call_start"]], on=["pid", "correlation_id"], how="left"
        )
    else:
        m = m.assign(call=0, call_start=m["start"])
    m["call"] = m["call"].fillna(0).astype("int64")
    m["call_start"] = m["call_start"].fillna(m["start"]).astype("int64")
    return m[seen.in_steps(m["call_start"].to_numpy(), m["pid"].to_numpy())]


def _copy_finding(seen: Seen, rule: str, copies: pd.DataFrame, what: str, fix: str) -> list[Finding]:
    if copies.empty or len(copies) < seen.th.copies_per_step * len(seen.steps):
        return []
    gpu = (copies["end"] - copies["start"]).to_numpy()
    stake = int(pd.Series(gpu).combine(pd.Series(copies["call"].to_numpy()), max).sum())
    sizes = copies["bytes"].to_numpy()
    evidence = (
        f"{len(copies):,} {what} in {len(seen.steps)} steps ({seen.per_step(len(copies)):.1f} a step, "
        f"{sizes.sum() / 1e6:,.3f} MB, largest {sizes.max() / 1e6:,.3f} MB): {ms(gpu.sum())} on the GPU, the "
        f"host in their calls {ms(copies['call'].sum())}"
    )
    data = {
        "copies": len(copies),
        "per step": seen.per_step(len(copies)),
        "bytes": int(sizes.sum()),
        "largest (bytes)": int(sizes.max()),
        "GPU time (ns)": int(gpu.sum()),
        "host time in the calls (ns)": int(copies["call"].sum()),
        "steps": len(seen.steps),
    }
    where = seen.place(copies["call_start"].to_numpy(), gpu, copies["pid"].to_numpy())
    return [Finding(rule, stake, where, evidence, fix, data=data)]


def pageable_copy(seen: Seen) -> list[Finding]:
    """Host-to-device copies from pageable memory in the steps, at least `copies_per_step` a step: each is
    staged through a pinned buffer by the driver and blocks the host, so it cannot overlap the GPU's work."""
    m = _step_copies(seen)
    if m.empty:
        return []
    copies = m[(m["copy_kind"] == HTOD) & (m["src_kind"] == PAGEABLE)]
    fix = (
        "keep the batches in pinned memory (DataLoader(pin_memory=True), tensor.pin_memory()) and copy them "
        "with .to(device, non_blocking=True), ahead of the step that needs them"
    )
    return _copy_finding(seen, "pageable-copy", copies, "host-to-device copies from pageable memory", fix)


def d2h_copy(seen: Seen) -> list[Finding]:
    """Device-to-host copies of more than a scalar in the steps, at least `copies_per_step` a step: each
    waits for the kernels queued before it (a scalar's, `.item()`, is host-sync's)."""
    m = _step_copies(seen)
    if m.empty:
        return []
    copies = m[(m["copy_kind"] == DTOH) & (m["bytes"] > SCALAR_BYTES)]
    fix = (
        "keep the data on the device (compute the metric there), or copy it every N steps, with "
        "non_blocking=True into pinned memory, and read it a step later"
    )
    return _copy_finding(seen, "d2h-copy", copies, "device-to-host copies", fix)
