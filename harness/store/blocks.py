"""`harness blocks RUN`: the per-block breakdown of a stored --nvtx-detail run, from whatever source it has.

A run without a profiler carries its synchronised block timers (harness.execution.block_timers), stored with
it. A run under a profiler gets its block times from its trace (analysis.views.blocks.block_records) when it
is analysed, stored the same way; an older run whose trace is still there is read from the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.errors import ExportError
from analysis.trace.opening import open_trace
from analysis.views.blocks import block_records, block_table
from harness.core.errors import HarnessError
from harness.core.records import LATEST, phases_for
from workloads.names import BLOCK_TIMERS

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.trace import Trace
    from harness.store.results import ResultsStore
    from harness.store.schema import Run

import workloads


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


def block_names() -> set[str]:
    """Every --nvtx-detail range name that is a block (the layers' layer_N aside)."""
    return set(workloads.DETAIL_RANGES.values()) | set(workloads.OUTER_RANGES.values())


def resolve(store: ResultsStore, ref: str, *, nvtx_detail: bool = True) -> Run:
    """A run by id (or unique prefix), or `latest`: the newest run (made with --nvtx-detail, if asked)."""
    if ref != LATEST:
        return store.get(ref)
    run = store.latest(nvtx_detail=nvtx_detail)
    if run is None:
        what = "run made with --nvtx-detail" if nvtx_detail else "run"
        raise HarnessError(
            f"no {what} in the results database; `harness run tiny --nvtx-detail` makes one", exit_code=2
        )
    return run


def trace_of(run: Run) -> Path | None:
    """The run's trace: the torch profiler's, else nsys's SQLite export (None: none, or no longer there)."""
    artifacts = run.artifacts or {}
    for path in (artifacts.get("trace"), artifacts.get("nsys_sqlite"), run.nsys_sqlite):
        if path and Path(path).is_file():
            return Path(path)
    return None


def from_trace(path: Path, mode: str, warmup: int) -> tuple[pd.DataFrame, str]:
    """Block records of a run's trace (and their source)."""
    try:
        with open_trace(path) as trace:
            return block_records(trace, block_names(), phases_for(mode), step_offset=warmup)
    except ExportError as e:
        raise HarnessError(f"cannot read per-block times from {path}: {e}") from None


def blocks_of(trace: Trace, config: Any) -> tuple[tuple[pd.DataFrame, str] | None, str | None]:
    """A profiled --nvtx-detail run's block times from its trace, opened already: (records and their source,
    to store with the run; or a note why there are none)."""
    if not config.nvtx_detail:
        return None, None
    try:
        records, source = block_records(
            trace, block_names(), phases_for(config.mode), step_offset=config.warmup
        )
    except ExportError as e:
        return None, f"cannot read per-block times from {trace.path}: {e}"
    if records.empty:
        return None, f"no --nvtx-detail ranges inside the measured steps of {trace.path}: no per-block times"
    return (records, source), None


def store_from_trace(store: ResultsStore, run_id: str, path: Path, config: Any) -> str | None:
    """After a profiled --nvtx-detail run: its block times from its trace, into the store. A note when there
    are none (the run is stored already; this only adds to it)."""
    if not config.nvtx_detail:
        return None
    try:
        records, source = from_trace(path, config.mode, config.warmup)
    except HarnessError as e:
        return str(e)
    if records.empty:
        return f"no --nvtx-detail ranges inside the measured steps of {path}: no per-block times"
    try:
        store.save_blocks(run_id, records, source)
    except HarnessError as e:
        return f"per-block times not stored: {e}"
    return None


@dataclass
class BlockRecords:
    records: pd.DataFrame  # analysis.views.blocks.RECORD_COLUMNS
    source: str
    steps: int  # measured steps they cover
    trace: Path | None = None  # read from this trace (not stored)


def block_records_of(store: ResultsStore, run: Run) -> BlockRecords | None:
    """A run's block records: stored, else read from its trace; None for a run made without --nvtx-detail."""
    stored = store.block_timings([run.id])
    path = None
    if len(stored):
        records = stored.drop(columns=["run_id", "source"])
        source = str(stored["source"].iloc[0])
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
        records, source = from_trace(path, run.mode, run.warmup)
    if records.empty:
        raise HarnessError(f"run {run.id} has no per-block times (status {run.status})")
    return BlockRecords(records, source, int(records["step"].nunique()), path)


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
