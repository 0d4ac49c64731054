"""runs.artifacts: what the profiler left, {kind: path}."""

import sqlalchemy as sa

from harness.store.migrations.steps import column_revision

revision = "0005"
down_revision = "0004"

upgrade, downgrade = column_revision("runs", artifacts=sa.JSON)
