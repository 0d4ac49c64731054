"""Each stored run's configuration: the JSON as saved (`configs`), or the RunConfig it is read as
(`run_configs`), the one reading of it: the store's checks read it so (stored_check.stored_config), and so
does each command that makes a run's `harness run` line again of it (compare-compile, optimize RUN)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from harness.store import stored_check
from harness.store.database import Database
from harness.store.schema import Run

if TYPE_CHECKING:
    from harness.core.records import RunConfig


class ConfigsPart(Database):
    def configs(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The stored configuration of each run of `ids` (RunConfig's fields as saved), by run id."""
        stmt = select(Run.id, Run.config).where(Run.id.in_(ids))

        def read() -> dict[str, dict[str, Any]]:
            with Session(self.engine) as session:
                return {i: c or {} for i, c in session.execute(stmt).all()}

        return self._guard(read) if ids else {}

    def run_configs(self, ids: list[str]) -> dict[str, RunConfig]:
        """The configuration of each run of `ids` as it was stored, by run id (stored_check.stored_config):
        a field of an older harness's run at its default, one of a newer harness's left out, and its values
        as stored, never a plant's settings over them (they were written after the plant set its own). A run
        whose row fails its check is left out (Database.leave_out)."""
        stmt = select(Run).where(Run.id.in_(ids))
        left_out: dict[Any, stored_check.DamagedRow] = {}

        def read() -> dict[str, RunConfig]:
            left_out.clear()  # a busy database is read again
            with Session(self.engine) as session:
                found = session.scalars(stmt, execution_options={stored_check.LEFT_OUT: left_out}).all()
                return {r.id: stored_check.stored_config(r.config, r) for r in found if r.id not in left_out}

        configs = self._guard(read) if ids else {}
        self.leave_out(left_out)
        return configs
