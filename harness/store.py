"""The results database: every run, its steps, and what profiling found. SQLAlchemy 2.0 ORM.

An embedded SQLite file by default; any SQLAlchemy URL through `--db` or `HARNESS_DB` (PostgreSQL with
`pip install 'harness[postgresql]'`).

- Ours or not: our databases carry a `harness_meta` table with the schema version (databases from before it
  are known by their `runs` and `step_timings` tables). A database that holds other tables and none of ours
  is never written to.
- Schema: a new database is created from harness.schema and stamped at the newest Alembic revision; one
  made by an older harness is upgraded to it on open (harness.migrations).
- Read-only commands (`runs`, `show`, `dashboard`, `doctor`) open with `readonly=True`: no folder or file
  is created, and SQLite files are opened with mode=ro; only a database made by an older harness is
  upgraded, through a separate writing connection, so that it can be read.
- A busy database is waited for (harness.dbfaults); a run it still will not take is written to
  `harness-unsaved-<run-id>.json` (harness.unsaved) and `save` raises UnsavedRun saying where.
  `import_file` stores such a file; a run id is stored once, however often it is imported.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from sqlalchemy import create_engine, delete, func, inspect, select
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool

from harness import dbfaults, migrations, signals, unsaved
from harness.errors import HarnessError, first_line
from harness.records import RunResult
from harness.schema import (
    ATTENTION_CELL_COLUMNS,
    ATTENTION_COLUMNS,
    BLOCK_COLUMNS,
    OUR_TABLES,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    Agreement,
    AttentionResult,
    Base,
    Baseline,
    BlockTiming,
    Meta,
    Run,
    StepTiming,
    is_ours,
    run_row,
)
from harness.unsaved import PendingRun

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.engine import Connection, Engine

    from harness.attention import AttentionCell, AttentionSweep

__all__ = ["RUN_COLUMNS", "NoDatabase", "ResultsStore", "Run", "UnsavedRun"]

T = TypeVar("T")
CREATE_ATTEMPTS = 5


class NoDatabase(HarnessError):
    """A read-only command found no results database (it creates none)."""


class UnsavedRun(HarnessError):
    """The database would not take a run; it was written to `path` for `harness import`."""

    def __init__(self, message: str, path: Path, signal: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.signal = signal  # SIGINT or SIGTERM came while it waited for the database: end with it


@dataclass
class Imported:
    file: Path
    run_id: str
    replaced: bool  # the run id was in the database already


def _outdated(connection: Connection) -> bool:
    """Whether a database from before Alembic (no revision recorded) lacks a table or nullable column of
    this harness's schema; harness_meta is not counted (a database from before it is ours too)."""
    inspector = inspect(connection)
    names = set(inspector.get_table_names())
    for table in Base.metadata.sorted_tables:
        if table.name == Meta.__tablename__:
            continue
        if table.name not in names:
            return True
        have = {c["name"] for c in inspector.get_columns(table.name)}
        if any(c.name not in have and c.nullable for c in table.columns):
            return True
    return False


def default_db_path() -> Path:
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "harness" / "results.sqlite"


def resolve_url(db: str | None = None) -> str:
    """`--db` value, else HARNESS_DB, else the default SQLite file. Plain paths become sqlite URLs."""
    db = db or os.environ.get("HARNESS_DB") or str(default_db_path())
    if "://" in db:
        return db
    path = Path(db).expanduser()
    return f"sqlite:///{path.resolve()}"


def describe_url(url: str) -> str:
    """The URL without its password, for display."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def sqlite_file(url: str) -> Path | None:
    """The file of a sqlite:/// URL; None for other databases and in-memory SQLite."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def _in_memory(url: str) -> bool:
    """Whether `url` is SQLite in memory (sqlite://, sqlite:///:memory:, file::memory:…)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except ArgumentError:
        return False
    database = parsed.database or ""
    return parsed.get_backend_name() == "sqlite" and (database in ("", ":memory:") or "mode=memory" in url)


def _behind(connection: Connection, revision: str | None, *, writer: bool = False) -> bool:
    """Whether the database needs upgrading: at an older revision of ours; or from before Alembic and, for
    a reader, lacking something of this schema (a writer upgrades it anyway, which records the revision).
    A revision this harness does not know is a newer harness's: its changes are additive (a change that is
    not raises SCHEMA_VERSION), so the database is used as it is."""
    if revision is None:
        return writer or _outdated(connection)
    return revision != migrations.HEAD and migrations.known(revision)


class ResultsStore:
    """Open the results database; with readonly=False also create it (and its folder) where there is none."""

    def __init__(self, db: str | None = None, *, readonly: bool = False) -> None:
        self.url = resolve_url(db)
        self.readonly = readonly
        self.timeout = dbfaults.busy_timeout()
        self.file = sqlite_file(self.url)
        self.where = str(self.file) if self.file else describe_url(self.url)
        if self.file is None and _in_memory(self.url):
            raise HarnessError(
                f"--db {self.where} is a database in memory: what a command stores there is gone when it "
                "ends; give a file (--db results.sqlite)",
                exit_code=2,
            )
        if self.file is not None and self.file.is_dir():
            raise HarnessError(
                f"--db {self.file} is a folder, not a database file; give a file in it, e.g. "
                f"--db {self.file / 'results.sqlite'}",
                exit_code=2,
            )
        self.engine: Engine = self._engine()
        self._guard(self._check_schema)

    # --- opening ---------------------------------------------------------------------------------------

    def _engine(self) -> Engine:
        attempt = min(dbfaults.ATTEMPT_S, self.timeout)
        scheme = self.url.split("://", 1)[0]
        try:
            if self.file is not None and self.readonly:
                if not self.file.is_file():
                    raise NoDatabase(
                        f"no results database at {self.file} (`harness run` creates one; --db or HARNESS_DB "
                        "names another)"
                    )
                uri = f"file:{quote(str(self.file.absolute()))}?mode=ro"
                return create_engine(
                    "sqlite://",
                    creator=lambda: sqlite3.connect(uri, uri=True, timeout=attempt, check_same_thread=False),
                    poolclass=QueuePool,
                )
            if self.file is not None:
                self.file.parent.mkdir(parents=True, exist_ok=True)
                return create_engine(self.url, connect_args={"timeout": attempt})
            return create_engine(self.url)
        except ImportError as e:
            raise dbfaults.missing_driver(scheme, e) from None
        except NoSuchModuleError:
            raise HarnessError(
                f"unknown database URL scheme {scheme + '://'!r} in --db/HARNESS_DB {self.where}; give a "
                "path, sqlite:///PATH or postgresql://USER@HOST/DB"
            ) from None
        except (ArgumentError, ValueError) as e:
            raise HarnessError(f"not a database URL: {self.where} ({first_line(e)})") from None
        except OSError as e:
            raise HarnessError(
                f"cannot open results database {self.where}: {e.strerror or e}. Pass --db PATH_OR_URL or set "
                "HARNESS_DB to a writable location."
            ) from None

    def _check_schema(self) -> None:
        with self.engine.connect() as conn:
            inspector = inspect(conn)
            tables = set(inspector.get_table_names())
            columns = {t: {c["name"] for c in inspector.get_columns(t)} for t in tables & OUR_TABLES}
            if tables and not is_ours(columns):
                shown = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
                raise HarnessError(
                    f"{self.where} is not a harness results database (it holds other tables: {shown}); "
                    "harness writes only to its own: pass --db a new file"
                )
            version = None
            if Meta.__tablename__ in tables:
                row = conn.execute(select(Meta.value).where(Meta.key == "schema_version")).first()
                version = int(row[0]) if row and str(row[0]).isdigit() else None
            revision = migrations.revision_of(conn)
            behind = _behind(conn, revision)
        if version is not None and version > SCHEMA_VERSION:
            raise HarnessError(
                f"results database {self.where} has schema {version}, newer than this harness knows "
                f"({SCHEMA_VERSION}); upgrade harness"
            )
        if self.readonly:
            if not tables:
                raise NoDatabase(f"no results in {self.where} (an empty database; `harness run` fills it)")
            if behind:
                self._upgrade()
            return
        if behind or revision is None or version is None:
            self._migrate()

    def _upgrade(self) -> None:
        """A read-only command on a database made by an older harness: bring it to this schema through a
        writing connection so that reading works. It was ours already; the marker table stays as it was."""
        writer = create_engine(self.url)
        try:
            with writer.begin() as conn:
                migrations.upgrade(conn, leave_marker=True)
        except SQLAlchemyError as e:
            raise HarnessError(
                f"results database {self.where} was made by an older harness and cannot be upgraded "
                f"({first_line(e)}): run `harness runs` where it is writable"
            ) from None
        finally:
            writer.dispose()

    def _migrate(self) -> None:
        """Create a new database at the newest revision, or upgrade an older one to it, and mark it ours.

        Several processes may do this to one database at once: whoever loses a race looks again.
        """
        from alembic.util import CommandError

        for attempt in range(CREATE_ATTEMPTS):
            try:
                with self.engine.begin() as conn:
                    if not set(inspect(conn).get_table_names()) & OUR_TABLES:
                        Base.metadata.create_all(conn)
                        migrations.stamp(conn)
                    elif _behind(conn, migrations.revision_of(conn), writer=True):
                        migrations.upgrade(conn)
                    Base.metadata.create_all(conn, tables=[Meta.__table__])
                with Session(self.engine) as session, session.begin():
                    if session.get(Meta, "schema_version") is None:
                        session.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
                return
            except (IntegrityError, OperationalError, CommandError) as e:
                lost_race = not isinstance(e, OperationalError) or "already exists" in str(e)
                if not lost_race or attempt == CREATE_ATTEMPTS - 1:
                    raise

    def _guard(self, fn: Callable[[], T], stop: Callable[[], bool] | None = None) -> T:
        """Run a database operation: wait out a busy database, turn its errors into one line."""
        try:
            return dbfaults.retry_busy(fn, self.timeout, stop)
        except SQLAlchemyError as e:
            raise dbfaults.explain(e, self.where, self.timeout) from None

    # --- writing ---------------------------------------------------------------------------------------

    def save(
        self,
        result: RunResult,
        *,
        profiler: str = "none",
        nsys_mode: str | None = None,
        experiment: str | None = None,
        nsys_rep: str | None = None,
        nsys_sqlite: str | None = None,
        artifacts: dict[str, str] | None = None,
        agreement: pd.DataFrame | None = None,
        baseline_run_id: str | None = None,
    ) -> str:
        """Store a run (again: its row, steps and, if given, agreement are replaced).

        When the database will not take it, the run goes to a file and UnsavedRun says where.
        """
        pending = PendingRun(
            result=result,
            created_at=datetime.now(UTC),
            profiler=profiler,
            nsys_mode=nsys_mode,
            experiment=experiment,
            baseline_run_id=baseline_run_id,
            nsys_rep=nsys_rep,
            nsys_sqlite=nsys_sqlite,
            artifacts=artifacts or None,
            agreement=unsaved.agreement_rows(agreement) if agreement is not None else None,
        )
        with signals.deferred() as held:  # Ctrl-C lands after the run is in the database or in a file
            try:
                self._guard(lambda: self._write(pending), stop=lambda: bool(held))
                return result.run_id
            except HarnessError as e:
                why = str(e)
                if held:  # a signal ended the wait: say so, and hand the signal to the caller
                    why = f"{signals.name(held[0])} came while it waited ({why})"
                path = unsaved.write(pending, self._unsaved_folders(), why)
                sig = held.pop(0) if held else None
                held.clear()
        raise UnsavedRun(
            f"run {result.run_id} is not in the results database: {why}. It was written to {path}; "
            f"`harness import {path}` stores it",
            path,
            signal=sig,
        )

    def save_agreement(self, run_id: str, table: pd.DataFrame) -> None:
        """`table` as returned by analysis.agreement.agreement_table; replaces the run's agreement rows."""
        rows = unsaved.agreement_rows(table)

        def write() -> None:
            with Session(self.engine) as session, session.begin():
                session.execute(delete(Agreement).where(Agreement.run_id == run_id))
                session.add_all(Agreement(run_id=run_id, **row) for row in rows)

        self._guard(write)

    def import_file(self, path: Path) -> Imported:
        """Store a run from a harness-unsaved-*.json file (again: the stored copy is replaced)."""
        pending = unsaved.read(path)
        run_id = pending.result.run_id

        def write() -> bool:
            with Session(self.engine) as session:
                existed = session.get(Run, run_id) is not None
            self._write(pending)
            return existed

        return Imported(file=path, run_id=run_id, replaced=self._guard(write))

    def _write(self, pending: PendingRun) -> None:
        if self.readonly:
            raise RuntimeError("ResultsStore opened read-only")
        from analysis.names import BLOCK_TIMERS, RUN_ENERGY_FIELDS

        result, cfg = pending.result, pending.result.config
        energy = result.extra.get("energy_summary") or {}
        run = Run(
            id=result.run_id,
            created_at=pending.created_at,
            model=cfg.model,
            mode=cfg.mode,
            device=result.device,
            device_name=result.device_name,
            precision=cfg.precision,
            compile=cfg.compile,
            attention=cfg.attention,
            batch_size=cfg.batch_size,
            context_length=result.model.context_length if result.model else cfg.context_length,
            warmup=cfg.warmup,
            steps=cfg.steps,
            status=result.status,
            error=result.error,
            profiler=pending.profiler,
            nsys_mode=pending.nsys_mode,
            experiment=pending.experiment,
            baseline_run_id=pending.baseline_run_id,
            params=result.model.params if result.model else None,
            tokens_per_s=result.tokens_per_s,
            flops_per_step=result.flops_per_step,
            achieved_flops=result.achieved_flops,
            mfu=result.mfu,
            peak_memory_bytes=result.peak_memory_bytes,
            nsys_rep=pending.nsys_rep,
            nsys_sqlite=pending.nsys_sqlite,
            **{name: energy.get(name) for name in RUN_ENERGY_FIELDS},
            # a run's own files (--memory's snapshot) beside the profiler's
            artifacts={**(result.extra.get("artifacts") or {}), **(pending.artifacts or {})} or None,
            world_size=cfg.world_size if cfg.world_size > 1 else None,
            config=cfg.to_dict(),
            model_info=asdict(result.model) if result.model else {},
            env=result.env,
            summary={
                "phases": [asdict(s) for s in result.phase_stats()],
                **result.extra,
            },
        )
        # relationships are left unset on `run`, so merge leaves them alone: the rows are replaced here
        with Session(self.engine) as session, session.begin():
            session.execute(delete(StepTiming).where(StepTiming.run_id == run.id))
            if result.blocks:
                session.execute(delete(BlockTiming).where(BlockTiming.run_id == run.id))
            if pending.agreement is not None:
                session.execute(delete(Agreement).where(Agreement.run_id == run.id))
            session.merge(run)
            session.add_all(
                StepTiming(
                    run_id=run.id, step=s.step, phase=phase, duration_ns=ns, warmup=s.warmup, rank=s.rank
                )
                for s in result.steps
                for phase, ns in s.phases.items()
            )
            session.add_all(Agreement(run_id=run.id, **row) for row in pending.agreement or [])
            session.add_all(
                BlockTiming(run_id=run.id, source=BLOCK_TIMERS, **asdict(b)) for b in result.blocks
            )

    def _unsaved_folders(self) -> list[Path]:
        beside = [self.file.absolute().parent] if self.file is not None else []
        return [*beside, default_db_path().parent]

    # --- reading ---------------------------------------------------------------------------------------

    def count_runs(self) -> int:
        def count() -> int:
            with Session(self.engine) as session:
                return int(session.scalar(select(func.count()).select_from(Run)) or 0)

        return self._guard(count)

    def get(self, run_id: str) -> Run:
        return self._guard(lambda: self._get(run_id))

    def _get(self, run_id: str) -> Run:
        with Session(self.engine, expire_on_commit=False) as session:
            run = session.get(Run, run_id)
            if run is None:
                # accept a unique prefix, like git does for commits
                matches = session.scalars(select(Run).where(Run.id.startswith(run_id, autoescape=True))).all()
                if len(matches) != 1:
                    what = "no run" if not matches else f"{len(matches)} runs"
                    raise HarnessError(
                        f"{what} with id {run_id!r}; `harness runs` lists the runs", exit_code=2
                    )
                run = matches[0]
            run.step_timings  # noqa: B018  (load before the session closes)
            run.agreement  # noqa: B018
            return run

    def latest(self, *, nvtx_detail: bool = False) -> Run | None:
        """The newest run (made with --nvtx-detail, if asked), with its steps; None if there is none."""

        def read() -> Run | None:
            with Session(self.engine, expire_on_commit=False) as session:
                for run in session.scalars(select(Run).order_by(Run.created_at.desc())):
                    if not nvtx_detail or (run.config or {}).get("nvtx_detail"):
                        run.step_timings  # noqa: B018  (load before the session closes)
                        return run
            return None

        return self._guard(read)

    # --- named baselines -------------------------------------------------------------------------------

    def tag_baseline(self, name: str, run_id: str) -> str:
        """Tag run `run_id` (or a unique prefix) as baseline `name`, replacing an older tag; the full id."""
        run = self.get(run_id)

        def write() -> None:
            with Session(self.engine) as session, session.begin():
                row = session.get(Baseline, name)
                if row is None:
                    session.add(Baseline(name=name, run_id=run.id, created_at=datetime.now(UTC)))
                else:
                    row.run_id, row.created_at = run.id, datetime.now(UTC)

        self._guard(write)
        return run.id

    def get_baseline(self, name: str) -> Run:
        """The run tagged `name`."""

        def read() -> str | None:
            with Session(self.engine) as session:
                if not inspect(session.connection()).has_table(Baseline.__tablename__):
                    return None  # a database older than named baselines
                row = session.get(Baseline, name)
                return row.run_id if row is not None else None

        run_id = self._guard(read)
        if run_id is None:
            raise HarnessError(
                f"no baseline named {name!r}; `harness baseline tag NAME RUN` makes one, "
                "`harness baseline list` lists them",
                exit_code=2,
            )
        return self.get(run_id)

    def baselines(self) -> pd.DataFrame:
        """name, run_id, created_at of every named baseline, by name."""
        import pandas as pd

        stmt = select(Baseline.name, Baseline.run_id, Baseline.created_at).order_by(Baseline.name)
        with self.engine.connect() as conn:
            if not inspect(conn).has_table(Baseline.__tablename__):
                return pd.DataFrame(columns=["name", "run_id", "created_at"])
        df = pd.DataFrame(self._guard(lambda: self._rows(stmt)), columns=["name", "run_id", "created_at"])
        df["created_at"] = df["created_at"].map(lambda t: t.isoformat(timespec="seconds"))
        return df

    def linked(self, run_id: str) -> list[Run]:
        """The runs paired with `run_id`: its baseline, and the profiled runs with it as their baseline."""
        with Session(self.engine, expire_on_commit=False) as session:
            run = session.get(Run, run_id)
            if run is None:
                return []
            stmt = (
                select(Run)
                .where((Run.id == run.baseline_run_id) | (Run.baseline_run_id == run_id))
                .order_by(Run.created_at)
            )
            found = list(session.scalars(stmt).all())
            for r in found:
                r.step_timings  # noqa: B018  (load before the session closes)
            return found

    def runs(
        self,
        *,
        model: str | None = None,
        device: str | None = None,
        precision: str | None = None,
        experiment: str | None = None,
        ids: list[str] | None = None,
        last: int | None = None,
    ) -> pd.DataFrame:
        """One row per run, newest last, with per-phase mean/std (ns) as columns."""
        import pandas as pd

        stmt = select(Run).order_by(Run.created_at)
        if model:
            stmt = stmt.where(Run.model == model)
        if device:
            stmt = stmt.where(Run.device == device)
        if precision:
            stmt = stmt.where(Run.precision == precision)
        if experiment:
            stmt = stmt.where(Run.experiment == experiment)
        if ids:
            stmt = stmt.where(Run.id.in_(ids))

        def read() -> list[dict[str, Any]]:
            with Session(self.engine) as session:
                return [run_row(r) for r in session.scalars(stmt).all()]

        df = pd.DataFrame.from_records(self._guard(read), columns=RUN_COLUMNS)
        if last is not None:
            df = df.tail(last).reset_index(drop=True)
        return df

    def step_timings(self, run_ids: list[str] | None = None) -> pd.DataFrame:
        """Every step's phase durations: run_id, step, phase, duration_ns, warmup, rank (0: one process)."""
        import pandas as pd

        rank = func.coalesce(StepTiming.rank, 0)
        stmt = select(
            StepTiming.run_id,
            StepTiming.step,
            StepTiming.phase,
            StepTiming.duration_ns,
            StepTiming.warmup,
            rank,
        ).order_by(StepTiming.run_id, rank, StepTiming.step)
        if run_ids is not None:
            stmt = stmt.where(StepTiming.run_id.in_(run_ids))
        rows = self._guard(lambda: self._rows(stmt))
        return pd.DataFrame(rows, columns=["run_id", "step", "phase", "duration_ns", "warmup", "rank"])

    def agreement(self, run_ids: list[str] | None = None) -> pd.DataFrame:
        import pandas as pd

        cols = list(unsaved.AGREEMENT_COLUMNS)
        stmt = select(Agreement.run_id, *(getattr(Agreement, c) for c in cols))
        if run_ids is not None:
            stmt = stmt.where(Agreement.run_id.in_(run_ids))
        return pd.DataFrame(self._guard(lambda: self._rows(stmt)), columns=["run_id", *cols])

    def save_blocks(self, run_id: str, blocks: pd.DataFrame, source: str) -> None:
        """Per-block times of a stored run found by analysis (analysis.blocks.block_records: step, layer,
        block, phase, duration_ns, calls), replacing the run's earlier ones."""
        import pandas as pd

        rows = [
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
        df = pd.DataFrame(self._guard(lambda: self._rows(stmt)), columns=BLOCK_COLUMNS)
        df["layer"] = df["layer"].astype("Int64")
        return df

    def _rows(self, stmt: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(stmt).all())

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

    def attention_results(self, sweep_id: str | None = None) -> pd.DataFrame:
        """Attention cells (one sweep, or all), oldest first, with ATTENTION_COLUMNS."""
        import pandas as pd

        stmt = select(*(getattr(AttentionResult, c) for c in ATTENTION_COLUMNS)).order_by(AttentionResult.id)
        if sweep_id is not None:
            stmt = stmt.where(AttentionResult.sweep_id == sweep_id)
        with self.engine.connect() as conn:
            return pd.DataFrame(conn.execute(stmt).all(), columns=ATTENTION_COLUMNS)
