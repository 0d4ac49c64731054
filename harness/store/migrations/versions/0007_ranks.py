"""Runs across ranks (`run --nproc`): step_timings.rank, runs.world_size."""

import sqlalchemy as sa

from harness.store.migrations.steps import add_columns, drop_columns

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    # a NULL rank reads as 0 (harness.store.results): rows of one-process runs need no rewrite
    add_columns("step_timings", sa.Column("rank", sa.Integer))
    add_columns("runs", sa.Column("world_size", sa.Integer))


def downgrade() -> None:
    drop_columns("runs", "world_size")
    drop_columns("step_timings", "rank")
