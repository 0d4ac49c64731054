"""runs: the run-level energy figures of `run --power` (workloads.names.RUN_ENERGY_FIELDS)."""

import sqlalchemy as sa

from harness.store.migrations.steps import column_revision

revision = "0006"
down_revision = "0005"

# spelled out, not read from workloads.names: a revision records the schema of its day
FLOATS = ("energy_j", "avg_power_w", "peak_power_w", "flops_per_j", "tokens_per_j")

upgrade, downgrade = column_revision("runs", **dict.fromkeys(FLOATS, sa.Float), energy_method=sa.String(32))
