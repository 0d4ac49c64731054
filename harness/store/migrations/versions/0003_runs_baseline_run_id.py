"""runs.baseline_run_id: a profiled run's run without a profiler."""

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import add_columns, create_index, drop_columns, is_sqlite

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    added = add_columns("runs", sa.Column("baseline_run_id", sa.String(64)))
    create_index("ix_runs_baseline_run_id", "runs", ["baseline_run_id"])
    # SQLite cannot add a constraint in place (it would copy the whole table), and the harness never turns
    # its foreign keys on: there the column stays a plain one, as the additive upgrades left it
    if added and not is_sqlite():
        op.create_foreign_key(
            "fk_runs_baseline_run_id_runs", "runs", "runs", ["baseline_run_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    op.drop_index("ix_runs_baseline_run_id", "runs")
    drop_columns("runs", "baseline_run_id")
