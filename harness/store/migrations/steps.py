"""Migration steps that do only what is missing.

Databases from before Alembic were upgraded by adding whatever nullable column or table the harness of the
day lacked, so such a database may hold any part of a revision already. Each step here inspects first, and
a revision built from them can run on any of those databases. New revisions use them too: they cost
nothing and keep a half-finished upgrade (a process killed mid-way on SQLite, where DDL is not
transactional) re-runnable.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op


def _inspector() -> sa.Inspector:
    return sa.inspect(op.get_bind())


def create_table(name: str, *columns: sa.schema.SchemaItem) -> bool:
    """Create the table unless it exists; True when it was created."""
    if _inspector().has_table(name):
        return False
    op.create_table(name, *columns)
    return True


def add_columns(table: str, *columns: sa.Column) -> list[str]:
    """Add the columns the table lacks (each must be nullable or have a server default); their names."""
    have = {c["name"] for c in _inspector().get_columns(table)}
    added = []
    for column in columns:
        if column.name not in have:
            op.add_column(table, column)
            added.append(column.name)
    return added


def create_index(name: str, table: str, columns: list[str]) -> None:
    """Create the index unless the table has one of that name."""
    if name not in {i["name"] for i in _inspector().get_indexes(table)}:
        op.create_index(name, table, columns)


def is_sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def drop_columns(table: str, *names: str) -> None:
    """Drop the columns (a downgrade's): in a batch, which SQLite carries out by copying the table."""
    with op.batch_alter_table(table) as batch:
        for name in names:
            batch.drop_column(name)


def column_revision(
    table: str, **types: sa.types.TypeEngine | type[sa.types.TypeEngine]
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The `upgrade` and `downgrade` of a revision that adds nullable columns (name=type) to one table and
    does nothing else: `upgrade, downgrade = column_revision("runs", advice=sa.JSON)`."""

    def upgrade() -> None:  # fresh Columns each run: a Column belongs to the one table it was added to
        add_columns(table, *(sa.Column(name, type_) for name, type_ in types.items()))

    def downgrade() -> None:
        drop_columns(table, *types)

    return upgrade, downgrade


def run_id() -> sa.Column:
    """The column that ties a row to its run (`runs.id`): the row goes with the run."""
    return sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False)


def create_run_table(name: str, *columns: sa.schema.SchemaItem) -> bool:
    """Create, unless it exists, a table of rows that each belong to a run: a numbered `id`, then `run_id`
    (indexed), then `columns`. True when it was created."""
    row_id = sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)
    created = create_table(name, row_id, run_id(), *columns)
    create_index(f"ix_{name}_run_id", name, ["run_id"])
    return created
