"""The tables of a run across ranks for `harness run --nproc` and `harness show`: each rank's mean phase
times, and per phase the mean over ranks, slowest and fastest rank, straggler ratio and share of the step
(analysis.rank_phases)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from harness.records import RunResult

COLUMNS = ["rank", "phase", "step", "duration_ns"]


def frame(rows: Iterable[tuple[int, str, int, int]]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(list(rows), columns=COLUMNS)


def result_frame(result: RunResult) -> pd.DataFrame:
    """The measured steps of a RunResult as rank, phase, step, duration_ns."""
    return frame((s.rank, p, s.step, ns) for s in result.steps if not s.warmup for p, ns in s.phases.items())


def rank_tables(df: pd.DataFrame) -> tuple[list[tuple[str, pd.DataFrame]], list[str]]:
    """The two tables and a note with the communication share; nothing for fewer than two ranks."""
    from analysis.rank_phases import communication_share, per_rank, straggler_table

    if df.empty or df["rank"].nunique() < 2:
        return [], []
    n = df["rank"].nunique()
    stragglers = straggler_table(df)
    # on a narrow terminal: the ratio and who the straggler is before the rest
    stragglers.attrs["priority"] = [
        "phase", "straggler ratio", "slowest rank", "Avg (ns)", "share of step (%)", "Max (ns)",
        "fastest rank", "Min (ns)", "Med (ns)", "Ranks",
    ]  # fmt: skip
    stragglers.attrs["whole"] = ["phase"]
    tables = [
        (f"phases per rank ({n} ranks, mean of measured steps)", per_rank(df)),
        ("across ranks: straggler ratio = slowest / median rank", stragglers),
    ]
    share = communication_share(df)
    notes = [f"communication (allreduce): {share * 100:.1f}% of the step"] if share == share else []
    return tables, notes
