"""`harness blocks RUN`: the per-block breakdown of a stored --nvtx-detail run, from whatever source it has.

A run without a profiler carries its synchronised block timers (harness.execution.block_timers), stored with
it. A run under a profiler gets its block times from its trace when it is examined (analysis.front.examine),
stored the same way; an older run whose trace is still there is read from the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from analysis.errors import ExportError
from analysis.front.examine import blocks_of_file
from analysis.views.blocks import block_table
from harness.core.errors import HarnessError
from harness.core.nvtx_ranges import block_names
from harness.core.records import phases_for
from harness.store.blocks import BlockRecords, resolve, stored_blocks, trace_of
from workloads.names import BLOCK_TIMERS

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import ResultsStore
    from harness.store.schema import Run


@dataclass
class BlockReport:
    run: Run  # the stored run the block times are of
    source: str
    steps: int  # measured steps the block times cover
    records: pd.DataFrame  # analysis.views.blocks.RECORD_COLUMNS
    phase_ns: dict[str, float]  # each phase's mean over those steps
    table: pd.DataFrame  # analysis.views.blocks.block_table
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        r = self.run
        return (
            f"blocks of run {r.id} ({r.model} {r.mode}, {r.attention} attention): "
            f"mean per step over {self.steps} steps, source {self.source}"
        )


def block_records_of(store: ResultsStore, run: Run) -> BlockRecords | None:
    """A run's block records: stored, else read from its trace; None for a run made without --nvtx-detail."""
    stored = stored_blocks(store, run)
    if stored is not None:
        records = stored.records
    else:
        if not (run.config or {}).get("nvtx_detail"):
            return None
        path = trace_of(run)
        if path is None:
            why = " (--compile runs are not timed per block: hooks would break the compiled graph)"
            raise HarnessError(
                f"run {run.id} has no per-block times stored and no trace to read them from"
                + (why if run.compile else "")
            )
        try:
            records, source = blocks_of_file(path, block_names(), phases_for(run.mode), run.warmup)
        except ExportError as e:
            raise HarnessError(f"cannot read per-block times from {path}: {e}") from None
        stored = BlockRecords(records, source, int(records["step"].nunique()), path)
    if records.empty:
        raise HarnessError(f"run {run.id} has no per-block times (status {run.status})")
    return stored


def block_report(store: ResultsStore, ref: str, *, by_layer: bool = False) -> BlockReport:
    """The run's per-block table (analysis.views.blocks.block_table) with its source."""
    run = resolve(store, ref)
    found = block_records_of(store, run)
    if found is None:
        raise HarnessError(
            f"run {run.id} was made without --nvtx-detail: it has no per-block times; "
            f"`harness run {run.model} --nvtx-detail` makes a run that has",
            exit_code=2,
        )
    records, source, steps = found.records, found.source, found.steps
    notes = [f"read from {found.trace}"] if found.trace else []
    covered = {int(s) for s in records["step"]}
    measured = [t for t in run.step_timings if not t.warmup and t.step in covered]
    measured = measured or [t for t in run.step_timings if not t.warmup]
    phase_ns: dict[str, float] = {}
    for phase in phases_for(run.mode):
        values = [t.duration_ns for t in measured if t.phase == phase]
        if values:
            phase_ns[phase] = sum(values) / len(values)
    if not phase_ns:
        raise HarnessError(f"run {run.id} has no measured steps")
    table = block_table(records, phase_ns, steps=steps, by_layer=by_layer)
    notes += _notes(run, source, set(records["block"]))
    return BlockReport(run, source, steps, records, phase_ns, table, notes)


def _notes(run: Run, source: str, blocks: set[str]) -> list[str]:
    notes = [f"source: {source}" + {
        BLOCK_TIMERS: " (the device synchronised around every block in the run's process)",
        "torch-trace": " (record_function ranges of the torch.profiler trace, CPU time)",
        "nvtx": " (NVTX ranges of the nsys export, CPU time)",
        "nvtx-gpu": " (GPU time of the kernels launched inside each range)",
    }.get(source, "")]  # fmt: skip
    if "sdpa" in blocks:
        notes.append(
            "attention is the fused sdpa: --attention math times qk_scores, softmax and attn_v apart"
        )
    if run.mode == "train" and source != BLOCK_TIMERS:
        notes.append("block ranges open in forward only: backward and optimizer are in `outside blocks`")
    elif run.mode == "train":
        notes.append("backward per block: autograd hooks; the embedding's backward is in `outside blocks`")
    return notes
