"""`harness run MODEL --nsys`: run the workload in a child process under nsys, then read what it recorded.

The child (harness.worker) writes its in-process timings; this process stores the run with the paths of the
.nsys-rep and .sqlite, reads the export (NVTX ranges, kernels) and checks the ranges against the timers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import HarnessError, NsysError
from harness.records import STEP_RANGE, RunConfig, RunResult, phases_for
from harness.runner import new_run_id
from harness.sweep import read_worker_result, worker_command, write_worker_config

if TYPE_CHECKING:
    import pandas as pd

    from harness.nsys import NsysInfo, ProfileResult
    from harness.store import ResultsStore

TOP_KERNELS = 10


@dataclass
class ProfileRequest:
    nsys_path: str | None = None
    capture: str = "all"  # all | measured
    mode: str = "light"  # light | full
    extra_args: list[str] = field(default_factory=list)
    profile_dir: Path = Path("nsys_profiles")
    baseline: bool = True  # also run without nsys (fresh process) to say how much nsys slowed the run


@dataclass
class ProfiledRun:
    run_id: str
    result: RunResult | None
    profile: ProfileResult | None
    nsys_version: str = ""
    nvtx: pd.DataFrame | None = None
    kernels: pd.DataFrame | None = None
    agreement: pd.DataFrame | None = None
    overhead: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NsysError(f"cannot create profile folder {folder}: {e.strerror}; pass --profile-dir") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NsysError(f"profile folder {folder} is not writable; pass --profile-dir to write elsewhere")


def launch(
    config: RunConfig, request: ProfileRequest, info: NsysInfo, run_id: str
) -> tuple[RunResult, ProfileResult, list[str]]:
    """Run the worker under nsys; return its result (an error result if it died), nsys's, and notes."""
    from harness import nsys

    _check_writable(request.profile_dir)
    opts = nsys.ProfileOptions(
        output=request.profile_dir.resolve() / run_id,
        capture=request.capture,
        mode=request.mode,
        extra_args=list(request.extra_args),
    )
    with tempfile.TemporaryDirectory(prefix="harness-") as tmp:
        cfg, res = Path(tmp) / "config.json", Path(tmp) / "result.json"
        write_worker_config(config, run_id, cfg)
        _, dropped = nsys.build_profile_command(info, opts, worker_command(cfg, res))
        prof = nsys.profile(info, opts, worker_command(cfg, res))
        result = read_worker_result(config, run_id, res, prof.returncode, prof.stderr_tail)
    notes = [f"dropped {d}" for d in dropped] + list(prof.notes)
    return result, prof, notes


def profile_run(
    config: RunConfig,
    request: ProfileRequest,
    *,
    store: ResultsStore,
    progress: Callable[[str], None] | None = None,
) -> ProfiledRun:
    from harness import nsys
    from harness.overhead import run_baseline, run_profiled

    info = nsys.find_nsys(request.nsys_path)
    _check_writable(request.profile_dir)
    run_id = new_run_id(config.model)
    experiment = f"overhead-{run_id}" if request.baseline else None
    baseline = None
    if request.baseline:
        if progress:
            progress("baseline run without nsys (fresh process)")
        baseline, _ = run_baseline(config)
        store.save(baseline, experiment=experiment)
    if progress:
        progress(f"run under nsys {info.version}")
    result, prof, notes = run_profiled(config, request, info, run_id)
    out = ProfiledRun(run_id=run_id, result=result, profile=prof, nsys_version=info.version, notes=notes)
    save = {"profiler": "nsys", "nsys_mode": request.mode, "experiment": experiment, **report_paths(prof)}
    if baseline is not None and baseline.status == "ok":
        save["baseline_run_id"] = baseline.run_id
    kept = [str(p) for p in (prof.rep, prof.sqlite, prof.qdstrm) if p is not None]
    if prof.returncode != 0 or result.status == "error":
        files = f"; files kept: {', '.join(kept)}" if kept else "; nothing was written"
        tail = (prof.stderr_tail or result.error or "").strip().splitlines()[-5:]
        out.error = f"profiled program failed (exit code {prof.returncode}){files}" + (
            "\n" + "\n".join(tail) if tail else ""
        )
        if result.steps:
            store.save(result, **save)
        return out
    store.save(result, **save)
    if baseline is not None:
        out.overhead = _overhead(baseline, result, request.mode, config, out.notes)
    if prof.sqlite is None:
        out.error = f"nsys wrote no SQLite export; files kept: {', '.join(kept) or 'none'}"
        return out
    try:
        analyse(out, prof.sqlite, config)
    except HarnessError as e:
        out.error = str(e)
        return out
    if out.agreement is not None and len(out.agreement):
        store.save_agreement(run_id, out.agreement)
    return out


def _overhead(
    baseline: RunResult, profiled: RunResult, mode: str, config: RunConfig, notes: list[str]
) -> pd.DataFrame | None:
    """Per phase, the baseline run against the profiled one (one run each), with intervals and verdicts."""
    from analysis.overhead import BASELINE, overhead_table
    from harness import machine
    from harness.overhead import experiment_load, label_for, step_table

    if baseline.status != "ok":
        notes.append(f"baseline run without nsys failed ({baseline.status}): {baseline.error}; no overhead")
        return None
    runs = [(BASELINE, 0, baseline), (label_for(mode), 0, profiled)]
    busy = machine.busy_note(experiment_load(runs), "the baseline run")
    notes += [busy] if busy else []
    table = overhead_table(step_table(runs), phases_for(config.mode))
    if not table.filter(like="verdict").stack().str.startswith("inconclusive").all():
        notes.append(
            "overhead from one run each: its interval holds the step-to-step noise only, and two processes "
            "can differ by drift alone; `harness overhead --ci-target 5` alternates runs until it can tell"
        )
    return table


def report_paths(prof: ProfileResult) -> dict[str, str | None]:
    return {
        "nsys_rep": str(prof.rep) if prof.rep else None,
        "nsys_sqlite": str(prof.sqlite) if prof.sqlite else None,
    }


def nvtx_health(ranges: pd.DataFrame, export_path: Path, phases: tuple[str, ...]) -> None:
    """Stop with a diagnosis when the export holds none of the harness's ranges."""
    if ranges["name"].isin(phases).any():
        return
    from harness import nvtx_ranges

    raise HarnessError(
        f"the export {export_path} holds none of the harness's NVTX ranges ({', '.join(phases)}). "
        f"Emitter: {nvtx_ranges.EMITTER}. Known cause: with nsys 2022.4 the python nvtx package 0.2.12 and "
        "later records nothing (pip install nvtx==0.2.11); torch.cuda.nvtx needs a CUDA build of torch. "
        "`harness doctor` runs a self-test."
    )


def analyse(out: ProfiledRun, sqlite: Path, config: RunConfig) -> None:
    """NVTX table of the measured steps, top kernels if any, and the NVTX-vs-timer agreement."""
    import pandas as pd

    from analysis.agreement import agreement_table, pair_ranges, range_summary
    from analysis.export import open_export
    from analysis.nvtx import nvtx_ranges

    assert out.result is not None
    phases = phases_for(config.mode)
    export = open_export(sqlite)
    ranges = nvtx_ranges(export, names=[STEP_RANGE, *phases])
    nvtx_health(ranges, sqlite, phases)
    measured_steps = {s.step for s in out.result.steps if not s.warmup}
    timers = pd.DataFrame(
        [(s.step, p, ns, s.warmup) for s in out.result.steps for p, ns in s.phases.items()],
        columns=["step", "phase", "duration_ns", "warmup"],
    )
    pairing = pair_ranges(timers, ranges, phases)
    out.notes += pairing.notes
    out.agreement = agreement_table(pairing, phases)
    if ranges["payload"].notna().all():
        measured = ranges[ranges["payload"].astype("int64").isin(measured_steps)]
    else:
        measured = ranges
    out.nvtx = range_summary(measured)
    if export.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        from analysis.kernels import kernel_summary

        out.kernels = kernel_summary(export).head(TOP_KERNELS)
    else:
        out.notes.append("no CUDA kernels in the export (CPU run): kernel table skipped")


def render_profiled(p: ProfiledRun, fmt: str) -> None:
    from analysis.agreement import for_people
    from harness.commands.common import err, warn
    from harness.output import Format, emit_many
    from harness.tables import results_table

    tables: list[tuple[str, pd.DataFrame]] = []
    if p.result is not None and p.result.steps:
        tables.append((f"run {p.run_id} under nsys {p.nsys_version}", results_table([p.result])))
    if p.nvtx is not None:
        tables.append(("NVTX ranges (measured steps)", p.nvtx))
    if p.kernels is not None:
        tables.append((f"top {TOP_KERNELS} kernels", p.kernels))
    if p.agreement is not None and len(p.agreement):
        tables.append(("NVTX vs in-process timers", for_people(p.agreement)))
    if p.overhead is not None:
        tables.append(("nsys overhead (one run each; `harness overhead` alternates repeats)", p.overhead))
    files = []
    if p.profile is not None:
        files = [
            f"{kind}: {path}"
            for kind, path in (("report", p.profile.rep), ("export", p.profile.sqlite))
            if path
        ]
    if tables:
        emit_many(tables, fmt, notes=files if Format(fmt) is Format.table else [])
    for note in p.notes:
        warn(note)
    if p.error:
        err(p.error)
