"""runs: the run-level energy figures of `run --power` (workloads.names.RUN_ENERGY_FIELDS)."""

import sqlalchemy as sa

from harness.store.migrations.steps import add_columns, drop_columns

revision = "0006"
down_revision = "0005"

# spelled out, not read from workloads.names: a revision records the schema of its day
FLOATS = ("energy_j", "avg_power_w", "peak_power_w", "flops_per_j", "tokens_per_j")


def upgrade() -> None:
    add_columns(
        "runs",
        *(sa.Column(name, sa.Float) for name in FLOATS),
        sa.Column("energy_method", sa.String(32)),
    )


def downgrade() -> None:
    drop_columns("runs", *FLOATS, "energy_method")
