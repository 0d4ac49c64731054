"""Alembic's environment: migrate the connection harness.store.migrations hands in (never a URL from a
file)."""

from __future__ import annotations

from alembic import context

from harness.store.migrations import VERSION_TABLE
from harness.store.schema import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "harness migrations run through harness.store.migrations.upgrade(connection), not a URL"
    )
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    # SQLite alters few things in place: batch mode copies a table where a change needs it
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
