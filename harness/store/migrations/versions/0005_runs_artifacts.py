"""runs.artifacts: what the profiler left, {kind: path}."""

import sqlalchemy as sa

from harness.store.migrations.steps import add_columns, drop_columns

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    add_columns("runs", sa.Column("artifacts", sa.JSON))


def downgrade() -> None:
    drop_columns("runs", "artifacts")
