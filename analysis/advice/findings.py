"""Advice: findings ranked by the time at stake, each with its evidence (in words and as data), where it
happened (phase, steps) and the fix in plain words. docs/advice.md lists every rule with its source, its
threshold, why, and its record on planted causes.

The time at stake is an upper bound on what fixing the finding can save, never an estimate of it: the GPU
time lost waiting for the host, the host time blocked in synchronising calls, a phase's time the GPU spent
idle. Rules build on the tables that exist (HTA's idle-time categories from analysis.hta.breakdown, the GPU
events of analysis.hta.gpu_events) instead of computing them again. A finding names only what it saw: a gap
between steps is a data loader's only where a loader was seen.

What the harness itself does in a run (its phase clock's synchronisations, its time between steps, its
threads: analysis.advice.instruments) is left out of every finding and said once, apart (`Advice.line`).
Rules that need what a stored run recorded beside its capture (torch.compile's counters, the run's
roofline: `RunRecord`) judge it for `harness advise RUN`; on an export alone, `not_judged` says what could
not be, as it says the rules judged in steps on a capture without steps and those that read CUDA on one
without CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.advice import copy_rules, gpu_rules, host_rules, op_rules
from analysis.advice.base import (
    COLUMNS,
    DATA_COLUMN,
    WRAPPED,
    Finding,
    OptimizerRoof,
    RunRecord,
    Seen,
    Thresholds,
)
from analysis.advice.instruments import Instruments
from analysis.advice.where import phase_of
from analysis.trace.trace import Trace

__all__ = ["COLUMNS", "DATA_COLUMN", "Finding", "OptimizerRoof", "RunRecord", "Thresholds", "phase_of"]

Rule = Callable[[Seen], list[Finding]]
RULES: tuple[Rule, ...] = (
    gpu_rules.host_wait,
    host_rules.host_sync,
    gpu_rules.launch_bound,
    op_rules.parameter_loop,
    gpu_rules.optimizer_loop,
    host_rules.loading_and_gaps,
    gpu_rules.exposed_communication,
    host_rules.nsys_overhead_in_phases,
    gpu_rules.fp32_gemm,
    gpu_rules.math_attention_kernels,
    op_rules.math_attention_ops,
    copy_rules.pageable_copy,
    copy_rules.d2h_copy,
    host_rules.recompile,
)
# the rules that judge what happens in the steps (and their phases): nothing to judge without step ranges
PER_STEP = ("host-sync", "launch-bound", "optimizer-loop", "data-loader", "host-gap", "math-attention",
            "pageable-copy", "d2h-copy", "recompile")  # fmt: skip
NO_STEPS = "judged in steps, and the capture has none"
# the rules that read CUDA: the GPU's kernels and copies, the runtime's calls; on a trace without CUDA, those
# of ON_OPERATORS judge the framework's operators instead (a CPU run under torch.profiler)
READ_CUDA = ("gpu-host-wait", "host-sync", "launch-bound", "optimizer-loop", "exposed-communication",
             "fp32-gemm", "math-attention", "pageable-copy", "d2h-copy")  # fmt: skip
ON_OPERATORS = ("host-sync", "launch-bound", "math-attention")
NO_CUDA = "read CUDA's kernels, copies and runtime calls, and the capture holds none"
# what a rule needs of the stored run, said of an export (its capture alone) that has steps
NEEDS_RECORD = {
    "recompile": "torch.compile's counters (a capture shows one only where the host waits for a compiler)",
    "optimizer-loop": "the optimizer against its memory roof (the run's roofline; an export has its kernels)",
}
# optimizer-loop's need, said of a capture without kernels: it has no kernels to judge on its own
NO_KERNELS_NEED = "the optimizer against its memory roof (the run's roofline; the capture holds no kernels)"


@dataclass
class Advice:
    """What `advise` says of a capture: the findings, the harness's own instruments, what it could not
    judge."""

    findings: list[Finding]
    instruments: Instruments
    not_judged: list[str] = field(default_factory=list)

    def instruments_line(self) -> str | None:
        return self.instruments.line()


def advice(trace: Trace, thresholds: Thresholds | None = None, run: RunRecord | None = None) -> Advice:
    """Every rule that fires on `trace` (largest time at stake first), the harness's instruments in it, and
    (without `run`, the stored run's record) what the capture alone could not judge."""
    seen = Seen(trace, thresholds or Thresholds(), run)
    found: list[Finding] = []
    for rule in RULES:
        found += rule(seen)
    found.sort(key=lambda f: -f.at_stake_ns)
    not_judged = []
    if not len(seen.steps):  # "no rule fired" would read as a clean capture: most rules never looked
        not_judged.append(
            f"{', '.join(PER_STEP)}: {NO_STEPS} (NVTX `step` ranges or ProfilerStep#N): a program marks its "
            "steps with NVTX ranges named `step`"
        )
    if run is None and len(seen.steps):
        # a capture without optimizer phases (generate's prefill and decode, a program's) has no step to judge
        unasked = set() if len(seen.phase_ranges("optimizer")) else {"optimizer-loop"}
        needs = (
            NEEDS_RECORD if seen.trace.has("kernels") else {**NEEDS_RECORD, "optimizer-loop": NO_KERNELS_NEED}
        )
        not_judged = [
            f"{rule}: needs {what}: `harness advise RUN` judges it"
            for rule, what in needs.items()
            if rule not in unasked
        ]
    return Advice(found, seen.instruments, not_judged + _no_cuda(seen))


def _no_cuda(seen: Seen) -> list[str]:
    """The rules that read CUDA, said not judged where the capture holds none of it (an OS-runtime and
    NVTX capture, a CPU run's): "no rule fired" would read as a clean GPU."""
    if seen.has_gpu or len(seen.calls):
        return []
    skip = set(ON_OPERATORS) if len(seen.ops) else set()
    if seen.run is not None and seen.run.optimizer_roof is not None:  # judged against the run's roofline
        skip.add("optimizer-loop")
    unread = [rule for rule in READ_CUDA if rule not in skip]
    return [f"{', '.join(unread)}: {NO_CUDA}: they had nothing to judge"] if unread else []


def findings(
    trace: Trace, thresholds: Thresholds | None = None, run: RunRecord | None = None
) -> list[Finding]:
    """Every rule that fires on `trace`, largest time at stake first."""
    return advice(trace, thresholds, run).findings


def findings_table(found: list[Finding]) -> pd.DataFrame:
    """The findings as a table; `Data` holds each one's evidence as data (csv and json only)."""
    out = pd.DataFrame(
        [(f.rule, f.at_stake_ns, f.where, f.evidence, f.fix, f.data) for f in found],
        columns=[*COLUMNS, DATA_COLUMN],
    ).astype({"Time at stake (ns)": np.int64})
    out.attrs["priority"] = ["Rule", "Time at stake (ns)", "Where", "Fix", "Evidence", DATA_COLUMN]
    out.attrs["wrap"] = WRAPPED  # sentences: wrapped on a terminal, never cut in the middle
    return out


def as_record(found: list[Finding]) -> list[dict[str, Any]]:
    """The findings as stored with a run (analysis.advice.record)."""
    return [
        {
            "rule": f.rule,
            "at_stake_ns": int(f.at_stake_ns),
            "where": f.where,
            "evidence": f.evidence,
            "fix": f.fix,
            "data": f.data,
        }
        for f in found
    ]
