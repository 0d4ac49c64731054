"""`harness profile -- CMD ARGS…`: any program under nsys with the harness's trace settings, stored as a run.

The harness times nothing inside such a program: the run has no steps and no phase timers (mode "program").
What the program marks with NVTX ranges is in the export, and its summary tables are the report.
"""

from __future__ import annotations

import platform
import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import harness
from harness.core import signals
from harness.core.bounds import check_run_name, default_run_name
from harness.core.env import git_commit
from harness.core.errors import UsageError
from harness.core.records import ENDED_BY_NSYS, PROGRAM_MODE, RunConfig, RunResult, new_id, program_signal
from harness.execution import nsys, supervisor
from harness.profilers import capture
from harness.profilers.base import check_writable
from harness.profilers.capture import report_paths, stored_after
from harness.profilers.nsys import kept_files, never_started
from workloads.names import NOT_APPLICABLE

if TYPE_CHECKING:
    from harness.execution.nsys import ProfileResult
    from harness.profilers.capture import Report
    from harness.store.results import ResultsStore, UnsavedRun


@dataclass
class ProgramRun:
    run_id: str
    result: RunResult | None  # None: nsys wrote no report, nothing was stored
    profile: ProfileResult
    nsys_version: str = ""
    report: Report | None = None  # the export's summary tables
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    unsaved: list[str] = field(default_factory=list)
    advice: dict[str, Any] | None = None  # the capture's health and findings, stored with the run
    log: Path | None = None  # the program's output (its end, with nsys's), beside its report
    stopped_by: int | None = None  # the signal (Ctrl-C, SIGTERM) that ended a wait to store the run

    @property
    def exit_code(self) -> int:
        """The program's exit code (128+N for signal N); 128+N where signal N (Ctrl-C, SIGTERM) ended nsys, or
        the wait to store the run; 1 where it exited 0 but its run was not stored."""
        prof = self.profile
        if prof.interrupted:
            return signals.exit_code(prof.interrupted)
        if self.stopped_by is not None:
            return signals.exit_code(self.stopped_by)
        if prof.returncode < 0:
            return 128 - prof.returncode
        if prof.returncode > 0:
            return prof.returncode
        return 1 if self.error or self.unsaved else 0


def program_config(name: str) -> RunConfig:
    return RunConfig(
        model=name,
        mode=PROGRAM_MODE,
        device=NOT_APPLICABLE,
        precision=NOT_APPLICABLE,
        batch_size=0,
        warmup=0,
        steps=0,
        attention=NOT_APPLICABLE,
    )


def _environment(nsys_version: str) -> dict[str, str | None]:
    return {
        "harness": harness.__version__,
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "nsys": nsys_version,
    }


def program_result(
    run_id: str,
    name: str,
    argv: Sequence[str],
    prof: ProfileResult,
    version: str,
    nsys_args: Sequence[str] = (),
) -> RunResult:
    """The stored run: ok when the program exited 0, interrupted on Ctrl-C/SIGTERM, else error. A program
    ended by the signal nsys sends when the --duration in `nsys_args` runs out is said to be ended by nsys."""
    ended_by_nsys = None
    if prof.interrupted:
        when = "while the program ran"
        if prof.held:  # the program ran to its end
            when = "while nsys wrote its report, after the program ended"
        status, error = "interrupted", signals.interrupted(prof.interrupted, when)
    elif prof.returncode == 0:
        status, error = "ok", None
    elif (sig := signals.ended_by(prof.returncode)) is not None:
        # nsys gives a program ended by signal N as exit code 128 + N (137: SIGKILL), as a shell does
        code = f", exit code {prof.returncode}" if prof.returncode > 0 else ""
        status, error = "error", f"the program was killed by {_signal_name(sig)} (signal {sig}{code})"
        timed = nsys.duration_kill_in(nsys_args)
        if timed is not None and timed[1] == sig:
            ended_by_nsys = timed[0]
            error = (
                f"nsys ended the program with {_signal_name(sig)} when its {timed[0]} ran out (signal {sig}"
                f"{code}); --nsys-arg=--kill=none lets the program go on past the capture"
            )
    else:
        status, error = "error", f"the program exited with code {prof.returncode}"
    return RunResult(
        run_id=run_id,
        config=program_config(name),
        status=status,
        device=NOT_APPLICABLE,
        error=error,
        extra={"command": list(argv), "exit_code": prof.returncode}
        | ({ENDED_BY_NSYS: ended_by_nsys} if ended_by_nsys else {}),
        env=_environment(version),
    )


def _signal_name(sig: int) -> str:
    try:
        return signals.name(sig)
    except ValueError:  # a real-time signal has no name of its own
        return f"signal {sig}"


def check_program(argv: Sequence[str]) -> None:
    """The program given is there to run: said in one line (a usage error) before anything is looked for."""
    if not argv:
        raise UsageError("no program given: harness profile [OPTIONS] -- CMD ARGS…")
    if shutil.which(argv[0]) is None:
        if argv[0].startswith("-"):  # a misspelt option of `profile`, taken as the program (no program is)
            raise UsageError(
                f"No such option: {argv[0]} (`harness profile -h` shows the usage; the program and its "
                "arguments follow --)"
            )
        where = "not an executable file" if "/" in argv[0] else "not found on PATH"
        raise UsageError(f"program {argv[0]!r} is {where}")


def profile_program(
    argv: Sequence[str],
    *,
    store: ResultsStore,
    name: str | None = None,
    nsys_args: Sequence[str] = (),
    profile_dir: Path = Path("nsys_profiles"),
    nsys_path: str | None = None,
) -> ProgramRun:
    """Run `argv` under nsys, store it as a run with the report's paths, and summarise the export.

    A run is stored whenever nsys recorded something, whatever the program's exit code.
    """

    check_run_name(name)  # a name, not a path: nothing is written outside profile_dir
    check_program(argv)
    nsys.check_extra_args(nsys_args)
    info = nsys.find_nsys(nsys_path)
    check_writable(profile_dir)
    # a wrong HARNESS_STATS_FORMAT: said before the run
    tables_format = capture.tables_format(info.version)
    name = name or default_run_name(Path(argv[0]).name)
    run_id = new_id(name)
    opts = nsys.ProfileOptions(output=profile_dir.resolve() / run_id, extra_args=list(nsys_args))
    prof = nsys.profile(info, opts, argv)
    out = ProgramRun(run_id=run_id, result=None, profile=prof, nsys_version=info.version)
    out.notes = list(prof.notes)  # defaults this nsys lacks are left out unsaid, as for `run --nsys`
    _keep_output(out, Path(f"{opts.output}.log"))
    if prof.rep is None and prof.qdstrm is None:
        tail = prof.stderr_tail.strip().splitlines()[-5:]
        out.error = "nsys wrote no report; nothing stored" + ("\n" + "\n".join(tail) if tail else "")
        ranged = nsys.capture_range_in(nsys_args)
        if ranged and prof.returncode == 0 and not prof.interrupted:  # nsys said nothing of why
            out.error = f"{never_started(ranged)}; nothing stored"
        return out
    out.result = program_result(run_id, name, argv, prof, info.version, nsys_args)
    out.result.extra[nsys.CAPTURE_RANGE] = nsys.capture_range_in(nsys_args)  # read back by `health RUN`
    how = {"profiler": "nsys", "nsys_mode": opts.mode, **report_paths(prof)}
    refused: list[UnsavedRun] = []
    with stored_after(store, out.result, out.unsaved, how, refused=refused) as found:  # once, after the read
        after_capture(out, prof.sqlite, tables_format, found, out.result.extra[nsys.CAPTURE_RANGE])
    out.stopped_by = next((e.signal for e in refused if e.signal is not None), None)
    return out


def _keep_output(out: ProgramRun, log: Path) -> None:
    """The program's output, which the terminal never showed (nsys's is captured with it): its end written
    to `log`, beside the report, as a terminal would have shown it (a progress bar's last state, not each
    of its rewrites), and the note on what was dropped of it naming that file."""
    prof = out.profile
    if not prof.output.strip():
        return
    try:
        log.write_text(supervisor.as_shown(prof.output), errors="replace")
    except OSError as e:
        out.notes.append(f"the program's output could not be kept in {log}: {e.strerror or e}")
        return
    out.log = log
    generic, named = supervisor.dropped_note(prof.dropped), supervisor.dropped_note(prof.dropped, log)
    if generic is not None and named is not None:
        out.notes = [named if n == generic else n for n in out.notes]


def after_capture(
    out: ProgramRun, sqlite: Path | None, tables_format: str, found: dict[str, Any], capture_range: str | None
) -> None:
    """What the export shows, read once (analysis.front.examine): its summary tables, and the capture's
    health and findings (made with nsys's `capture_range`, None: none), stored with the run. The run is not
    made `degraded` by them: a program may well record nothing (`true`), and the harness timed nothing in it
    to compare."""
    assert out.result is not None
    prof = out.profile
    if sqlite is None:
        out.error = f"nsys wrote no SQLite export{kept_files(prof)}"
        return
    ended = program_signal(out.result.extra)
    seen = capture.examine_program_export(sqlite, tables_format, ended, capture_range)
    out.report, out.error, out.advice = seen.report, seen.error, seen.advice
    out.notes += seen.notes
    found.update(seen.stored)
