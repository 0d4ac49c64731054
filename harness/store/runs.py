"""Runs in the results database: save one (or import one saved to a file), read one, list them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from harness.core import signals
from harness.core.errors import EMPTY_RUN_ID, HarnessError
from harness.core.records import RunResult, names_a_file, newest_back
from harness.store import stored_check, unsaved
from harness.store.attention import sweep_not_run
from harness.store.schema import (
    RUN_COLUMNS,
    WHOLE_COLUMNS,
    Agreement,
    Baseline,
    BlockTiming,
    Run,
    StepTiming,
    run_row,
)
from harness.store.timings import block_rows, damaged_steps
from harness.store.unsaved import PendingRun
from workloads.names import BLOCK_TIMERS, RUN_ENERGY_FIELDS, counted

if TYPE_CHECKING:
    import pandas as pd

from harness.store.database import Database, Imported, UnsavedRun
from harness.store.location import default_db_path


def whole(column: pd.Series) -> pd.Series:
    """`column` as pandas' nullable Int64 where every value it has is a whole number, else as it is."""
    import pandas as pd

    values = pd.to_numeric(column, errors="coerce")
    if values.notna().sum() != column.notna().sum() or (values.dropna() % 1 != 0).any():
        return column
    return values.astype("Int64")


def _nth_newest(session: Session, back: int) -> Run | None:
    stmt = select(Run).order_by(Run.created_at.desc(), Run.id.desc()).offset(back).limit(1)
    return session.scalars(stmt).first()


def _utc(when: datetime) -> datetime:
    """`when` as naive UTC (SQLite gives back what it stored without its zone)."""
    return when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo is not None else when


TOKEN_TIMINGS = "token_timings"  # the run's summary: generate's per-token times, a list per step


def token_timings(result: RunResult) -> dict[str, Any]:
    """Each step's decoded tokens' times (ns), for the summary: {"token_timings": [{step, rank, warmup,
    durations_ns}, …]}; nothing for a run without them. Every token's time is kept (TPOT's percentiles are
    drawn from them and can be drawn again)."""
    rows = [
        {"step": s.step, "rank": s.rank, "warmup": s.warmup, "durations_ns": list(s.tokens)}
        for s in result.steps
        if s.tokens
    ]
    return {TOKEN_TIMINGS: rows} if rows else {}


def _differences(stored: Run, pending: PendingRun) -> list[str]:
    """What tells `pending` from the run stored (nothing: the same run, imported before)."""
    result = pending.result
    mine = sorted((s.step, p, ns, s.warmup, s.rank) for s in result.steps for p, ns in s.phases.items())
    theirs = sorted((t.step, t.phase, t.duration_ns, t.warmup, t.rank) for t in stored.step_timings)
    return [
        what
        for what, differs in (
            ("status", stored.status != result.status),
            ("step times", mine != theirs),
            ("creation time", _utc(stored.created_at) != _utc(pending.created_at)),
        )
        if differs
    ]


def _in_words(status: str, model: str, mode: str, created: datetime, measured: int) -> str:
    at = f"{_utc(created):%Y-%m-%d %H:%M:%S}"
    return f"{status}, {model} {mode}, created {at} UTC, {counted(measured, 'measured step')}"


def _described(run: Run) -> str:
    measured = len({(t.step, t.rank) for t in run.step_timings if not t.warmup})
    return _in_words(run.status, run.model, run.mode, run.created_at, measured)


def _described_pending(pending: PendingRun) -> str:
    r = pending.result
    measured = len({(s.step, s.rank) for s in r.steps if not s.warmup})
    return _in_words(r.status, r.config.model, r.config.mode, pending.created_at, measured)


class RunsPart(Database):
    # --- writing ---------------------------------------------------------------------------------------

    def save(
        self,
        result: RunResult,
        *,
        profiler: str = "none",
        nsys_mode: str | None = None,
        experiment: str | None = None,
        nsys_rep: str | None = None,
        nsys_sqlite: str | None = None,
        artifacts: dict[str, str] | None = None,
        agreement: pd.DataFrame | None = None,
        baseline_run_id: str | None = None,
        advice: dict[str, Any] | None = None,
        blocks: tuple[pd.DataFrame, str] | None = None,
    ) -> str:
        """Store a run, in one transaction (again: its row, steps and, if given, agreement are replaced):
        with what its analysis found, its `advice` (health and findings) and the per-block times read
        from its trace (`blocks`: records and their source, in place of the worker's block timers).

        When the database will not take it, the run goes to a file (without advice and trace blocks) and
        UnsavedRun says where.
        """
        pending = PendingRun(
            result=result,
            created_at=datetime.now(UTC),
            profiler=profiler,
            nsys_mode=nsys_mode,
            experiment=experiment,
            baseline_run_id=baseline_run_id,
            nsys_rep=nsys_rep,
            nsys_sqlite=nsys_sqlite,
            artifacts=artifacts or None,
            agreement=unsaved.agreement_rows(agreement) if agreement is not None else None,
        )
        with signals.deferred() as held:  # Ctrl-C lands after the run is in the database or in a file
            try:
                self._guard(lambda: self._write(pending, advice, blocks), stop=lambda: bool(held))
                return result.run_id
            except HarnessError as e:
                why = str(e)
                if held:  # a signal ended the wait: say so, and hand the signal to the caller
                    why = f"{signals.name(held[0])} came while it waited ({why})"
                path = unsaved.write(pending, self._unsaved_folders(), why)
                sig = held.pop(0) if held else None
                held.clear()
        raise UnsavedRun(
            f"run {result.run_id} is not in the results database: {why}. It was written to {path}; "
            f"`harness import {path}` stores it",
            path,
            signal=sig,
            run_id=result.run_id,
            reason=why,
        )

    def save_agreement(self, run_id: str, table: pd.DataFrame) -> None:
        """`table` as returned by analysis.compare.agreement.agreement_table; replaces the run's agreement
        rows."""
        rows = unsaved.agreement_rows(table)

        def write() -> None:
            with Session(self.engine) as session, session.begin():
                session.execute(delete(Agreement).where(Agreement.run_id == run_id))
                session.add_all(Agreement(run_id=run_id, **row) for row in rows)

        self._guard(write)

    def save_advice(
        self, run_id: str, record: dict[str, Any], *, status: str | None = None, error: str | None = None
    ) -> None:
        """The run's health and findings (analysis.advice.record), replacing what it had; with `status`, the
        run's status and its reason too (`degraded`: its capture failed its health checks)."""

        def write() -> None:
            with Session(self.engine) as session, session.begin():
                run = session.get(Run, run_id)
                if run is not None:
                    run.advice = record
                    if status is not None:
                        run.status, run.error = status, error

        self._guard(write)

    def import_file(
        self,
        path: Path,
        *,
        profilers: Sequence[str],
        replace: bool = False,
        pending: unsaved.PendingRun | None = None,
    ) -> Imported:
        """Store a run from a harness-unsaved-*.json file, its profiler one of `profilers` (the registry's
        names; `pending`: the file as unsaved.read read it already). A run of the same id already stored is
        never replaced unless `replace`: the same run (imported from this file before: its creation time,
        status and step times alike) is left as it is, another one is refused with both described."""
        pending = pending if pending is not None else unsaved.read(path, profilers)
        run_id = pending.result.run_id

        def write() -> Imported:
            with Session(self.engine) as session:
                stored = session.get(Run, run_id)
                differs = _differences(stored, pending) if stored is not None else []
                was = _described(stored) if stored is not None else None
            if stored is None:
                self._write(pending)
                return Imported(file=path, run_id=run_id, stored="new")
            if not differs:
                return Imported(file=path, run_id=run_id, stored="already stored", was=was)
            if not replace:
                raise HarnessError(
                    f"run {run_id} is already in the results database ({was}); {path} holds another copy "
                    f"of it ({_described_pending(pending)}; its {' and '.join(differs)} differ): nothing "
                    "imported; --replace replaces the stored run with the file's"
                )
            self._write(pending)
            return Imported(file=path, run_id=run_id, stored="replaced", was=was)

        return self._guard(write)

    def _write(
        self,
        pending: PendingRun,
        advice: dict[str, Any] | None = None,
        blocks: tuple[pd.DataFrame, str] | None = None,
    ) -> None:
        if self.readonly:
            raise RuntimeError("ResultsStore opened read-only")

        result, cfg = pending.result, pending.result.config
        energy = result.extra.get("energy_summary") or {}
        run = Run(
            id=result.run_id,
            created_at=pending.created_at,
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
            profiler=pending.profiler,
            nsys_mode=pending.nsys_mode,
            experiment=pending.experiment,
            baseline_run_id=pending.baseline_run_id,
            params=result.model.params if result.model else None,
            tokens_per_s=result.tokens_per_s,
            flops_per_step=result.flops_per_step,
            achieved_flops=result.achieved_flops,
            mfu=result.mfu,
            peak_memory_bytes=result.peak_memory_bytes,
            nsys_rep=pending.nsys_rep,
            nsys_sqlite=pending.nsys_sqlite,
            **{name: energy.get(name) for name in RUN_ENERGY_FIELDS},
            # a run's own files (--memory's snapshot) beside the profiler's
            artifacts={**(result.extra.get("artifacts") or {}), **(pending.artifacts or {})} or None,
            world_size=cfg.world_size if cfg.world_size > 1 else None,
            config=cfg.to_dict(),
            model_info=asdict(result.model) if result.model else {},
            env=result.env,
            **({"advice": advice} if advice is not None else {}),  # None: leave what is stored
            summary={**result.extra, **token_timings(result)},
        )
        # relationships are left unset on `run`, so merge leaves them alone: the rows are replaced here
        with Session(self.engine) as session, session.begin():
            session.execute(delete(StepTiming).where(StepTiming.run_id == run.id))
            if result.blocks or blocks is not None:
                session.execute(delete(BlockTiming).where(BlockTiming.run_id == run.id))
            if pending.agreement is not None:
                session.execute(delete(Agreement).where(Agreement.run_id == run.id))
            session.merge(run)
            steps = [
                {"run_id": run.id, "step": s.step, "phase": phase, "duration_ns": ns, "warmup": s.warmup,
                 "rank": s.rank}
                for s in result.steps
                for phase, ns in s.phases.items()
            ]  # fmt: skip
            if steps:  # one executemany, not an object a row: 300,000 rows took 40 s as objects
                session.flush()  # the run's row first: the steps' foreign key names it
                session.execute(insert(StepTiming.__table__), steps)
            session.add_all(Agreement(run_id=run.id, **row) for row in pending.agreement or [])
            if blocks is not None:  # read from the trace: they replace the worker's
                session.add_all(block_rows(run.id, *blocks))
            else:
                session.add_all(
                    BlockTiming(run_id=run.id, source=BLOCK_TIMERS, **asdict(b)) for b in result.blocks
                )

    def _unsaved_folders(self) -> list[Path]:
        beside = [self.file.absolute().parent] if self.file is not None else []
        return [*beside, default_db_path().parent]

    # --- reading ---------------------------------------------------------------------------------------

    def count_runs(self) -> int:
        def count() -> int:
            with Session(self.engine) as session:
                return int(session.scalar(select(func.count()).select_from(Run)) or 0)

        return self._guard(count)

    def unmatched(self, given: str) -> str:
        """What a command whose filters (`given`, as the user typed them) matched no run says."""
        have = self.count_runs()
        held = f"{counted(have, 'run')} in the results database"
        return f"no run matches {given} ({held}; `harness runs` lists them)"

    def get(self, run_id: str) -> Run:
        """The run `run_id` names: asked for by name, so that a read over several runs that finds it damaged
        refuses, where it leaves out others."""
        run = self._guard(lambda: self._get(run_id))
        self.asked.add(run.id)
        return run

    def _get(self, run_id: str) -> Run:
        if not run_id.strip():  # an empty prefix would name every run, or the only one (`show "$UNSET"`)
            raise HarnessError(EMPTY_RUN_ID, exit_code=2)
        with Session(self.engine, expire_on_commit=False) as session:
            back = newest_back(run_id)
            run = session.get(Run, run_id) if back is None else _nth_newest(session, back)
            if run is None and back is not None:
                have = int(session.scalar(select(func.count()).select_from(Run)) or 0)
                raise HarnessError(
                    f"no run {run_id!r}: the results database holds {counted(have, 'run')}; "
                    "`harness runs` lists them",
                    exit_code=2,
                )
            if run is None:
                # accept a unique prefix, like git does for commits; the ids alone, so that a damaged run
                # among several is no refusal, and the one it names refuses as if named whole
                matches = session.scalars(
                    select(Run.id).where(Run.id.startswith(run_id, autoescape=True)).order_by(Run.created_at)
                ).all()
                if not matches:
                    hint = "`harness runs` lists the runs"
                    if session.get(Baseline, run_id) is not None:  # `diff main …` for `baseline:main`
                        hint = f"`baseline:{run_id}` names the baseline"
                    elif names_a_file(run_id):  # `show report.sqlite`: a file where a run is taken
                        raise HarnessError(
                            f"{run_id!r} names a file, and this command reads a stored run: give its id, "
                            f"`latest` or -1, -2, …; {hint}",
                            exit_code=2,
                        )
                    if run_id.startswith("attn-"):  # `harness attention`'s sweeps are not runs
                        raise HarnessError(sweep_not_run(session, run_id), exit_code=2)
                    raise HarnessError(f"no run with id {run_id!r}; {hint}", exit_code=2)
                if len(matches) > 1:
                    ids = ", ".join(matches[:3]) + (", …" if len(matches) > 3 else "")
                    raise HarnessError(
                        f"{run_id!r} is the start of {len(matches)} runs' ids ({ids}): give more of one; "
                        "`harness runs` lists the runs",
                        exit_code=2,
                    )
                run = session.get(Run, matches[0])
            run.step_timings  # noqa: B018  (load before the session closes)
            run.agreement  # noqa: B018
            return run

    def resolve(self, ref: str) -> str:
        """The full id of the run `ref` names: an id, a unique prefix, `latest` or -N (-1 the newest)."""
        return self.get(ref).id

    def latest(self, *, nvtx_detail: bool = False) -> Run | None:
        """The newest run (made with --nvtx-detail, if asked), with its steps; None if there is none."""

        def read() -> str | None:
            with Session(self.engine) as session:
                # the configurations alone: a damaged run of another kind is passed over unread; one that
                # is asked for, or whose configuration cannot tell, refuses as if named (get)
                for run_id, config in session.execute(stmt):
                    if not nvtx_detail or not isinstance(config, dict) or config.get("nvtx_detail"):
                        return str(run_id)
            return None

        stmt = select(Run.id, Run.config).order_by(Run.created_at.desc(), Run.id.desc())
        run_id = self._guard(read)
        return None if run_id is None else self.get(run_id)

    def linked(self, run_id: str) -> list[Run]:
        """The runs paired with `run_id`: its baseline, and the profiled runs with it as their baseline; one
        whose row or steps fail their check is left out (Database.leave_out)."""
        left_out: dict[Any, stored_check.DamagedRow] = {}
        with Session(self.engine, expire_on_commit=False) as session:
            run = session.get(Run, run_id)
            if run is None:
                return []
            stmt = (
                select(Run)
                .where((Run.id == run.baseline_run_id) | (Run.baseline_run_id == run_id))
                .order_by(Run.created_at)
            )
            found = session.scalars(stmt, execution_options={stored_check.LEFT_OUT: left_out}).all()
            for r in found:
                try:
                    r.step_timings  # noqa: B018  (load before the session closes)
                except stored_check.DamagedRow as e:
                    left_out.setdefault(r.id, e)
        gone = self.leave_out(left_out)
        return [r for r in found if r.id not in gone]

    def made_together(
        self, *, device_name: str, model: str, mode: str, precision: str, batch_size: int, last: int = 500
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """(id, experiment, config) of the newest `last` runs of a device, model, mode, precision and batch
        that ran without a profiler, ended ok and belong to an experiment (runs made together: `run
        --repeats`, `overhead`, `optimize`, `sweep`): what the drift between runs is measured from. One whose
        row fails its check is left out (Database.leave_out)."""
        stmt = (
            select(Run)
            .where(
                Run.device_name == device_name, Run.model == model, Run.mode == mode,
                Run.precision == precision, Run.batch_size == batch_size, Run.profiler == "none",
                Run.status == "ok", Run.experiment.is_not(None),
            )
            .order_by(Run.created_at.desc())
            .limit(last)
        )  # fmt: skip
        left_out: dict[Any, stored_check.DamagedRow] = {}

        def read() -> list[tuple[str, str, dict[str, Any]]]:
            left_out.clear()  # a busy database is read again
            with Session(self.engine) as session:
                found = session.scalars(stmt, execution_options={stored_check.LEFT_OUT: left_out}).all()
                return [(r.id, r.experiment, r.config) for r in found if r.id not in left_out]

        together = self._guard(read)
        self.leave_out(left_out)
        return together

    def runs(
        self,
        *,
        model: str | None = None,
        device: str | None = None,
        precision: str | None = None,
        experiment: str | None = None,
        ids: list[str] | None = None,
        last: int | None = None,
        steps: bool = False,
    ) -> pd.DataFrame:
        """One row per run, newest last, with per-phase mean/std (ns) as columns; a run whose row fails its
        check (harness.store.stored_check), or with `steps` one of its step rows (a caller that lists or
        draws the means made of them), is left out (Database.leave_out), if among the `last`."""
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

        left_out: dict[Any, stored_check.DamagedRow] = {}  # the runs stored_check leaves out as it loads them

        def read() -> list[tuple[str, dict[str, Any] | None]]:
            left_out.clear()  # a busy database is read again
            with Session(self.engine) as session:
                found = session.scalars(stmt, execution_options={stored_check.LEFT_OUT: left_out}).all()
                return [(r.id, None if r.id in left_out else run_row(r)) for r in found]

        rows = self._guard(read)
        rows = rows[-last:] if last is not None else rows  # a damaged run takes its place among the last
        if steps:
            left_out.update(damaged_steps(self, [i for i, row in rows if row is not None]))
        gone = self.leave_out({i: left_out[i] for i, _ in rows if i in left_out})
        df = pd.DataFrame.from_records([row for i, row in rows if i not in gone], columns=RUN_COLUMNS)
        for col in WHOLE_COLUMNS:  # counts stay whole where another row has none (pandas' float64 would not)
            df[col] = whole(df[col])
        return df
