"""attention_results: the cells of `harness attention`."""

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import create_index, create_table

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    create_table(
        "attention_results",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("sweep_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("device_name", sa.String(128), nullable=False),
        sa.Column("impl", sa.String(16), nullable=False),
        sa.Column("precision", sa.String(8), nullable=False),
        sa.Column("batch_size", sa.Integer, nullable=False),
        sa.Column("num_heads", sa.Integer, nullable=False),
        sa.Column("head_dim", sa.Integer, nullable=False),
        sa.Column("seq_len", sa.Integer, nullable=False),
        sa.Column("causal", sa.Boolean, nullable=False),
        sa.Column("warmup", sa.Integer, nullable=False),
        sa.Column("trials", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("forward_mean_ns", sa.Float),
        sa.Column("forward_std_ns", sa.Float),
        sa.Column("backward_mean_ns", sa.Float),
        sa.Column("backward_std_ns", sa.Float),
        sa.Column("compile_ns", sa.BigInteger),
        sa.Column("peak_memory_bytes", sa.BigInteger),
        sa.Column("memory_source", sa.Text, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
    )
    create_index("ix_attention_results_sweep_id", "attention_results", ["sweep_id"])


def downgrade() -> None:
    op.drop_table("attention_results")
