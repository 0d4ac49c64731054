"""Opening the results database (ResultsStore in harness.store.results is made of parts over it): the URL
resolved (harness.store.location), ours told from others', the schema created or migrated
(harness.store.migrations), SQLite opened read-only for read-only commands, a busy database waited out
(harness.store.dbfaults) and its errors turned into one line. What the database holds and how runs that it
will not take are kept: harness.store.results.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from sqlalchemy import create_engine, inspect, select, update
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool

from harness.core import signals
from harness.core.errors import HarnessError, first_line, os_reason
from harness.store import dbfaults, leaving, migrations, stored_check
from harness.store.location import (
    describe_url,
    missing_database,
    named,
    refuse_target,
    resolve_url,
    sqlite_file,
)
from harness.store.schema import (
    OUR_TABLES,
    SCHEMA_VERSION,
    Base,
    Meta,
    is_ours,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine


T = TypeVar("T")
CREATE_ATTEMPTS = 5


class NoDatabase(HarnessError):
    """A read-only command found no results database (it creates none); `creatable`: whether `harness run`
    can create it there."""

    def __init__(self, message: str, creatable: bool = True) -> None:
        super().__init__(message)
        self.creatable = creatable


class UnsavedRun(HarnessError):
    """The database would not take run `run_id` (`reason`, the store's words); it was written to `path` for
    `harness import`. What a save that stored nothing raises: whose run it was and why are read from here,
    never from the message, which is the line people are shown."""

    def __init__(
        self, message: str, path: Path, signal: int | None = None, *, run_id: str, reason: str
    ) -> None:
        # SIGINT or SIGTERM came while it waited for the database: end with it, and with its exit code
        super().__init__(message, signals.exit_code(signal) if signal is not None else None)
        self.path = path
        self.signal = signal
        self.run_id = run_id
        self.reason = reason


@dataclass
class Imported:
    file: Path
    run_id: str
    stored: str  # new, replaced (--replace), or already stored (the same run: nothing written)
    was: str | None = None  # replaced: the run that was stored, in words


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


def _behind(connection: Connection, revision: str | None, *, writer: bool = False) -> bool:
    """Whether the database needs upgrading: at an older revision of ours; or from before Alembic and, for
    a reader, lacking something of this schema (a writer upgrades it anyway, which records the revision).
    A revision this harness does not know is a newer harness's: its changes are additive (a change that is
    not raises SCHEMA_VERSION), so the database is used as it is."""
    if revision is None:
        return writer or _outdated(connection)
    return revision != migrations.HEAD and migrations.known(revision)


class Database:
    """Open the results database; with readonly=False also create it (and its folder) where there is none.
    What a store keeps is in the parts ResultsStore is made of (harness.store.results)."""

    def __init__(self, db: str | None = None, *, readonly: bool = False) -> None:
        self.url = resolve_url(db)
        self.readonly = readonly
        self.timeout = dbfaults.busy_timeout()
        self.file = sqlite_file(self.url)
        self.where = str(self.file) if self.file else describe_url(self.url)
        refuse_target(self.url, named(db))
        self.engine: Engine = self._engine()
        stored_check.WHERE[self.engine] = self.where  # a damaged row read back is said with its database
        # the runs reads over several runs left out, each with its line (None: none is, a damaged run
        # refuses the read); and the runs asked for by name (get), which refuse it wherever they are read
        self.left_out: dict[str, str] | None = leaving.collector()
        self.asked: set[str] = set()
        if not readonly and self.file is not None and not self.file.exists():
            self._refuse_folder()  # SQLite would say only "unable to open database file"
        self._guard(self._check_schema)
        if not readonly:
            try:
                self._guard(self._check_writable)
            except HarnessError:
                self._refuse_folder()
                raise

    def leave_out(self, damaged: dict[Any, stored_check.DamagedRow]) -> set[Any]:
        """The runs of `damaged` (found by a read over several runs, each with its line), left out of it:
        put in `left_out` for the command to say; a run asked for by name, or any where nothing collects
        them, refuses the read."""
        for run_id, refused in damaged.items():
            if self.left_out is None or run_id in self.asked:
                raise refused
        for run_id, refused in damaged.items():
            self.left_out.setdefault(str(run_id), str(refused))
        return set(damaged)

    def sound(self, rows: list[Any], damaged: dict[Any, stored_check.DamagedRow]) -> list[Any]:
        """Rows whose first value is their run's id, those of the runs of `damaged` left out (leave_out)."""
        gone = self.leave_out(damaged)
        return [row for row in rows if row[0] not in gone] if gone else rows

    def take_left_out(self) -> list[str]:
        """The lines of the runs left out so far, now said by the caller (nothing else says them)."""
        if not self.left_out:
            return []
        lines = list(self.left_out.values())
        self.left_out.clear()
        return lines

    # --- opening ---------------------------------------------------------------------------------------

    def _engine(self) -> Engine:
        attempt = min(dbfaults.ATTEMPT_S, self.timeout)
        scheme = self.url.split("://", 1)[0]
        try:
            if self.file is not None and self.readonly:
                if not self.file.is_file():
                    raise NoDatabase(*missing_database(self.file))
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
            reason = os_reason(self.file.parent, e) if self.file else e.strerror or e
            raise dbfaults.cannot_open(self.where, reason) from None

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

    def _check_writable(self) -> None:
        """A write that is rolled back: a database that will not take a run (a read-only file, or folder for
        its journal) is said now, before a run's work, not after it, when the run can only go to a file.
        The value written differs from the one there: SQLite writes nothing (and so opens no journal) for a
        row set to what it holds."""
        with self.engine.connect() as conn:
            probe = conn.begin()
            try:
                changed = update(Meta).where(Meta.key == "schema_version").values(value=Meta.value + " ")
                conn.execute(changed)
            finally:
                probe.rollback()

    def _refuse_folder(self) -> None:
        """A database file in a folder this user may not write: SQLite creates the file there, and the
        journal of every write beside it, so no run could be stored; said with the folder named."""
        assert self.file is not None
        folder = self.file.absolute().parent
        if not folder.is_dir() or os.access(folder, os.W_OK | os.X_OK):
            return
        what = "cannot be written" if self.file.exists() else "is not there and cannot be created"
        raise HarnessError(
            f"results database {self.file} {what}: this user may not write its folder {folder} (SQLite "
            "keeps a journal beside the database as it writes); pass --db a writable location"
        )

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
        """Run a database operation: wait out a busy database, turn its errors into one line (a wait that
        `stop` cut short is said as long as it was, not as long as it may last)."""
        began = time.monotonic()
        try:
            return dbfaults.retry_busy(fn, self.timeout, stop)
        except SQLAlchemyError as e:
            waited = round(time.monotonic() - began, 1) if stop is not None and stop() else self.timeout
            raise dbfaults.explain(e, self.where, min(waited, self.timeout)) from None

    def _rows(self, stmt: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(stmt).all())
