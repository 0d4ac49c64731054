"""The results database's tables (SQLAlchemy 2.0 ORM) and the one-row-per-run view of them.

`harness_meta` marks a database as ours and holds its schema version (harness.store.results reads it before
writing anything).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, String, Text, TypeDecorator
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from harness.store.fields import NotJson
from workloads.names import PROGRAM_MODE, RUN_ENERGY_FIELDS, percentile

# The compatibility level, kept in harness_meta: it rises only with a change that older harnesses must not
# write through (a dropped or retyped column). Additive changes are Alembic revisions
# (harness.store.migrations)
# and leave it alone, so an older harness can still use a database a newer one upgraded.
SCHEMA_VERSION = 1
# columns by which a table is known as ours (a `runs` table of another program lacks them)
SIGNATURES = {
    "runs": {"id", "created_at", "model", "mode", "device", "precision", "status", "config"},
    "step_timings": {"run_id", "step", "phase", "duration_ns", "warmup"},
    "agreement": {"run_id", "phase", "nvtx_mean_ns", "timer_mean_ns", "rel_diff"},
    "harness_meta": {"key", "value"},
}


class ReadAsStored(TypeDecorator[Any]):
    """A column read back as SQLAlchemy reads its type, or, where the database holds what that type cannot
    read (a row edited by hand), as `kept` makes it, for harness.store.stored_check to say so in one line:
    the reader's error raised out of the query, and one such row stopped every command that read its
    table."""

    cache_ok = True
    unreadable: tuple[type[Exception], ...] = (ValueError, TypeError)

    def kept(self, value: Any) -> Any:
        return value

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        inner = self.impl_instance.result_processor(dialect, coltype)
        if inner is None:
            return None

        def process(value: Any) -> Any:
            try:
                return inner(value)
            except self.unreadable:
                return self.kept(value)

        return process


class StoredJSON(ReadAsStored):
    """JSON, or the text that is no JSON there (NotJson)."""

    impl = JSON
    cache_ok = True
    unreadable = (ValueError, TypeError, RecursionError)

    def kept(self, value: Any) -> Any:
        return NotJson(value.decode(errors="backslashreplace") if isinstance(value, bytes) else value)


class StoredBool(ReadAsStored):
    """True or false, or what is there that the harness never writes as either (`x`, 2, 0.5) as it is:
    SQLAlchemy's Boolean reads a database without booleans (SQLite: 1 and 0) by truth, and took `x` for
    true."""

    impl = Boolean
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        def process(value: Any) -> Any:
            if value is None or isinstance(value, bool):
                return value
            return value == 1 if type(value) is int and value in (0, 1) else value

        return process


class Base(DeclarativeBase):
    # what a bare annotation gives besides SQLAlchemy's own (Mapped[int] is Integer)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        bool: StoredBool,
        float: Float,  # the schema's FLOAT (SQLAlchemy's own would be DOUBLE)
        datetime: DateTime(timezone=True),
        dict[str, Any]: StoredJSON,
        dict[str, str]: StoredJSON,
    }


class RunRow:
    """A row that belongs to a run, as migrations.steps.create_run_table makes its table: a numbered id and
    the run's id (indexed); the row goes with the run."""

    # sort_order: first in the table, as in the revisions, before the columns of the class
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True, sort_order=-1)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True, sort_order=-1)


class StoredTime(ReadAsStored):
    """A time, or what is there that is no time (`yesterday`, 5), as it is."""

    impl = DateTime(timezone=True)
    cache_ok = True


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(StoredTime)
    model: Mapped[str] = mapped_column(String(64), index=True)
    mode: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(16), index=True)
    device_name: Mapped[str] = mapped_column(String(128), default="")
    precision: Mapped[str] = mapped_column(String(8), index=True)
    compile: Mapped[bool] = mapped_column(default=False)
    attention: Mapped[str] = mapped_column(String(16))
    batch_size: Mapped[int]
    context_length: Mapped[int | None]
    warmup: Mapped[int]
    steps: Mapped[int]
    # ok | degraded (measured, but its capture failed its health checks) | oom | error | interrupted
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)  # why the status, when not ok
    # "none", or the profiler that watched the run ("nsys"); nsys_mode is light | full
    profiler: Mapped[str] = mapped_column(String(16), default="none")
    nsys_mode: Mapped[str | None] = mapped_column(String(16))
    # groups runs made together: "sweep-…" or "overhead-…"
    experiment: Mapped[str | None] = mapped_column(String(64), index=True)
    # a profiled run: the run without a profiler it is compared with (same configuration, made beside it)
    baseline_run_id: Mapped[str | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    params: Mapped[int | None]
    tokens_per_s: Mapped[float | None]
    flops_per_step: Mapped[float | None]
    achieved_flops: Mapped[float | None]
    mfu: Mapped[float | None]
    peak_memory_bytes: Mapped[int | None]
    nsys_rep: Mapped[str | None] = mapped_column(Text)
    nsys_sqlite: Mapped[str | None] = mapped_column(Text)
    # `run --power` (workloads.names.RUN_ENERGY_FIELDS); NULL without --power or without a power source
    energy_j: Mapped[float | None]
    avg_power_w: Mapped[float | None]
    peak_power_w: Mapped[float | None]
    flops_per_j: Mapped[float | None]
    tokens_per_j: Mapped[float | None]
    energy_method: Mapped[str | None] = mapped_column(String(32))
    # what the profiler left, {kind: path}: {"trace": …} (torch), {"nsys_rep": …, "nsys_sqlite": …} (nsys);
    # nsys_rep and nsys_sqlite above stay for the databases and readers that know only them
    artifacts: Mapped[dict[str, str] | None]
    # a run across ranks (`--nproc`): the number of ranks; NULL for a one-process run
    world_size: Mapped[int | None]
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    model_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    summary: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # the run's health and findings (analysis.advice.record): `run --nsys` stores them, `show` repeats them
    advice: Mapped[dict[str, Any] | None]

    step_timings: Mapped[list[StepTiming]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="StepTiming.step"
    )
    agreement: Mapped[list[Agreement]] = relationship(back_populates="run", cascade="all, delete-orphan")


class StepTiming(RunRow, Base):
    __tablename__ = "step_timings"

    step: Mapped[int]
    phase: Mapped[str] = mapped_column(String(32))
    duration_ns: Mapped[int]
    warmup: Mapped[bool]
    # the global rank that timed the step (runs across ranks); NULL in databases from before it means 0
    rank: Mapped[int | None] = mapped_column(default=0)

    run: Mapped[Run] = relationship(back_populates="step_timings")


class Agreement(RunRow, Base):
    """Per phase: NVTX range durations from the export against the in-process timers of the same steps."""

    __tablename__ = "agreement"

    phase: Mapped[str] = mapped_column(String(32))
    steps: Mapped[int]
    nvtx_mean_ns: Mapped[float]
    nvtx_median_ns: Mapped[float]
    timer_mean_ns: Mapped[float]
    timer_median_ns: Mapped[float]
    rel_diff: Mapped[float]  # (nvtx_mean - timer_mean) / timer_mean

    run: Mapped[Run] = relationship(back_populates="agreement")


class BlockTiming(RunRow, Base):
    """--nvtx-detail's per-block breakdown: one block's time in one measured step, summed over its `calls`.

    layer NULL: a block outside the layers (embedding, final norm, LM head). source: where the time comes
    from: timers (synchronised in-process hooks), torch-trace (record_function ranges, CPU time), nvtx (NVTX
    ranges of an nsys export, CPU time), nvtx-gpu (GPU time of the kernels launched inside the ranges).
    """

    __tablename__ = "block_timings"

    step: Mapped[int]
    layer: Mapped[int | None]
    block: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str] = mapped_column(String(32))
    duration_ns: Mapped[int] = mapped_column(BigInteger)
    calls: Mapped[int] = mapped_column(default=1)
    source: Mapped[str] = mapped_column(String(16))


BLOCK_COLUMNS = ["run_id", "step", "layer", "block", "phase", "duration_ns", "calls", "source"]


class Meta(Base):
    """What marks a database as ours: schema_version, and room for more."""

    __tablename__ = "harness_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class AttentionResult(Base):
    """One cell of `harness attention`: one implementation at one head dim × seq len. Times in ns."""

    __tablename__ = "attention_results"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    sweep_id: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(StoredTime)
    device: Mapped[str] = mapped_column(String(16))
    device_name: Mapped[str] = mapped_column(String(128), default="")
    impl: Mapped[str] = mapped_column(String(16))  # math | sdpa | compiled
    precision: Mapped[str] = mapped_column(String(8))
    batch_size: Mapped[int]
    num_heads: Mapped[int]
    head_dim: Mapped[int]
    seq_len: Mapped[int]
    causal: Mapped[bool]
    warmup: Mapped[int]
    trials: Mapped[int]
    status: Mapped[str] = mapped_column(String(16))  # ok | oom | error
    error: Mapped[str | None] = mapped_column(Text)
    forward_mean_ns: Mapped[float | None]
    forward_std_ns: Mapped[float | None]
    backward_mean_ns: Mapped[float | None]
    backward_std_ns: Mapped[float | None]
    compile_ns: Mapped[int | None] = mapped_column(BigInteger)
    # BigInteger: tens of GB overflow PostgreSQL's 32-bit INTEGER
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    memory_source: Mapped[str] = mapped_column(Text, default="")  # how peak_memory_bytes was measured
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)


# The AttentionCell fields stored as they are.
ATTENTION_CELL_COLUMNS = [
    "impl",
    "head_dim",
    "seq_len",
    "status",
    "error",
    "forward_mean_ns",
    "forward_std_ns",
    "backward_mean_ns",
    "backward_std_ns",
    "compile_ns",
    "peak_memory_bytes",
]
ATTENTION_COLUMNS = [
    "sweep_id",
    "created_at",
    "device",
    "device_name",
    "precision",
    "batch_size",
    "num_heads",
    "causal",
    "warmup",
    "trials",
    *ATTENTION_CELL_COLUMNS,
    "memory_source",
]
# what a cell's read checks (harness.store.stored_check.check_cell): its columns and the sweep's environment
ATTENTION_CHECKED = [*ATTENTION_COLUMNS, "env"]


class Baseline(Base):
    """A named run to diff against: `harness baseline tag NAME RUN`, then `harness diff baseline:NAME RUN`."""

    __tablename__ = "baselines"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(StoredTime)


OUR_TABLES = set(Base.metadata.tables)


def is_ours(columns: dict[str, set[str]]) -> bool:
    """Whether a database whose tables of our names have these columns is a harness results database: some
    of our tables, each with our columns. One being created by another process at this moment has some of
    them; one from before harness_meta has all but that one."""
    present = {t: c for t, c in columns.items() if t in SIGNATURES}
    return bool(present) and all(c >= SIGNATURES[t] for t, c in present.items())


# generate's serving figures in the runs' table (the run's summary holds them all: harness.execution.generate)
SERVING_COLUMNS = [
    "decode_path", "ttft_mean_ns", "ttft_p50_ns", "ttft_p99_ns", "tpot_mean_ns", "tpot_p50_ns", "tpot_p90_ns",
    "tpot_p99_ns", "decode_tokens_per_s", "kv_cache_bytes", "kv_cache_analytic_bytes", "decode_gpu_busy",
]  # fmt: skip


def serving_row(serving: dict[str, Any]) -> dict[str, Any]:
    """SERVING_COLUMNS of a run's serving figures (None where a run has none: not a generate run; and a
    percentile of too few samples, workloads.names.PERCENTILE_SAMPLES)."""
    ttft, tpot = serving.get("ttft_ns") or {}, serving.get("tpot_ns") or {}
    return {
        "decode_path": serving.get("decode"),
        "ttft_mean_ns": ttft.get("mean_ns"),
        "ttft_p50_ns": percentile(ttft, 50),
        "ttft_p99_ns": percentile(ttft, 99),
        "tpot_mean_ns": tpot.get("mean_ns"),
        "tpot_p50_ns": percentile(tpot, 50),
        "tpot_p90_ns": percentile(tpot, 90),
        "tpot_p99_ns": percentile(tpot, 99),
        "decode_tokens_per_s": serving.get("decode_tokens_per_s"),  # batch / TPOT mean
        "kv_cache_bytes": serving.get("kv_cache_bytes"),
        "kv_cache_analytic_bytes": serving.get("kv_cache_analytic_bytes"),
        "decode_gpu_busy": serving.get("decode_gpu_busy"),  # a share (0–1) from a capture of the GPU
    }


RUN_COLUMNS = [
    "run_id",
    "created_at",
    "model",
    "mode",
    "device",
    "device_name",
    "precision",
    "compile",
    "attention",
    "batch_size",
    "context_length",
    "new_tokens",
    "status",
    "profiler",
    "nsys_mode",
    "experiment",
    "baseline_run_id",
    "params",
    "d_model",
    "d_ff",
    "num_layers",
    "num_heads",
    "forward_mean_ns",
    "forward_std_ns",
    "backward_mean_ns",
    "backward_std_ns",
    "allreduce_mean_ns",
    "allreduce_std_ns",
    "optimizer_mean_ns",
    "optimizer_std_ns",
    "prefill_mean_ns",
    "prefill_std_ns",
    "decode_mean_ns",
    "decode_std_ns",
    *SERVING_COLUMNS,
    "tokens_per_s",
    "achieved_flops",
    "mfu",
    "peak_memory_bytes",
    "nsys_rep",
    "nsys_sqlite",
    *RUN_ENERGY_FIELDS,
    "power_notes",
    "artifacts",
    "world_size",
    "advice",
    "optimize",
]


# the columns of RUN_COLUMNS that count things: whole numbers, empty where a run has none (a run of another
# mode, one that failed before its model was built), never 64.0 beside an empty row in csv
WHOLE_COLUMNS = (
    "batch_size", "context_length", "new_tokens", "params", "d_model", "d_ff", "num_layers", "num_heads",
    "kv_cache_bytes", "kv_cache_analytic_bytes", "peak_memory_bytes", "world_size",
)  # fmt: skip


def stored_std(figures: dict[str, Any]) -> float | None:
    """A stored phase's standard deviation (its summary's `phases` entry): None over fewer than two steps,
    where it is undefined. Databases written before that rule hold 0.0 there; they read the same."""
    return figures.get("std_ns") if figures.get("count", 0) > 1 else None


def stored_time(when: datetime | None) -> str | None:
    """A stored time as people and scripts read it: ISO 8601 to the second, with its zone (UTC). SQLite gives
    back what was stored without its zone, which read as local time beside a run id's local time."""
    if when is None:
        return None
    return (when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)).isoformat(
        timespec="seconds"
    )


def run_row(r: Run) -> dict[str, Any]:
    phases = {p["phase"]: p for p in (r.summary or {}).get("phases", [])}
    info = r.model_info or {}
    # a program's run (`profile -- CMD`) ran no workload of ours: it has no batch and was not compiled (its
    # row holds 0 and False, as the columns take no NULL)
    program = r.mode == PROGRAM_MODE

    def stat(phase: str, key: str) -> float | None:
        if phase not in phases:
            return None
        return stored_std(phases[phase]) if key == "std_ns" else phases[phase][key]

    return {
        "run_id": r.id,
        "created_at": stored_time(r.created_at),
        "model": r.model,
        "mode": r.mode,
        "device": r.device,
        "device_name": r.device_name,
        "precision": r.precision,
        "compile": None if program else r.compile,
        "attention": r.attention,
        "batch_size": None if program else r.batch_size,
        "context_length": r.context_length,
        # generate's tokens decoded after the prompt (its setting); None for the other modes, which have none
        "new_tokens": (r.config or {}).get("new_tokens") if r.mode == "generate" else None,
        "status": r.status,
        "profiler": r.profiler,
        "nsys_mode": r.nsys_mode,
        "experiment": r.experiment,
        "baseline_run_id": r.baseline_run_id,
        "params": r.params,
        "d_model": info.get("d_model"),
        "d_ff": info.get("d_ff"),
        "num_layers": info.get("num_layers"),
        "num_heads": info.get("num_heads"),
        "forward_mean_ns": stat("forward", "mean_ns"),
        "forward_std_ns": stat("forward", "std_ns"),
        "backward_mean_ns": stat("backward", "mean_ns"),
        "backward_std_ns": stat("backward", "std_ns"),
        # a train run across ranks: the gradient all-reduce, a phase of its step (None for one process)
        "allreduce_mean_ns": stat("allreduce", "mean_ns"),
        "allreduce_std_ns": stat("allreduce", "std_ns"),
        "optimizer_mean_ns": stat("optimizer", "mean_ns"),
        "optimizer_std_ns": stat("optimizer", "std_ns"),
        "prefill_mean_ns": stat("prefill", "mean_ns"),
        "prefill_std_ns": stat("prefill", "std_ns"),
        "decode_mean_ns": stat("decode", "mean_ns"),
        "decode_std_ns": stat("decode", "std_ns"),
        **serving_row((r.summary or {}).get("serving") or {}),
        "tokens_per_s": r.tokens_per_s,
        "achieved_flops": r.achieved_flops,
        "mfu": r.mfu,
        "peak_memory_bytes": r.peak_memory_bytes,
        "nsys_rep": r.nsys_rep,
        "nsys_sqlite": r.nsys_sqlite,
        **{name: getattr(r, name) for name in RUN_ENERGY_FIELDS},
        # `--power` runs only: the sources found and why others were not (one line each); None without it
        "power_notes": "\n".join(notes)
        if (notes := (r.summary or {}).get("power_notes")) is not None
        else None,
        "artifacts": r.artifacts,
        "world_size": r.world_size,
        "advice": r.advice,
        # a run of `harness optimize`: its part (role, stack of changes, the change it tries, its verdict)
        "optimize": (r.summary or {}).get("optimize"),
    }
