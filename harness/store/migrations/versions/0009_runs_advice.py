"""runs.advice: the run's health and findings (analysis.advice.record), stored by `run --nsys`."""

import sqlalchemy as sa

from harness.store.migrations.steps import column_revision

revision = "0009"
down_revision = "0008"

upgrade, downgrade = column_revision("runs", advice=sa.JSON)
