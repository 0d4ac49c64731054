"""Runs across ranks (`run --nproc`): step_timings.rank, runs.world_size.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import add_columns

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a NULL rank reads as 0 (harness.store.results): rows of one-process runs need no rewrite
    add_columns("step_timings", sa.Column("rank", sa.Integer, nullable=True))
    add_columns("runs", sa.Column("world_size", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("world_size")
    with op.batch_alter_table("step_timings") as batch:
        batch.drop_column("rank")
