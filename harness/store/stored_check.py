"""A run's rows checked as they are read back from the results database. The database is a file a user can
edit (sqlite3, a script): a summary that is a list, a phase's figures of text, a step of 1.5 ns or one
of text, a creation time that is no time broke `runs`, `show`, `diff` and the dashboard with a traceback.
Each Run, step and agreement row is checked as it is loaded, for the fields those commands read, as
harness.store.unsaved_check checks a file before `harness import` stores it; a row that fails is said in
one line naming the database, the run and the field (DamagedRow). A field a row lacks is a run stored
before it was recorded, not a damaged one. The cells of `harness attention` are checked the same way, each
said with its sweep: a difference of text was shown as a hundred x's, a time of text drawn as none.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import event
from sqlalchemy.orm import QueryContext

from harness.core.errors import HarnessError
from harness.core.records import CONFIG_DEFAULTS, NSYS_MODES, PROGRAM_MODE, RunConfig
from harness.store import fields
from harness.store import unsaved_check as check
from harness.store.schema import ATTENTION_CHECKED, Agreement, Run, StepTiming
from harness.store.unsaved import AGREEMENT_COLUMNS
from workloads.names import ATTENTION_IMPLS, ENERGY_METHODS, MODES, PRECISIONS, RUN_ENERGY_FIELDS

WHOLE = {"batch_size": 0, "warmup": 0, "steps": 0}  # columns that take no NULL, and their least value
MAYBE_WHOLE = {"context_length": 1, "params": 0, "peak_memory_bytes": 0, "world_size": 1}
FIGURES = (
    "tokens_per_s",
    "flops_per_step",
    "achieved_flops",
    "mfu",
    *(n for n in RUN_ENERGY_FIELDS if n != "energy_method"),
)
TEXT = ("id", "model", "device", "device_name", "precision", "attention", "profiler")
MAYBE_TEXT = ("nsys_rep", "nsys_sqlite")  # NULL where a run has none
# NULL where a run has none, else one of the words the harness writes
MAYBE_ONE_OF = {"nsys_mode": NSYS_MODES, "energy_method": ENERGY_METHODS}
PHASE_WHOLE = ("count", "min_ns", "max_ns")
PHASE_FIGURES = ("mean_ns", "std_ns", "median_ns")


WHERE: WeakKeyDictionary[Any, str] = WeakKeyDictionary()  # each engine's database as people read it
# a query's execution option: {run id: its DamagedRow} that takes the runs whose rows fail their check, left
# for the query's reader to leave out (Database.leave_out)
LEFT_OUT = "harness_left_out"


class DamagedRow(HarnessError):
    """A row of the results database that the harness would not have written."""


def check_run(run: Run) -> None:
    """The columns and JSON of a run's row, as `runs`, `show`, `diff` and the dashboard read them; its
    environment and configuration each field as `harness import` takes them (unsaved_check.check_env,
    check_config: `show` lists the one, `optimize` makes its command line of the other)."""
    if not isinstance(run.created_at, datetime):
        raise fields.Damaged(f"created_at is {run.created_at!r}, not a time")
    for name in TEXT:
        fields.text(getattr(run, name), name)
    for name in MAYBE_TEXT:
        fields.text(getattr(run, name), name, optional=True)
    fields.text(run.error, "error", optional=True, quoted=True)
    fields.text(run.experiment, "experiment", optional=True, plain=True)
    fields.run_id(run.baseline_run_id, "baseline_run_id", optional=True)
    for name, words in MAYBE_ONE_OF.items():
        if getattr(run, name) is not None:
            fields.one_of(getattr(run, name), words, name)
    fields.one_of(run.mode, (*MODES, PROGRAM_MODE), "mode")
    fields.one_of(run.status, check.STATUSES, "status")
    if type(run.compile) is not bool:
        raise fields.Damaged(f"compile is {run.compile!r}, not true or false")
    for name, low in WHOLE.items():
        fields.whole(getattr(run, name), name, low)
    for name, low in MAYBE_WHOLE.items():
        if getattr(run, name) is not None:
            fields.whole(getattr(run, name), name, low)
    for name in FIGURES:
        fields.figure(getattr(run, name), name)
    check.check_config(stored_config(fields.mapping(run.config, "config"), run), stored=True)
    fields.mapping(run.model_info, "model_info")
    check.check_env(fields.mapping(run.env, "env"))
    for name in ("artifacts", "advice"):
        if getattr(run, name) is not None:
            fields.mapping(getattr(run, name), name)
    for kind, path in (run.artifacts or {}).items():
        fields.text(path, f"artifacts.{kind}")
    check_summary(fields.mapping(run.summary, "summary"), run)


def stored_config(config: dict[str, Any], run: Run) -> RunConfig:
    """A run's stored configuration as the RunConfig `harness import` checks (unsaved_check.check_config).
    A field it lacks is a run stored before the field existed: its default (the run's model and mode where
    those are missing). A field RunConfig lacks is left out: a newer harness's database is read as it is
    (its changes are additive, harness.store.database), and every reader of a configuration takes the fields
    it knows. Built without __post_init__, which would set a plant's fields over those stored."""
    known = {k: v for k, v in config.items() if k in CONFIG_DEFAULTS or k == "model"}
    cfg = object.__new__(RunConfig)
    cfg.__dict__.update({**CONFIG_DEFAULTS, "model": run.model, "mode": run.mode, **known})
    return cfg


def check_summary(summary: dict[str, Any], run: Run) -> None:
    """The run's summary: its phases' figures, the figures of `extra` (unsaved_check.check_extra, with
    the energy table's shape), the serving figures and generate's token times."""
    phases = summary.get("phases", [])
    for where, row in fields.objects(phases, "summary.phases"):
        fields.text(row.get("phase"), f"{where}.phase")
        for name in PHASE_WHOLE:  # databases of the first schema kept the mean and deviation alone
            if name in row:
                fields.whole(row[name], f"{where}.{name}", 0, fields.MAX_NS)
        for name in PHASE_FIGURES:
            if fields.figure(row.get(name), f"{where}.{name}") is None and name == "mean_ns":
                raise fields.Damaged(f"{where}.{name} is missing (null)")
    check.check_serving(fields.mapping(summary.get("serving") or {}, "summary.serving"))
    stored_phases = tuple({*(p.get("phase") for p in phases), *(summary.get("first_step_phases") or {})})
    try:
        check.check_extra(summary, stored_phases, power=True, low=-fields.MAX_NS)
    except fields.Damaged as e:
        raise fields.Damaged(f"summary.{str(e).removeprefix('extra.')}") from None
    for where, row in fields.objects(summary.get("token_timings", []), "summary.token_timings"):
        fields.whole(row.get("step"), f"{where}.step")
        if type(row.get("warmup")) is not bool:
            raise fields.Damaged(f"{where}.warmup is {row.get('warmup')!r}, not true or false")
        durations = row.get("durations_ns")
        if not isinstance(durations, list):
            raise fields.Damaged(f"{where}.durations_ns is {durations!r}, not a list")
        for j, ns in enumerate(durations):
            fields.whole(ns, f"{where}.durations_ns[{j}]", -fields.MAX_NS, fields.MAX_NS)


def check_step(step: Any, phase: Any, duration_ns: Any, warmup: Any, rank: Any) -> None:
    """A step's phase time: a whole number of ns within 2**62 either way (stored as the run had it), its step
    and rank whole numbers."""
    fields.whole(step, "step_timings: step")
    where = f"step_timings: step {step}"
    fields.text(phase, f"{where}: phase")
    fields.whole(duration_ns, f"{where}: {phase}", -fields.MAX_NS, fields.MAX_NS)  # saved as the run had it
    if type(warmup) is not bool:
        raise fields.Damaged(f"{where}: warmup is {warmup!r}, not true or false")
    if rank is not None:
        fields.whole(rank, f"{where}: rank")


def check_block(
    step: Any, layer: Any, block: Any, phase: Any, duration_ns: Any, calls: Any, source: Any
) -> None:
    """A block's time in a step (BLOCK_COLUMNS after its run id) as --nvtx-detail stores it."""
    fields.whole(step, "block_timings: step")
    here = f"block_timings: step {step}"
    if layer is not None:
        fields.whole(layer, f"{here}: layer")
    for name, value in (("block", block), ("phase", phase), ("source", source)):
        fields.text(value, f"{here}: {name}")
    fields.whole(duration_ns, f"{here}: {block}", 0, fields.MAX_NS)  # a range's length: never below 0
    fields.whole(calls, f"{here}: calls of {block}")


def check_blocks(where: str, rows: list[Any]) -> dict[Any, DamagedRow]:
    """Rows of BLOCK_COLUMNS (run_id, step, layer, block, phase, duration_ns, calls, source): the runs with a
    damaged one."""
    return _each_row(where, rows, check_block)


def check_agreement(phase: Any, steps: Any, *figures: Any) -> None:
    """An agreement row (AGREEMENT_COLUMNS) as a run under nsys stores it: its phase, the steps paired, the
    NVTX and timer times (finite ns, 0 to 2**62) and their relative difference (finite, of any sign)."""
    fields.text(phase, "agreement: phase", plain=True)
    where = f"agreement: {phase}"
    fields.whole(steps, f"{where}: steps")
    for name, value in zip(AGREEMENT_COLUMNS[2:], figures, strict=True):
        if fields.figure(value, f"{where}: {name}", negative=name == "rel_diff") is None:
            raise fields.Damaged(f"{where}: {name} is missing (null)")
        if name != "rel_diff" and value > fields.MAX_NS:
            raise fields.Damaged(f"{where}: {name} is {value}, past {fields.MAX_NS} ns")


def check_agreements(where: str, rows: list[Any]) -> dict[Any, DamagedRow]:
    """Rows of (run_id, *AGREEMENT_COLUMNS) as TimingsPart reads them: the runs with a damaged one."""
    return _each_row(where, rows, check_agreement)


ATTENTION_COUNTS = {"batch_size": 1, "num_heads": 1, "head_dim": 1, "seq_len": 1, "warmup": 0, "trials": 1}
ATTENTION_TIMES = ("forward_mean_ns", "forward_std_ns", "backward_mean_ns", "backward_std_ns")


def check_cell(cell: dict[str, Any]) -> None:
    """An attention cell (ATTENTION_COLUMNS and its env) as `harness attention` stores it: its sizes and
    counts as the command takes them, its times finite ns (a mean in every cell that ended ok), its peak
    bytes whole, its environment as a run's (unsaved_check.check_env)."""
    if not isinstance(cell["created_at"], datetime):
        raise fields.Damaged(f"created_at is {cell['created_at']!r}, not a time")
    for name in ("device", "device_name", "memory_source"):
        fields.text(cell[name], name)
    fields.text(cell["error"], "error", optional=True, quoted=True)
    fields.one_of(cell["precision"], PRECISIONS, "precision")
    fields.one_of(cell["impl"], ATTENTION_IMPLS, "impl")
    fields.one_of(cell["status"], ("ok", "oom", "error"), "status")
    if type(cell["causal"]) is not bool:
        raise fields.Damaged(f"causal is {cell['causal']!r}, not true or false")
    for name, low in ATTENTION_COUNTS.items():
        fields.whole(cell[name], name, low)
    cell_at = f"{cell['impl']} head_dim {cell['head_dim']} seq_len {cell['seq_len']}"
    for name in ATTENTION_TIMES:
        value = fields.figure(cell[name], f"{cell_at}: {name}")
        if value is None and cell["status"] == "ok" and "mean" in name:
            raise fields.Damaged(f"{cell_at}: {name} is missing (null), but the cell ended ok")
        if value is not None and value > fields.MAX_NS:
            raise fields.Damaged(f"{cell_at}: {name} is {value}, past {fields.MAX_NS} ns")
    if cell["compile_ns"] is not None:
        fields.duration(cell["compile_ns"], f"{cell_at}: compile_ns")
    if cell["peak_memory_bytes"] is not None:
        fields.whole(cell["peak_memory_bytes"], f"{cell_at}: peak_memory_bytes")
    check.check_env(fields.mapping(cell["env"], "env"))


def check_cells(where: str, rows: list[Any]) -> dict[Any, DamagedRow]:
    """Rows of ATTENTION_CHECKED as AttentionPart reads them: the sweeps with a damaged cell, each with the
    first one's line."""
    damaged: dict[Any, DamagedRow] = {}
    for row in rows:
        cell = dict(zip(ATTENTION_CHECKED, row, strict=True))
        if cell["sweep_id"] in damaged:
            continue
        try:
            fields.text(cell["sweep_id"], "sweep_id", plain=True)
            check_cell(cell)
        except fields.Damaged as e:
            damaged[cell["sweep_id"]] = _refused(where, cell["sweep_id"], e, what="attention sweep")
    return damaged


def check_tagged(where: str, name: str, run_id: str, created: Any, when: Any) -> dict[str, DamagedRow]:
    """A named baseline's time and its run's: times (StoredTime reads one that is not as it is). The line of
    the one that is not, by its run's id, or by `baseline:NAME` where the tag's own time is not; empty where
    both are."""
    if created is not None and not isinstance(created, datetime):
        return {run_id: _refused(where, run_id, f"created_at is {created!r}, not a time")}
    if not isinstance(when, datetime):
        return {f"baseline:{name}": _refused(where, name, f"created_at is {when!r}, not a time", "baseline")}
    return {}


def check_steps(where: str, rows: list[Any]) -> dict[Any, DamagedRow]:
    """Rows of (run_id, step, phase, duration_ns, warmup, rank) as TimingsPart reads them: the runs with a
    damaged one."""
    return _each_row(where, rows, check_step)


def _each_row(where: str, rows: list[Any], check: Callable[..., None]) -> dict[Any, DamagedRow]:
    """`check` of each row's values after its run id: the runs with a row that fails it, each with the first
    one's line naming the run."""
    damaged: dict[Any, DamagedRow] = {}
    for run_id, *values in rows:
        if run_id in damaged:
            continue
        try:
            check(*values)
        except fields.Damaged as e:
            damaged[run_id] = _refused(where, run_id, e)
    return damaged


def _where(context: QueryContext) -> str:
    return f"results database {WHERE.get(context.session.get_bind(), '')}".rstrip()


def refusal(where: str, run_id: object, why: object) -> DamagedRow:
    """The error of a run whose stored rows the harness would not have written (beyond one row's check)."""
    return _refused(where, run_id, why)


def _refused(where: str, run_id: object, why: object, what: str = "run") -> DamagedRow:
    return DamagedRow(
        f"{where}: {what} {run_id!r} is damaged ({why}): the harness writes no such row, it "
        "was changed outside the harness; restore a copy of the database"
    )


@event.listens_for(Run, "load")
def _run_loaded(run: Run, context: QueryContext | None) -> None:
    if context is None:  # loaded by a save's merge, which replaces the row: a damaged one is mended
        return
    try:
        check_run(run)
    except fields.Damaged as e:
        refused = _refused(_where(context), run.id, e)
        left_out = context.execution_options.get(LEFT_OUT)
        if left_out is None:
            raise refused from None
        left_out[run.id] = refused


@event.listens_for(StepTiming, "load")
def _step_loaded(step: StepTiming, context: QueryContext | None) -> None:
    if context is None:
        return
    try:
        check_step(step.step, step.phase, step.duration_ns, step.warmup, step.rank)
    except fields.Damaged as e:
        raise _refused(_where(context), step.run_id, e) from None


@event.listens_for(Agreement, "load")
def _agreement_loaded(row: Agreement, context: QueryContext | None) -> None:
    if context is None:
        return
    try:
        check_agreement(row.phase, row.steps, *(getattr(row, c) for c in AGREEMENT_COLUMNS[2:]))
    except fields.Damaged as e:
        raise _refused(_where(context), row.run_id, e) from None
