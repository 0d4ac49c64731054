"""runs: the run-level energy figures of `run --power` (workloads.names.RUN_ENERGY_FIELDS).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import add_columns

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# spelled out, not read from workloads.names: a revision records the schema of its day
FLOATS = ("energy_j", "avg_power_w", "peak_power_w", "flops_per_j", "tokens_per_j")


def upgrade() -> None:
    add_columns(
        "runs",
        *(sa.Column(name, sa.Float, nullable=True) for name in FLOATS),
        sa.Column("energy_method", sa.String(32), nullable=True),
    )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for name in (*FLOATS, "energy_method"):
            batch.drop_column(name)
