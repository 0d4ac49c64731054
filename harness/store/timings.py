"""What the results database keeps per run beside it: step timings, agreement tables, per-block times."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, inspect, select
from sqlalchemy.orm import Session

from harness.store import stored_check, unsaved
from harness.store.schema import (
    BLOCK_COLUMNS,
    Agreement,
    BlockTiming,
    StepTiming,
)

if TYPE_CHECKING:
    import pandas as pd

from harness.store.database import Database

RANK = func.coalesce(StepTiming.rank, 0)
STEP_READ = (
    StepTiming.run_id,
    StepTiming.step,
    StepTiming.phase,
    StepTiming.duration_ns,
    StepTiming.warmup,
    RANK,
)
IDS_AT_ONCE = 500  # run ids a query names (SQLite takes a few thousand bound values at most)


def damaged_steps(db: Database, run_ids: list[str]) -> dict[Any, stored_check.DamagedRow]:
    """The runs of `run_ids` with a step row that fails its check (stored_check.check_steps), each with its
    line: for a read over runs that shows figures made of their steps without reading them."""
    damaged: dict[Any, stored_check.DamagedRow] = {}
    for start in range(0, len(run_ids), IDS_AT_ONCE):
        stmt = select(*STEP_READ).where(StepTiming.run_id.in_(run_ids[start : start + IDS_AT_ONCE]))
        rows = db._guard(lambda stmt=stmt: db._rows(stmt))
        damaged.update(stored_check.check_steps(f"results database {db.where}", rows))
    return damaged


class TimingsPart(Database):
    def step_timings(self, run_ids: list[str] | None = None) -> pd.DataFrame:
        """Every step's phase durations: run_id, step, phase, duration_ns, warmup, rank (0: one process)."""
        import pandas as pd

        stmt = select(*STEP_READ).order_by(StepTiming.run_id, RANK, StepTiming.step)
        if run_ids is not None:
            stmt = stmt.where(StepTiming.run_id.in_(run_ids))
        rows = self._guard(lambda: self._rows(stmt))
        rows = self.sound(rows, stored_check.check_steps(f"results database {self.where}", rows))
        return pd.DataFrame(rows, columns=["run_id", "step", "phase", "duration_ns", "warmup", "rank"])

    def agreement(self, run_ids: list[str] | None = None) -> pd.DataFrame:
        import pandas as pd

        cols = list(unsaved.AGREEMENT_COLUMNS)
        stmt = select(Agreement.run_id, *(getattr(Agreement, c) for c in cols))
        if run_ids is not None:
            stmt = stmt.where(Agreement.run_id.in_(run_ids))
        rows = self._guard(lambda: self._rows(stmt))
        rows = self.sound(rows, stored_check.check_agreements(f"results database {self.where}", rows))
        return pd.DataFrame(rows, columns=["run_id", *cols])

    def save_blocks(self, run_id: str, blocks: pd.DataFrame, source: str) -> None:
        """Per-block times of a stored run found by analysis (analysis.views.blocks.block_records: step,
        layer, block, phase, duration_ns, calls), replacing the run's earlier ones."""
        rows = block_rows(run_id, blocks, source)

        def write() -> None:
            with Session(self.engine) as session, session.begin():
                session.execute(delete(BlockTiming).where(BlockTiming.run_id == run_id))
                session.add_all(rows)

        self._guard(write)

    def block_timings(self, run_ids: list[str] | None = None) -> pd.DataFrame:
        """Per-block times (BLOCK_COLUMNS; layer nullable) of the given runs, or of all."""
        import pandas as pd

        with self.engine.connect() as conn:
            if not inspect(conn).has_table(BlockTiming.__tablename__):
                return pd.DataFrame(columns=BLOCK_COLUMNS)  # a read-only database from before block timings
        stmt = select(*(getattr(BlockTiming, c) for c in BLOCK_COLUMNS)).order_by(BlockTiming.id)
        if run_ids is not None:
            stmt = stmt.where(BlockTiming.run_id.in_(run_ids))
        rows = self._guard(lambda: self._rows(stmt))
        rows = self.sound(rows, stored_check.check_blocks(f"results database {self.where}", rows))
        df = pd.DataFrame(rows, columns=BLOCK_COLUMNS)
        df["layer"] = df["layer"].astype("Int64")
        return df


def block_rows(run_id: str, blocks: pd.DataFrame, source: str) -> list[BlockTiming]:
    """The rows of per-block times found by analysis (analysis.views.blocks.block_records)."""
    import pandas as pd

    return [
        BlockTiming(
            run_id=run_id,
            step=int(r.step),
            layer=None if pd.isna(r.layer) else int(r.layer),
            block=str(r.block),
            phase=str(r.phase),
            duration_ns=int(r.duration_ns),
            calls=int(r.calls),
            source=source,
        )
        for r in blocks.astype(object).itertuples(index=False)
    ]
