"""block_timings: the per-block breakdown of `run --nvtx-detail` (`harness blocks`)."""

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import create_run_table

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    create_run_table(
        "block_timings",
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("layer", sa.Integer),
        sa.Column("block", sa.String(32), nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("duration_ns", sa.BigInteger, nullable=False),
        sa.Column("calls", sa.Integer, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("block_timings")
