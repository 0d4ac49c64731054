"""`harness optimize MODEL [run options]`: the baseline's findings, each fix the harness can make tried
against it, measured (harness.experiments.optimize); `harness optimize EXPORT|RUN`: the proposals, not
applied."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import (
    DbOpt,
    FormatOpt,
    RunRefCommand,
    WideOpt,
    check_finite_positive,
    cli_errors,
    count_option,
    note,
    on_command_line,
    run_reference,
    warn,
)
from harness.cli.option_group import option_group
from harness.cli.options import (
    BatchOpt,
    Precision,
    PrecisionOpt,
    StepsOpt,
    WarmupOpt,
    Workload,
    asked,
    make_config,
    run_command,
)
from harness.cli.terminal.output import Format, emit_many
from harness.cli.terminal.progress import Progress
from harness.core import signals
from harness.core.bounds import MAX_REPEATS
from harness.core.errors import HarnessError, UsageError
from harness.core.records import names_a_file
from harness.core.signals import sigterm_raises
from harness.execution.checks import check_effect, checked, flag
from harness.experiments import advice as run_advice
from harness.experiments import optimize as opt
from harness.experiments import proposals as prop
from harness.profilers.nsys import NsysOptions, cuda_check_for
from harness.store import results as results_db
from workloads.specs import MODEL_NAMES

PROFILE_DIR = Path("nsys_profiles")


@dataclass(frozen=True)
class Short(Workload):
    """The workload options with optimize's defaults: many short runs (one warm-up step, three measured)."""

    precision: PrecisionOpt = Precision.fp32
    batch_size: BatchOpt = 4
    warmup: WarmupOpt = 1
    steps: StepsOpt = 3


# the workload options optimize does not take (and chooses itself: its runs' warm-up and steps)
NOT_SHORT = ("nvtx_detail", "power", "power_period", "fix")
OWN_CHOICE = (*NOT_SHORT, "warmup", "steps")


@cli_errors
@option_group("workload", Short, NOT_SHORT)
def optimize_cmd(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="MODEL|EXPORT|RUN",
            help="A model name (tiny, small, medium, …, char) to optimize; or an nsys export / report, or a "
            "stored run (a `profile -- CMD` run), whose findings are proposed, not applied.",
            show_default=False,
            callback=run_reference,
        ),
    ],
    workload: Short,
    repeats: Annotated[
        int,
        count_option(
            "--repeats",
            1,
            f"Rounds of each change against the configuration before it, alternating (at most "
            f"{MAX_REPEATS}).",
            most=MAX_REPEATS,
        ),
    ] = opt.DEFAULT_REPEATS,
    ci_target: Annotated[
        float | None,
        typer.Option(
            "--ci-target",
            metavar="PCT",
            help="Keep alternating rounds of a change until the 95% interval of its effect is under ±PCT "
            f"(--repeats rounds at least, {opt.MAX_ROUNDS} at most or --repeats if more).",
        ),
    ] = None,
    budget: Annotated[
        float,
        typer.Option(
            "--budget", metavar="SECONDS", help="Start no run that would end after this many seconds."
        ),
    ] = opt.DEFAULT_BUDGET,
    profile_dir: Annotated[
        Path,
        typer.Option(
            "--profile-dir", metavar="<dir>", help="Where the captures' reports go.", readable=False
        ),
    ] = PROFILE_DIR,
    nsys_path: Annotated[
        str | None, typer.Option("--nsys-path", metavar="<path>", help="The nsys to use.")
    ] = None,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Capture a configuration, try each change the harness can make for its findings (bf16, fused AdamW,
    sdpa, torch.compile, a larger batch, CUDA graphs, pinned copies, loader workers, no per-step .item()),
    each against the configuration so far in alternating fresh processes; print per change the step time
    and tokens/s before and after with 95% intervals, the verdict, whether its finding is gone, and the next.
    Kept changes stack. Of an export or a stored `profile` run: the proposals with their evidence."""
    if target not in MODEL_NAMES:
        runs = {"--repeats": repeats != opt.DEFAULT_REPEATS, "--ci-target": ci_target is not None,
                "--budget": budget != opt.DEFAULT_BUDGET, "--profile-dir": profile_dir != PROFILE_DIR,
                "--nsys-path": nsys_path is not None}  # fmt: skip
        given = [flag(name) for name in asked(workload, Short(), ctx)] + [k for k, on in runs.items() if on]
        if given:
            if not names_a_file(target):  # a misspelt model with its run options: say the name is unknown
                _stored_run(target, results_db.ResultsStore(db, readonly=True))
            raise UsageError(
                f"{', '.join(given)}: of an export or a stored run the findings are read, nothing is run "
                "(run options go with a MODEL)"
            )
        # --db on the command line, not HARNESS_DB in the environment (no such request)
        db_given = on_command_line(ctx, "db")
        _propose(target, db, format, wide, db_given)
        return
    check_finite_positive("--ci-target", ci_target, "percentage")
    check_finite_positive("--budget", budget, "number of seconds")
    ready = checked(make_config(target, workload))
    config, device = ready.config, ready.device.type
    for line in check_effect(config, asked(workload, Short(), ctx), device):
        warn(line)
    options = NsysOptions(profile_dir=profile_dir, nsys_path=nsys_path, baseline=False)
    checked_nsys = cuda_check_for(nsys_path, device)  # before the store: a refused nsys creates nothing
    store = results_db.ResultsStore(db)
    for line in checked_nsys:
        warn(line)
    with sigterm_raises(), Progress(f"optimize {config.model} {config.mode}") as progress:
        done = opt.optimize(
            config, store, capture=opt.real_capture(options), repeats=repeats, ci_target=ci_target,
            budget=budget, progress=progress.stage,
        )  # fmt: skip
    drawn = "; `harness dashboard` draws its waterfall" if any(t.runs for t in done.tried) else ""
    notes = [*done.notes, f"{done.experiment}: {done.seconds:.0f} s{drawn}"]
    if done.final.fixes != config.fixes:
        notes.append(
            f"final configuration: {', '.join(done.final.fixes)}; to run it again: "
            f"{run_command(done.final, device)}"
        )
    title = f"optimize {config.model} on {done.device_name}: each change against the configuration before it"
    tables = [(title, opt.verdict_table(done))]
    if done.proposals:
        found = prop.proposal_table(done.proposals)
        tables.append(("the baseline's findings and the changes for them", found))
    elif done.interrupted is None:
        figures = " (its figures above)" if done.baseline_runs else ""
        notes.insert(0, f"the baseline's capture has no finding: no change to try{figures}")
    emit_many(tables, format, notes=notes, wide=wide)
    if done.interrupted is not None:  # stopped by Ctrl-C or SIGTERM: what finished before it is shown
        raise typer.Exit(signals.exit_code(done.interrupted))


def _stored_run(target: str, store: results_db.ResultsStore) -> results_db.Run:
    """The stored run `target` names; a name that is none, as a misspelt model reads, names the models too."""
    try:
        return store.get(target)
    except HarnessError as e:
        models = ", ".join(MODEL_NAMES)
        raise HarnessError(
            f"{e} (and it is not one of the models: {models})", exit_code=e.exit_code
        ) from None


def _propose(target: str, db: str | None, format: Format, wide: bool, db_given: bool = False) -> None:
    """An export's or a stored run's findings, with the changes for them, none applied."""
    path, judged = Path(target), True
    if names_a_file(target):
        if path.is_dir():  # there, not missing: say what to pass of what it holds, as advise does
            raise UsageError(
                f"{target} is a folder: pass the .sqlite export, the .nsys-rep report or the .json(.gz) "
                "trace inside it"
            )
        if not path.is_file():
            raise UsageError(
                f"no such file: {target} (and it is not one of the models: {', '.join(MODEL_NAMES)})"
            )
        if db_given:
            raise UsageError(
                "--db: a file's findings are read from the file, and nothing is stored: leave --db out"
            )
        found, notes = opt.export_findings(path)
        proposals = prop.proposed(found)
        source = str(path)
    else:
        store = results_db.ResultsStore(db, readonly=True)
        run = _stored_run(target, store)
        advice = run_advice.advice_of(store, run)  # a torch.profiler run's: its trace judged, as advise does
        found, notes = prop.stored_findings(advice, run.id), []
        proposals = prop.proposed(found)
        source, judged = f"run {run.id} ({run.mode})", advice is not None
        if advice is None:  # no rule was run: not "no finding", which reads as a clean capture
            notes.append(
                f"run {run.id} has no capture, so no rule was run: nothing to propose; profile it "
                "(`run --nsys`, `profile -- CMD`)"
            )
        if run.mode != "program":
            # its settings as stored, its plant too: without them the configuration tried is not the run's,
            # and has none of the planted cause's findings; optimize's own short runs in place of its steps
            config = store.run_configs([run.id])[run.id]
            # optimize takes no --fix: its line starts from the plant's own settings (launch-bound's batch
            # 1, not the fix's 8, which beside --plant it refuses), and tries the fixes itself
            again = run_command(
                replace(config, fixes=[]), run.device, command="optimize", defaults=Short(), leave=OWN_CHOICE
            )
            unfixed = (
                f" (from the plant's own settings: optimize takes no --fix {', '.join(config.fixes)})"
                if config.fixes
                else ""
            )
            unseen = run_advice.unseen_by_nsys(found, run.profiler, run.device)
            proposals = prop.proposed_for_run(found, config, run.device, unseen)
            ranks = prop.one_process(config)  # optimize takes no --nproc: said, not silently dropped
            if unseen:  # seen on a torch.profiler trace's operators: optimize's nsys capture has no CUDA
                was = "was" if len(unseen) == 1 else "were"
                notes.append(
                    f"run {run.id}'s {', '.join(unseen)} {was} judged on its torch.profiler operators: "
                    f"`{again}` captures under nsys, and a CPU capture holds no CUDA for them: it would not "
                    "find them, nor try their changes (on a GPU it would)"
                )
            if {str(f.get("rule")) for f in found} - set(unseen):
                notes.append(f"run {run.id} is the harness's own: `{again}` tries them{ranks}{unfixed}")
            elif advice is None:  # never captured: optimize captures it first, and tries what it finds
                tries = f"captures it and tries what it finds{ranks}{unfixed}"
                notes.append(f"run {run.id} is the harness's own: `{again}` {tries}")
    if not found:
        if judged:
            notes.append(f"no finding in {source}: nothing to propose")
        if format is Format.table:  # for people the lines alone: an empty table says nothing more
            for line in notes:
                note(line)
            return
    emit_many([(f"proposals for {source} (not applied)", prop.proposal_table(proposals))], format,
              notes=notes, wide=wide)  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("optimize", cls=RunRefCommand)(optimize_cmd)
