"""The results database: every run, its steps, and what profiling found. SQLAlchemy 2.0 ORM.

An embedded SQLite file by default; any SQLAlchemy URL (PostgreSQL included) through `--db` or `HARNESS_DB`.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    create_engine,
    select,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from harness.errors import HarnessError, first_line
from harness.records import RunResult

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.engine import Engine


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    model: Mapped[str] = mapped_column(String(64), index=True)
    mode: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(16), index=True)
    device_name: Mapped[str] = mapped_column(String(128), default="")
    precision: Mapped[str] = mapped_column(String(8), index=True)
    compile: Mapped[bool] = mapped_column(Boolean, default=False)
    attention: Mapped[str] = mapped_column(String(16))
    batch_size: Mapped[int] = mapped_column(Integer)
    context_length: Mapped[int | None] = mapped_column(Integer, nullable=True)
    warmup: Mapped[int] = mapped_column(Integer)
    steps: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # ok | oom | error
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # "none", or the profiler that watched the run ("nsys"); nsys_mode is light | full
    profiler: Mapped[str] = mapped_column(String(16), default="none")
    nsys_mode: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # groups runs made together: "sweep-…" or "overhead-…"
    experiment: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    # a profiled run: the run without a profiler it is compared with (same configuration, made beside it)
    baseline_run_id: Mapped[str | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), nullable=True, index=True
    )
    params: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    flops_per_step: Mapped[float | None] = mapped_column(Float, nullable=True)
    achieved_flops: Mapped[float | None] = mapped_column(Float, nullable=True)
    mfu: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_memory_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    nsys_rep: Mapped[str | None] = mapped_column(Text, nullable=True)
    nsys_sqlite: Mapped[str | None] = mapped_column(Text, nullable=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    model_info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    env: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    step_timings: Mapped[list[StepTiming]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="StepTiming.step"
    )
    agreement: Mapped[list[Agreement]] = relationship(back_populates="run", cascade="all, delete-orphan")


class StepTiming(Base):
    __tablename__ = "step_timings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(32))
    duration_ns: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[bool] = mapped_column(Boolean)

    run: Mapped[Run] = relationship(back_populates="step_timings")


class Agreement(Base):
    """Per phase: NVTX range durations from the export against the in-process timers of the same steps."""

    __tablename__ = "agreement"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    phase: Mapped[str] = mapped_column(String(32))
    steps: Mapped[int] = mapped_column(Integer)
    nvtx_mean_ns: Mapped[float] = mapped_column(Float)
    nvtx_median_ns: Mapped[float] = mapped_column(Float)
    timer_mean_ns: Mapped[float] = mapped_column(Float)
    timer_median_ns: Mapped[float] = mapped_column(Float)
    rel_diff: Mapped[float] = mapped_column(Float)  # (nvtx_mean - timer_mean) / timer_mean

    run: Mapped[Run] = relationship(back_populates="agreement")


def _add_new_columns(engine: Engine) -> None:
    """Add the nullable columns a database made by an older harness lacks (create_all only adds tables)."""
    from sqlalchemy import inspect
    from sqlalchemy.schema import CreateColumn

    inspector = inspect(engine)
    for table in Base.metadata.sorted_tables:
        have = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have and column.nullable:
                ddl = CreateColumn(column).compile(dialect=engine.dialect)
                with engine.begin() as conn:
                    conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {ddl}")


def default_db_path() -> Path:
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "harness" / "results.sqlite"


def resolve_url(db: str | None = None) -> str:
    """`--db` value, else HARNESS_DB, else the default SQLite file. Plain paths become sqlite URLs."""
    db = db or os.environ.get("HARNESS_DB") or str(default_db_path())
    if "://" in db:
        return db
    path = Path(db).expanduser()
    return f"sqlite:///{path.resolve()}"


def describe_url(url: str) -> str:
    """The URL without its password, for display."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


class ResultsStore:
    """Open (and create if needed) the results database."""

    def __init__(self, db: str | None = None) -> None:
        self.url = resolve_url(db)
        try:
            if self.url.startswith("sqlite:///"):
                Path(self.url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(self.url)
            Base.metadata.create_all(self.engine)
            _add_new_columns(self.engine)
        except (SQLAlchemyError, OSError, ValueError) as e:
            raise HarnessError(
                f"cannot open results database {describe_url(self.url)}: {first_line(e)}. "
                "Pass --db PATH_OR_URL or set HARNESS_DB to a writable location."
            ) from None

    def save(
        self,
        result: RunResult,
        *,
        profiler: str = "none",
        nsys_mode: str | None = None,
        experiment: str | None = None,
        nsys_rep: str | None = None,
        nsys_sqlite: str | None = None,
        baseline_run_id: str | None = None,
    ) -> str:
        cfg = result.config
        run = Run(
            id=result.run_id,
            created_at=datetime.now(UTC),
            model=cfg.model,
            mode=cfg.mode,
            device=result.device,
            device_name=result.device_name,
            precision=cfg.precision,
            compile=cfg.compile,
            attention=cfg.attention,
            batch_size=cfg.batch_size,
            context_length=result.model.context_length if result.model else cfg.context_length,
            warmup=cfg.warmup,
            steps=cfg.steps,
            status=result.status,
            error=result.error,
            profiler=profiler,
            nsys_mode=nsys_mode,
            experiment=experiment,
            baseline_run_id=baseline_run_id,
            params=result.model.params if result.model else None,
            tokens_per_s=result.tokens_per_s,
            flops_per_step=result.flops_per_step,
            achieved_flops=result.achieved_flops,
            mfu=result.mfu,
            peak_memory_bytes=result.peak_memory_bytes,
            nsys_rep=nsys_rep,
            nsys_sqlite=nsys_sqlite,
            config=cfg.to_dict(),
            model_info=asdict(result.model) if result.model else {},
            env=result.env,
            summary={
                "phases": [asdict(s) for s in result.phase_stats()],
                **result.extra,
            },
        )
        run.step_timings = [
            StepTiming(step=s.step, phase=phase, duration_ns=ns, warmup=s.warmup)
            for s in result.steps
            for phase, ns in s.phases.items()
        ]
        with Session(self.engine) as session, session.begin():
            session.merge(run)
        return run.id

    def save_agreement(self, run_id: str, table: pd.DataFrame) -> None:
        """`table` as returned by harness.agreement.agreement_table."""
        with Session(self.engine) as session, session.begin():
            for row in table.itertuples(index=False):
                session.add(
                    Agreement(
                        run_id=run_id,
                        phase=row.phase,
                        steps=int(row.steps),
                        nvtx_mean_ns=float(row.nvtx_mean_ns),
                        nvtx_median_ns=float(row.nvtx_median_ns),
                        timer_mean_ns=float(row.timer_mean_ns),
                        timer_median_ns=float(row.timer_median_ns),
                        rel_diff=float(row.rel_diff),
                    )
                )

    def get(self, run_id: str) -> Run:
        with Session(self.engine, expire_on_commit=False) as session:
            run = session.get(Run, run_id)
            if run is None:
                # accept a unique prefix, like git does for commits
                matches = session.scalars(select(Run).where(Run.id.startswith(run_id, autoescape=True))).all()
                if len(matches) != 1:
                    what = "no run" if not matches else f"{len(matches)} runs"
                    raise HarnessError(
                        f"{what} with id {run_id!r}; `harness runs` lists the runs", exit_code=2
                    )
                run = matches[0]
            run.step_timings  # noqa: B018  (load before the session closes)
            run.agreement  # noqa: B018
            return run

    def linked(self, run_id: str) -> list[Run]:
        """The runs paired with `run_id`: its baseline, and the profiled runs with it as their baseline."""
        with Session(self.engine, expire_on_commit=False) as session:
            run = session.get(Run, run_id)
            if run is None:
                return []
            stmt = (
                select(Run)
                .where((Run.id == run.baseline_run_id) | (Run.baseline_run_id == run_id))
                .order_by(Run.created_at)
            )
            found = list(session.scalars(stmt).all())
            for r in found:
                r.step_timings  # noqa: B018  (load before the session closes)
            return found

    def runs(
        self,
        *,
        model: str | None = None,
        device: str | None = None,
        precision: str | None = None,
        experiment: str | None = None,
        ids: list[str] | None = None,
        last: int | None = None,
    ) -> pd.DataFrame:
        """One row per run, newest last, with per-phase mean/std (ns) as columns."""
        import pandas as pd

        stmt = select(Run).order_by(Run.created_at)
        if model:
            stmt = stmt.where(Run.model == model)
        if device:
            stmt = stmt.where(Run.device == device)
        if precision:
            stmt = stmt.where(Run.precision == precision)
        if experiment:
            stmt = stmt.where(Run.experiment == experiment)
        if ids:
            stmt = stmt.where(Run.id.in_(ids))
        with Session(self.engine) as session:
            rows = session.scalars(stmt).all()
            records = [run_row(r) for r in rows]
        df = pd.DataFrame.from_records(records, columns=RUN_COLUMNS)
        if last is not None:
            df = df.tail(last).reset_index(drop=True)
        return df

    def step_timings(self, run_ids: list[str] | None = None) -> pd.DataFrame:
        """Every step's phase durations: run_id, step, phase, duration_ns, warmup."""
        import pandas as pd

        stmt = select(
            StepTiming.run_id, StepTiming.step, StepTiming.phase, StepTiming.duration_ns, StepTiming.warmup
        ).order_by(StepTiming.run_id, StepTiming.step)
        if run_ids is not None:
            stmt = stmt.where(StepTiming.run_id.in_(run_ids))
        with self.engine.connect() as conn:
            return pd.DataFrame(
                conn.execute(stmt).all(), columns=["run_id", "step", "phase", "duration_ns", "warmup"]
            )

    def agreement(self, run_ids: list[str] | None = None) -> pd.DataFrame:
        import pandas as pd

        cols = [
            "run_id",
            "phase",
            "steps",
            "nvtx_mean_ns",
            "nvtx_median_ns",
            "timer_mean_ns",
            "timer_median_ns",
            "rel_diff",
        ]
        stmt = select(*(getattr(Agreement, c) for c in cols))
        if run_ids is not None:
            stmt = stmt.where(Agreement.run_id.in_(run_ids))
        with self.engine.connect() as conn:
            return pd.DataFrame(conn.execute(stmt).all(), columns=cols)


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
    "optimizer_mean_ns",
    "optimizer_std_ns",
    "prefill_mean_ns",
    "decode_mean_ns",
    "tokens_per_s",
    "achieved_flops",
    "mfu",
    "peak_memory_bytes",
    "nsys_rep",
    "nsys_sqlite",
]


def run_row(r: Run) -> dict[str, Any]:
    phases = {p["phase"]: p for p in (r.summary or {}).get("phases", [])}
    info = r.model_info or {}

    def stat(phase: str, key: str) -> float | None:
        return phases[phase][key] if phase in phases else None

    return {
        "run_id": r.id,
        "created_at": r.created_at.isoformat(timespec="seconds") if r.created_at else None,
        "model": r.model,
        "mode": r.mode,
        "device": r.device,
        "device_name": r.device_name,
        "precision": r.precision,
        "compile": r.compile,
        "attention": r.attention,
        "batch_size": r.batch_size,
        "context_length": r.context_length,
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
        "optimizer_mean_ns": stat("optimizer", "mean_ns"),
        "optimizer_std_ns": stat("optimizer", "std_ns"),
        "prefill_mean_ns": stat("prefill", "mean_ns"),
        "decode_mean_ns": stat("decode", "mean_ns"),
        "tokens_per_s": r.tokens_per_s,
        "achieved_flops": r.achieved_flops,
        "mfu": r.mfu,
        "peak_memory_bytes": r.peak_memory_bytes,
        "nsys_rep": r.nsys_rep,
        "nsys_sqlite": r.nsys_sqlite,
    }
