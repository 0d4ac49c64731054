"""block_timings: the per-block breakdown of `run --nvtx-detail` (`harness blocks`)."""

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import create_index, create_table

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    create_table(
        "block_timings",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("layer", sa.Integer, nullable=True),
        sa.Column("block", sa.String(32), nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("duration_ns", sa.BigInteger, nullable=False),
        sa.Column("calls", sa.Integer, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
    )
    create_index("ix_block_timings_run_id", "block_timings", ["run_id"])


def downgrade() -> None:
    op.drop_table("block_timings")
