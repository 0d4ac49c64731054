"""Named baselines in the results database (`harness baseline tag|list`, `harness diff NAME`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from harness.core.bounds import check_baseline_name
from harness.core.errors import HarnessError
from harness.store import stored_check
from harness.store.schema import Baseline, Run, stored_time

if TYPE_CHECKING:
    import pandas as pd

from harness.store.database import Database


class BaselinesPart(Database):
    # --- named baselines -------------------------------------------------------------------------------

    def tag_baseline(self, name: str, run_id: str) -> tuple[Run, str | None]:
        """Tag run `run_id` (or a unique prefix) as baseline `name`, replacing an older tag: the run, and
        the id of the run the name was moved from (None: a new name, or the same run again)."""
        check_baseline_name(name)
        run = self.get(run_id)

        def write() -> str | None:
            with Session(self.engine) as session, session.begin():
                row = session.get(Baseline, name)
                if row is None:
                    session.add(Baseline(name=name, run_id=run.id, created_at=datetime.now(UTC)))
                    return None
                was = row.run_id if row.run_id != run.id else None
                row.run_id, row.created_at = run.id, datetime.now(UTC)
                return was

        return run, self._guard(write)

    def get_baseline(self, name: str) -> Run:
        """The run tagged `name`."""

        def read() -> tuple[str, bool] | None:
            with Session(self.engine) as session:
                if not inspect(session.connection()).has_table(Baseline.__tablename__):
                    return None  # a database older than named baselines
                row = session.get(Baseline, name)
                return (row.run_id, session.get(Run, row.run_id) is not None) if row is not None else None

        found = self._guard(read)
        if found is None:
            raise HarnessError(
                f"no baseline named {name!r}; `harness baseline tag NAME RUN` makes one, "
                "`harness baseline list` lists them",
                exit_code=2,
            )
        run_id, there = found
        if not there:  # its id whole, never as a prefix or `latest`: the run the name was set on, or none
            raise HarnessError(gone(name, run_id), exit_code=2)
        return self.get(run_id)

    def baselines(self) -> pd.DataFrame:
        """Every named baseline, by name: its name, its run's id, how that run ended (`status`: a run that
        stopped short is no baseline a gate can pass against) and its creation time (`created_at`, as `runs`
        gives them), and when the name was last set on that run (`tagged_at`: the tag's own time, which read
        as the run's under the name created_at)."""
        import pandas as pd

        columns = ["name", "run_id", "status", "created_at", "tagged_at"]
        stmt = (
            select(Baseline.name, Baseline.run_id, Run.status, Run.created_at, Baseline.created_at)
            .join(Run, Run.id == Baseline.run_id, isouter=True)
            .order_by(Baseline.name)
        )
        with self.engine.connect() as conn:
            if not inspect(conn).has_table(Baseline.__tablename__):
                return pd.DataFrame(columns=columns)
        rows = self._guard(lambda: self._rows(stmt))
        # a baseline whose row, or its run's time, fails its check is left out as a damaged run is
        # (Database.leave_out)
        damaged: dict[str, stored_check.DamagedRow] = {}
        kept = []
        where = f"results database {self.where}"
        for name, run_id, status, created, tagged in rows:
            refused = stored_check.check_tagged(where, name, run_id, created, tagged)
            if not refused:
                kept.append((name, run_id, status, created, tagged))
            for key, line in refused.items():
                damaged.setdefault(key, line)
        self.leave_out(damaged)
        df = pd.DataFrame(kept, columns=columns)
        for column in ("created_at", "tagged_at"):  # a run that is gone has no time (NaT): None, not "NaT"
            df[column] = df[column].map(lambda t: None if pd.isna(t) else stored_time(t)).astype(object)
        df.attrs["gone"] = [gone(name, run_id) for name, run_id, status, *_ in kept if status is None]
        return df


def gone(name: str, run_id: str) -> str:
    """What is said of baseline `name` whose run `run_id` is no longer in the database."""
    return (
        f"baseline:{name} names run {run_id}, which is not in the results database (removed outside the "
        f"harness): `harness baseline tag {name} RUN` names another"
    )
