"""Baseline: the results database as the first harness with harness/store/schema.py made it (commit 11cbcff):
runs, step_timings, agreement and the harness_meta marker."""

import sqlalchemy as sa
from alembic import context, op

from harness.store.migrations.steps import create_index, create_run_table, create_table

revision = "0001"
down_revision = None


def upgrade() -> None:
    create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("device_name", sa.String(128), nullable=False),
        sa.Column("precision", sa.String(8), nullable=False),
        sa.Column("compile", sa.Boolean, nullable=False),
        sa.Column("attention", sa.String(16), nullable=False),
        sa.Column("batch_size", sa.Integer, nullable=False),
        sa.Column("context_length", sa.Integer),
        sa.Column("warmup", sa.Integer, nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("profiler", sa.String(16), nullable=False),
        sa.Column("nsys_mode", sa.String(16)),
        sa.Column("experiment", sa.String(64)),
        sa.Column("params", sa.Integer),
        sa.Column("tokens_per_s", sa.Float),
        sa.Column("flops_per_step", sa.Float),
        sa.Column("achieved_flops", sa.Float),
        sa.Column("mfu", sa.Float),
        sa.Column("peak_memory_bytes", sa.Integer),
        sa.Column("nsys_rep", sa.Text),
        sa.Column("nsys_sqlite", sa.Text),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("model_info", sa.JSON, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("summary", sa.JSON, nullable=False),
    )
    for column in ("model", "device", "precision", "experiment"):
        create_index(f"ix_runs_{column}", "runs", [column])
    create_run_table(
        "step_timings",
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("duration_ns", sa.Integer, nullable=False),
        sa.Column("warmup", sa.Boolean, nullable=False),
    )
    create_run_table(
        "agreement",
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("nvtx_mean_ns", sa.Float, nullable=False),
        sa.Column("nvtx_median_ns", sa.Float, nullable=False),
        sa.Column("timer_mean_ns", sa.Float, nullable=False),
        sa.Column("timer_median_ns", sa.Float, nullable=False),
        sa.Column("rel_diff", sa.Float, nullable=False),
    )
    if not context.config.attributes.get("leave_marker"):  # a read-only command's upgrade leaves it out
        create_table(
            "harness_meta",
            sa.Column("key", sa.String(64), primary_key=True),
            sa.Column("value", sa.Text, nullable=False),
        )


def downgrade() -> None:
    for table in ("agreement", "step_timings", "runs", "harness_meta"):
        op.drop_table(table)
