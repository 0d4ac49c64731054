"""The results database's migrations (Alembic), run from code: no alembic.ini, nothing outside the package.

`harness.store.results.ResultsStore` calls these when it opens a database: a new one is created from
harness.store.schema and stamped at HEAD; an older one is upgraded to HEAD (the revisions in versions/, oldest
first). Alembic keeps the revision a database is at in its own table, VERSION_TABLE. A database from before
Alembic has no such table: it is upgraded from the start, and every revision adds only what is missing
(harness.store.migrations.steps), since the additive upgrades of older harnesses left any subset of them done.

A database at HEAD needs no Alembic at all (one SELECT): alembic is imported only to migrate.
Add a revision: `python -m harness.store.migrations revision "what it adds"` (docs/dev/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import inspect, text

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

SCRIPT_LOCATION = "harness.store:migrations"
VERSION_TABLE = "harness_alembic_version"
# the newest revision in versions/ (tests/test_migrations.py checks it is Alembic's head)
HEAD = "0009"


def config(connection: Connection | None = None, **attributes: object) -> Config:
    """Alembic's configuration, built in code; `connection` is the one env.py migrates."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.attributes.update(attributes, connection=connection)
    return cfg


def revision_of(connection: Connection) -> str | None:
    """The revision the database is at; None when it has no version table (new, or from before Alembic)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    return rows[0] if len(rows) == 1 else None


def known(revision: str) -> bool:
    """Whether `revision` is one of ours (a newer harness may have stamped one this harness lacks)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(config()).get_revision(revision) is not None
    except CommandError:
        return False


def upgrade(connection: Connection, *, leave_marker: bool = False) -> None:
    """Upgrade to HEAD inside the caller's transaction. `leave_marker`: do not create harness_meta (a
    read-only command's upgrade: reading does not make a database ours)."""
    from alembic import command

    command.upgrade(config(connection, leave_marker=leave_marker), "head")


def stamp(connection: Connection) -> None:
    """Record HEAD as the database's revision (a database just created from harness.store.schema)."""
    from alembic import command

    command.stamp(config(connection), "head")
