"""runs.advice: the run's health and findings (analysis.advice.record), stored by `run --nsys`."""

import sqlalchemy as sa

from harness.store.migrations.steps import add_columns, drop_columns

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    add_columns("runs", sa.Column("advice", sa.JSON))


def downgrade() -> None:
    drop_columns("runs", "advice")
