"""Attention sweeps in the results database (`harness attention`): one row per cell."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from harness.store import stored_check
from harness.store.schema import (
    ATTENTION_CELL_COLUMNS,
    ATTENTION_CHECKED,
    ATTENTION_COLUMNS,
    AttentionResult,
)

if TYPE_CHECKING:
    import pandas as pd

    from harness.core.records import AttentionCell, AttentionSweep
from harness.store.database import Database
from workloads.names import counted


class AttentionPart(Database):
    def save_attention(self, sweep: AttentionSweep, cell: AttentionCell) -> None:
        """One finished cell of an attention sweep (saved as it finishes, so a cut-short sweep keeps it)."""
        cfg = sweep.config
        row = AttentionResult(
            sweep_id=sweep.sweep_id,
            created_at=datetime.now(UTC),
            device=sweep.device,
            device_name=sweep.device_name,
            precision=cfg.precision,
            batch_size=cfg.batch_size,
            num_heads=cfg.num_heads,
            causal=cfg.causal,
            warmup=cfg.warmup,
            trials=cfg.trials,
            memory_source=sweep.memory_source,
            env=sweep.env,
            **{c: getattr(cell, c) for c in ATTENTION_CELL_COLUMNS},
        )
        with Session(self.engine) as session, session.begin():
            session.add(row)

    def attention_results(self, sweep_id: str | None = None, *, asked: str | None = None) -> pd.DataFrame:
        """Attention cells (one sweep, or all), oldest first, with ATTENTION_COLUMNS. A sweep with a cell that
        fails its check (harness.store.stored_check) is left out as a damaged run is (Database.leave_out);
        the one `asked` names (its id, or the one sweep whose id starts so: `dashboard --sweep`) refuses."""
        import pandas as pd

        stmt = select(*(getattr(AttentionResult, c) for c in ATTENTION_CHECKED)).order_by(AttentionResult.id)
        if sweep_id is not None:
            stmt = stmt.where(AttentionResult.sweep_id == sweep_id)
        rows = self._guard(lambda: self._rows(stmt))
        damaged = stored_check.check_cells(f"results database {self.where}", rows)
        if asked is not None:
            ids = [s for s in dict.fromkeys(row[0] for row in rows) if isinstance(s, str)]
            named = [s for s in ids if s == asked] or [s for s in ids if s.startswith(asked)]
            if len(named) == 1 and named[0] in damaged:
                raise damaged[named[0]]
        gone = self.leave_out(damaged)
        shown = len(ATTENTION_COLUMNS)  # the env is checked, not shown
        return pd.DataFrame([row[:shown] for row in rows if row[0] not in gone], columns=ATTENTION_COLUMNS)


def sweep_not_run(session: Session, sweep_id: str) -> str:
    """What `show attn-…` is told: an attention sweep's id, and where its cells are shown."""
    where = "`harness dashboard --sweep ID` draws it in its attention panel"
    cells = session.scalar(select(func.count()).where(AttentionResult.sweep_id == sweep_id)) or 0
    if not cells:
        return f"no run or attention sweep with id {sweep_id!r}; {where}"
    what = f"an attention sweep ({counted(cells, 'cell')}, `harness attention`)"
    return f"{sweep_id!r} is {what}, not a run: {where}"
