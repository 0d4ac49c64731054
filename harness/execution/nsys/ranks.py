"""Every rank of a torchrun launch under its own `nsys profile` (harness.execution.ranks.multirank starts the
ranks; the command around each one and its report are nsys's business, so they are here)."""

from __future__ import annotations

from pathlib import Path

from harness.core import signals
from harness.core.records import RunConfig, RunResult
from harness.execution.nsys.find import NsysInfo
from harness.execution.nsys.launch import ProfileOptions, ProfileResult, rank_profile_command, rank_report
from harness.execution.ranks.multirank import _tail, combine, launch, local_ranks


def profile_ranks(
    config: RunConfig, info: NsysInfo, opts: ProfileOptions, run_id: str
) -> tuple[RunResult, ProfileResult, list[str]]:
    """Every rank under its own `nsys profile` (report `<run>.rank<R>`); the result, a ProfileResult of the
    lowest local rank's report carrying every rank's files as artifacts, and notes."""

    def wrap(worker: list[str]) -> tuple[list[str], dict[str, str]]:
        argv, env, _ = rank_profile_command(info, opts, worker)  # defaults it lacks: left out, unsaid
        return argv, env

    launched = launch(config, run_id, wrap)
    result = combine(config, run_id, launched)
    if launched.interrupted and result.status == "ok":  # nsys was told to stop, as for one process
        result.status = "interrupted"
        result.error = signals.interrupted(launched.interrupted, "as its ranks ended")
    notes: list[str] = []
    artifacts: dict[str, str] = {}
    found: dict[int, tuple[Path | None, Path | None]] = {}
    for rank in local_ranks(config):
        rep, sqlite, rank_notes = rank_report(info, opts, rank)
        notes += rank_notes
        found[rank] = (rep, sqlite)
        artifacts.update({f"nsys_rep.rank{rank}": str(rep)} if rep else {})
        artifacts.update({f"nsys_sqlite.rank{rank}": str(sqlite)} if sqlite else {})
    rep, sqlite = found[local_ranks(config)[0]]
    prof = ProfileResult(
        # a failed rank is said by the result ("rank R: …"), not as the launcher's exit code
        returncode=0 if launched.failure else launched.returncode,
        rep=rep,
        sqlite=sqlite,
        qdstrm=None,
        stderr_tail=_tail(launched.output),
        # the ranks' nsys instances close at different times among the others' output: none is cut at
        program_tail=_tail(launched.output),
        interrupted=launched.interrupted,
        artifacts=artifacts,
    )
    return result, prof, notes
