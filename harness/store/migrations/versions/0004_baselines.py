"""baselines: named runs for `harness diff baseline:NAME RUN`."""

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import create_index, create_table, run_id

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    create_table(
        "baselines",
        sa.Column("name", sa.String(64), primary_key=True),
        run_id(),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    create_index("ix_baselines_run_id", "baselines", ["run_id"])


def downgrade() -> None:
    op.drop_table("baselines")
