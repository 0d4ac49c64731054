"""`harness run MODEL --profiler nsys` (or --nsys): the workload in a child process under nsys, then what it
recorded.

The child (harness.execution.worker) writes its in-process timings; this process then reads the export once
(`examine`: NVTX ranges, kernels, the agreement with the timers, the overhead against the baseline run, the
blocks of --nvtx-detail, health and findings) and stores the run once, with all of it, in one transaction.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core import machine, signals
from harness.core.devices import resolve_device
from harness.core.records import RunConfig, RunResult, new_id
from harness.energy import power
from harness.execution import nsys
from harness.execution.nsys.cuda_support import check_capture
from harness.execution.nsys.ranks import profile_ranks
from harness.execution.worker import read_worker_result, worker_command, write_worker_config
from harness.profilers import base, capture
from harness.profilers.base import check_writable, run_baseline
from harness.profilers.capture import (
    mark_degraded,
    report_paths,
    save_once,
    stored_after,
    stored_as,
)
from workloads.names import DECODE, counted

if TYPE_CHECKING:
    import pandas as pd

    from harness.execution.nsys import NsysInfo, ProfileResult
    from harness.profilers.capture import RunExamination
    from harness.store.results import ResultsStore, UnsavedRun


@dataclass(frozen=True)
class NsysOptions(base.ProfilerOptions):
    """`run --nsys`'s options (and overhead's), each read from the command-line parameter named in "cli"."""

    profile_dir: Path = Path("nsys_profiles")
    nsys_path: str | None = None
    capture: str = field(default="all", metadata={"cli": "nsys_capture"})  # all | measured
    mode: str = field(default="light", metadata={"cli": "nsys_mode"})  # light | full
    extra_args: list[str] = field(default_factory=list, metadata={"cli": "nsys_arg"})  # passed on as they are
    # also run without nsys (fresh process) to say how much nsys slowed the run
    baseline: bool = field(default=True, metadata={"cli": "nsys_baseline"})
    # --nsys-force: capture even where this nsys is known to record nothing of the program's CUDA
    force_cuda: bool = field(default=False, metadata={"cli": "nsys_force"})


@dataclass
class ProfiledRun(base.Outcome):
    run_id: str
    result: RunResult | None
    profile: ProfileResult | None
    nsys_version: str = ""
    nvtx: pd.DataFrame | None = None
    kernels: pd.DataFrame | None = None
    agreement: pd.DataFrame | None = None  # NVTX vs the timers, for people
    overhead: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    exit_code: int = 1  # with `error`: the profiled program's code, 128+N for signal N, else 1
    unsaved: list[str] = field(default_factory=list)  # runs the database would not take, and their files
    advice: dict[str, Any] | None = None  # health and findings (analysis.advice.record), stored with the run
    degraded: str | None = None  # why the capture cannot be trusted (the run is stored as `degraded`)

    @property
    def failed(self) -> bool:
        return super().failed or self.degraded is not None

    @property
    def exit_status(self) -> int:
        return super().exit_status or (1 if self.degraded else 0)


def launch(
    config: RunConfig,
    options: NsysOptions,
    info: NsysInfo,
    run_id: str,
    progress: Callable[[str], None] | None = None,
) -> tuple[RunResult, ProfileResult, list[str]]:
    """Run the worker under nsys, recording the load averages (nsys's processes make the CPU shares
    meaningless); return its result (an error result if it died; `interrupted` where a signal came, also one
    held while nsys wrote its report), nsys's, and notes. The profile folder is checked before any run
    (`preflight`, overhead_runs)."""
    opts = nsys.ProfileOptions(
        output=options.profile_dir.resolve() / run_id,
        capture=options.capture,
        mode=options.mode,
        extra_args=list(options.extra_args),
    )
    start = machine.snapshot()
    if config.world_size > 1:  # one report per rank (harness/execution/nsys/ranks.py)
        result, prof, notes = profile_ranks(config, info, opts, run_id)
    else:
        with tempfile.TemporaryDirectory(prefix="harness-") as tmp:
            cfg, res = Path(tmp) / "config.json", Path(tmp) / "result.json"
            write_worker_config(config, run_id, cfg)
            prof = nsys.profile(info, opts, worker_command(cfg, res), cleanup=[Path(tmp)], progress=progress)
            result = read_worker_result(
                config, run_id, res, prof.returncode, prof.program_tail, stopped_by=prof.interrupted
            )
        if prof.interrupted and result.status == "ok":  # all its steps measured
            measured = sum(not s.warmup for s in result.steps)
            steps = f"{'its' if measured == 1 else 'all'} {counted(measured, 'measured step')}"
            # held: it came after the program ended; else nsys stopped recording when it came, while the
            # program still ran (its steps may have gone on past the end of the capture)
            when = (
                f"while nsys wrote its report, after {steps}"
                if prof.held
                else f"while nsys recorded (its capture ends there), with {steps} timed"
            )
            result.error = signals.interrupted(prof.interrupted, when)
        if prof.interrupted and result.status in ("ok", "error"):
            result.status = "interrupted"
        # a default flag this nsys lacks (2022.4: --python-backtrace) is left out without a word: nobody
        # asked for it, and `harness doctor` lists what the nsys lacks
        notes = list(prof.notes)
    ended_by_duration(result, prof, options.extra_args)
    machine.keep_load(result.extra, start, others=False)
    return result, prof, notes


def ended_by_duration(result: RunResult, prof: ProfileResult, extra_args: list[str]) -> None:
    """A run stored `interrupted` where no signal came to the harness, under an nsys given --duration: nsys
    ended the program (each rank's, across ranks) when it ran out. A run cut short by its own options, not
    stopped by the user: failed, said so, with no signal's exit code. Across ranks, where nsys ended one
    rank and another failed, the error says the end first and the failure after it."""
    limit = nsys.duration_in(extra_args)
    if prof.interrupted or not limit:
        return
    kill_none = "--nsys-arg=--kill=none lets the run go on past the capture"
    if result.status == "interrupted":
        when = (result.error or "").removeprefix(signals.stopped_by(result.error) + " ")
        result.status = "error"
        result.error = f"nsys ended the program when its {limit} ran out, {when}; {kill_none}"
        return
    # across ranks, a rank whose nsys ended it first leaves the others failing in their collective (gloo:
    # "Connection closed by peer"): said after what came first, not as a fault of their own
    ranks = result.extra.get("ranks") or []
    ended = [r for r in ranks if r.get("status") == "interrupted"]
    if result.status != "error" or not ended:
        return
    first = ended[0]
    when = (first.get("error") or "").removeprefix(signals.stopped_by(first.get("error")) + " ")
    then = "".join(
        f"; rank {r['rank']} failed: {r.get('error')}" for r in ranks if r.get("status") in ("error", "oom")
    )
    peer = " (a rank whose peer has ended fails in its collective)" if then else ""
    result.error = (
        f"nsys ended rank {first['rank']}'s program when its {limit} ran out, {when}{then}{peer}; {kill_none}"
    )


def refused(prof: ProfileResult, result: RunResult) -> str | None:
    """Why there is no run under nsys to store where nsys failed before it recorded anything and no step
    was measured (nsys itself failed, on an option it refused, not the program); None where there is one."""
    if prof.interrupted or prof.returncode == 0 or result.steps or prof.rep or prof.qdstrm:
        return None
    return f"nsys failed (exit code {prof.returncode}) before it recorded anything; no run under nsys stored"


def _program_exit(returncode: int) -> int:
    return returncode if returncode > 0 else 128 - returncode if returncode < 0 else 1


def cuda_versions(device_type: str | None) -> tuple[str | None, str | None]:
    """(the program's CUDA, the driver's CUDA) as "13.0": torch.version.cuda for a run on CUDA (None for a
    run on the CPU, or a program whose CUDA is unknown: device_type None), the driver's from NVML."""
    program = None
    if device_type == "cuda":
        import torch

        program = torch.version.cuda
    return program, power.driver().cuda


def cuda_check(info: NsysInfo, device_type: str | None, force: bool = False) -> list[str]:
    """Before a capture (harness.execution.nsys.cuda_support): an NsysError where this nsys records nothing
    of the program's CUDA, else the warnings for what it may lose. A run on the CPU is not checked."""
    if device_type == "cpu":
        return []
    program, driver = cuda_versions(device_type)
    return check_capture(info.version, program, driver, force=force, cupti=info.newest_cupti)


def cuda_check_for(nsys_path: str | None, device_type: str | None, force: bool = False) -> list[str]:
    """`cuda_check` of the nsys a command will use (the CLI asks before it starts the work)."""
    return cuda_check(nsys.find_nsys(nsys_path), device_type, force)


def profile_run(
    config: RunConfig,
    options: NsysOptions,
    *,
    store: ResultsStore,
    progress: Callable[[str], None] | None = None,
) -> ProfiledRun:
    """Baseline (optional), the run under nsys, then `examine`: what the export shows, read once; the run is
    stored once after that, with all of it, in one transaction. Every measured step is stored, whatever
    happens: an interrupted run as "interrupted", a failed one with the steps it finished."""

    info = nsys.find_nsys(options.nsys_path)  # its CUDA and the profile folder: checked by `preflight`
    # the tables in the format of the nsys that records (or HARNESS_STATS_FORMAT's, refused before the run)
    tables_format = capture.tables_format(info.version)
    run_id = new_id(config.model)
    out = ProfiledRun(run_id=run_id, result=None, profile=None, nsys_version=info.version)
    experiment = f"overhead-{run_id}" if options.baseline else None
    baseline = None
    if options.baseline:
        if progress:
            progress("baseline run without nsys (fresh process)")
        with signals.deferred() as came:  # one that came as it ended all the same: no run under nsys after it
            baseline, _ = run_baseline(config)
            refusal = save_once(store, baseline, out.unsaved, experiment=experiment)  # a run of its own, once
            late = signals.taken(came)
        if baseline.status == "interrupted" or late is not None:
            kept = stored_as(baseline, [refusal])
            ended = f"as it ended {baseline.status}"
            why = baseline.error if late is None else signals.interrupted(late, ended)
            out.error = f"baseline run {baseline.run_id} without nsys {why}; {kept}"
            out.exit_code = signals.exit_code(late or signals.signal_in(baseline.error))
            return out
    if progress:
        progress(f"run under nsys {info.version}")
    result, prof, notes = launch(config, options, info, run_id, progress)
    out.result, out.profile, out.notes = result, prof, notes
    result.extra[nsys.CAPTURE_RANGE] = capture_range(options)  # for its capture check's advice, read back too
    save: dict[str, Any] = {"profiler": "nsys", "nsys_mode": options.mode, "experiment": experiment,
                            **report_paths(prof)}  # fmt: skip
    if baseline is not None and baseline.status == "ok":
        save["baseline_run_id"] = baseline.run_id
    failed = result.status != "interrupted" and (prof.returncode != 0 or result.status == "error")
    # stored once, after the reading (even when it is cut short): a failed run only with steps to keep
    refused: list[UnsavedRun] = []
    keep = not failed or bool(result.steps)
    with stored_after(store, result, out.unsaved, save, keep=keep, refused=refused) as found:
        try:
            after_capture(out, options, baseline, found, tables_format)
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM while the export was read: stored as interrupted
            sig = signals.signal_of(e)
            if result.status != "interrupted":  # a run stopped already keeps the stop it had, and its code
                result.error = signals.interrupted(sig, "while its export was read")
                out.exit_code = signals.exit_code(sig)
            result.status = "interrupted"
            out.degraded, out.advice = None, None
    if result.status == "interrupted":  # said once it is stored: where the run is
        out.error = f"run {run_id} {result.error}; {stored_as(result, refused)}{kept_files(prof)}"
    return out


def after_capture(
    out: ProfiledRun, options: NsysOptions, baseline: RunResult | None, found: dict[str, Any],
    tables_format: str,
) -> None:  # fmt: skip
    """How the run under nsys ended; then what its export shows, read once (analysis.front.examine: the NVTX
    ranges and kernels, the agreement with the timers, the overhead against the baseline, the blocks of
    --nvtx-detail, its health and findings; a capture that fails them makes the run `degraded`). What is to
    be stored with the run goes into `found` (`save`'s agreement, advice and blocks)."""
    result, prof = out.result, out.profile
    assert result is not None and prof is not None
    files = kept_files(prof)
    if result.status == "interrupted":  # the line is `profile_run`'s, once the run is stored
        out.exit_code = signals.exit_code(prof.interrupted or signals.signal_in(result.error))
        if prof.sqlite is not None:  # its partial capture judged as `harness health RUN` judges it
            seen = capture.examine_stopped(
                prof.sqlite, result, baseline, options.mode, tables_format, out.notes
            )
            stopped(out, seen, found)
        return
    if prof.returncode != 0 or result.status == "error":
        if (why := refused(prof, result)) is not None:
            what, files = why, ""
        elif prof.returncode != 0:
            what = f"profiled program failed (exit code {prof.returncode})"
        else:
            what = f"run failed: {(result.error or 'no result').splitlines()[0]}"
        tail = (prof.program_tail or result.error or "").strip().splitlines()[-5:]
        if tail == [what.removeprefix("run failed: ")]:  # the run's one-line error, said already
            tail = []
        out.error = f"{what}{files}" + ("\n" + "\n".join(tail) if tail else "")
        out.exit_code = _program_exit(prof.returncode)
        return
    if result.status == "oom":
        out.notes.append(f"out of memory: {result.error}; no analysis")
        return
    ranged = result.extra[nsys.CAPTURE_RANGE]
    seen = capture.examine_run(prof.sqlite, result, baseline, options.mode, tables_format, out.notes)
    out.overhead, out.nvtx, out.kernels = seen.overhead, seen.nvtx, seen.kernels
    out.agreement = seen.agreement_shown
    out.notes += seen.notes
    if prof.sqlite is None:
        out.error = f"nsys wrote no SQLite export{files}"
        if ranged and prof.rep is None:  # nsys 2022.4 writes no report at all for a range never started
            out.error = never_started(ranged)
        return
    out.error = seen.error
    found.update(seen.stored)
    out.advice = seen.advice
    if seen.advice is not None:
        out.degraded = mark_degraded(result, seen.degraded)
    serving = result.extra.get("serving")
    if serving is not None and DECODE in seen.busy:  # generate: decode's GPU-busy share, a serving figure
        serving["decode_gpu_busy"] = seen.busy[DECODE]


def never_started(ranged: str) -> str:
    """Why nsys given the capture range `ranged` wrote no report: the range never started."""
    return (
        f"the capture range never started ({ranged}): nsys recorded nothing and wrote no report. "
        "With --capture-range=nvtx the range named by --nvtx-capture must be pushed (a name "
        "that is not registered needs NSYS_NVTX_PROFILER_REGISTER_ONLY=0); with cudaProfilerApi the "
        "program must call cudaProfilerStart"
    )


def stopped(out: ProfiledRun, seen: RunExamination, found: dict[str, Any]) -> None:
    """An interrupted run's export, read with the stop said (capture.examine_stopped): its health and
    findings, and the tables of the steps it finished, shown and stored as `harness health RUN` and `show
    RUN` read them; never `degraded` (it stays interrupted)."""
    out.overhead, out.nvtx, out.kernels = seen.overhead, seen.nvtx, seen.kernels
    out.agreement = seen.agreement_shown
    out.notes += seen.notes + ([seen.error] if seen.error else [])
    found.update(seen.stored)
    out.advice = seen.advice


def kept_files(prof: ProfileResult) -> str:
    """ "; files kept: …" (nsys's report, export or left-over stream), or "; nsys wrote no report"."""
    kept = [str(p) for p in (prof.rep, prof.sqlite, prof.qdstrm) if p is not None]
    return f"; files kept: {', '.join(kept)}" if kept else "; nsys wrote no report"


def capture_range(options: NsysOptions) -> str | None:
    """The capture range a run asked for: `--nsys-capture measured`, or one passed with --nsys-arg."""
    given = nsys.capture_range_in(options.extra_args)
    return given or ("--nsys-capture measured" if options.capture == "measured" else None)


class NsysProfiler(base.Profiler):
    name = "nsys"
    wraps = "the worker process, under `nsys profile` (each rank under its own with --nproc)"
    keeps = ("nsys_rep", "nsys_sqlite")
    default_dir: Path | None = Path("nsys_profiles")
    options_type = NsysOptions

    def preflight(self, options: NsysOptions, device_type: str) -> list[str]:
        """The profile folder made, and what this nsys may lose of the run's CUDA, said before the capture
        (an NsysError: refused)."""
        nsys.check_extra_args(options.extra_args)
        warnings = cuda_check_for(options.nsys_path, device_type, options.force_cuda)
        check_writable(options.profile_dir)  # after: a capture refused leaves no folder behind
        return warnings

    def progress(self, config: RunConfig) -> tuple[str, int | None]:
        return f"{config.model} {config.mode} under nsys", None

    def run(
        self, config: RunConfig, options: NsysOptions, *, store: ResultsStore, progress: base.Reporter
    ) -> ProfiledRun:
        return profile_run(config, options, store=store, progress=progress.stage)

    def overhead_runs(
        self, config: RunConfig, options: NsysOptions, modes: list[str]
    ) -> list[tuple[str, base.ProfiledFn]]:
        """(label, run) per nsys mode: the worker under nsys, stored with its mode, report paths, and what
        `run --nsys` stores of its export: the agreement of its NVTX ranges with its timers, its capture's
        health and findings (`judge_capture`: a capture that fails them is `degraded`)."""
        info = nsys.find_nsys(options.nsys_path)
        check_writable(options.profile_dir)
        cuda_check(info, resolve_device(config.device).type, options.force_cuda)  # refused before any run

        def under(mode: str) -> base.ProfiledFn:
            def run() -> tuple[RunResult, dict[str, Any], list[str]]:
                result, prof, notes = launch(config, replace(options, mode=mode), info, new_id(config.model))
                if (why := refused(prof, result)) is not None:  # nsys's first words say what it refused
                    said = next(iter(prof.program_tail.strip().splitlines()), "")
                    raise base.NothingRecorded(why + (f": {said}" if said else ""))
                result.extra[nsys.CAPTURE_RANGE] = capture_range(options)  # as profile_run keeps it
                how = {"profiler": self.name, "nsys_mode": mode, **report_paths(prof)}
                if result.status == "ok" and prof.sqlite is not None:  # its health, stored with it
                    reason = capture.judge_capture(result, prof.sqlite, how, notes, mode)
                    if reason:
                        notes.append(f"{base.label_for(mode)}: stored as degraded ({reason}): the "
                                     "overhead is that of a capture that lost part of the run")  # fmt: skip
                return result, how, notes

            return run

        return [(base.label_for(mode), under(mode)) for mode in modes]


PROFILER = NsysProfiler()
