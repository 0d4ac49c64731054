"""runs.advice: the run's health and findings (analysis.advice.record), stored by `run --nsys`.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import add_columns

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("runs", sa.Column("advice", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("advice")
