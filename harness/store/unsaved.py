"""A run the results database would not take, kept as JSON until `harness import FILE` stores it.

The file holds everything `ResultsStore.save` was given (the RunResult, profiler, profile paths, the
NVTX-vs-timer agreement), so importing it stores the same rows saving would have. It goes beside a SQLite
database, else in the harness data folder, else the working directory, else the temporary folder: the
first that takes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.records import RunResult, phases_of, result_from_dict, result_to_dict
from harness.store import fields
from harness.store import unsaved_check as check

FORMAT = "harness-unsaved-run"
VERSION = 1
AGREEMENT_COLUMNS = (
    "phase",
    "steps",
    "nvtx_mean_ns",
    "nvtx_median_ns",
    "timer_mean_ns",
    "timer_median_ns",
    "rel_diff",
)


@dataclass
class PendingRun:
    """One `save`: the result and how it was made."""

    result: RunResult
    created_at: datetime
    profiler: str = "none"
    nsys_mode: str | None = None
    experiment: str | None = None
    baseline_run_id: str | None = None  # a profiled run's run without a profiler
    nsys_rep: str | None = None
    nsys_sqlite: str | None = None
    artifacts: dict[str, str] | None = None  # {kind: path} of what the profiler left
    agreement: list[dict[str, Any]] | None = None  # rows with AGREEMENT_COLUMNS; None: leave as stored


def agreement_rows(table: Any) -> list[dict[str, Any]]:
    """Plain-Python rows of an agreement DataFrame (harness/analysis agreement_table)."""
    rows = []
    for rec in table.to_dict("records"):
        row = {c: rec[c] for c in AGREEMENT_COLUMNS}
        row["phase"], row["steps"] = str(row["phase"]), int(row["steps"])
        rows.append({k: (float(v) if k not in ("phase", "steps") else v) for k, v in row.items()})
    return rows


def file_name(run_id: str) -> str:
    return f"harness-unsaved-{re.sub(r'[^A-Za-z0-9_.-]', '_', run_id)}.json"


def write(pending: PendingRun, folders: list[Path], why: str) -> Path:
    """Write the run to the first folder that takes it; its path."""
    data = {
        "format": FORMAT,
        "version": VERSION,
        "why": why,
        "created_at": pending.created_at.isoformat(),
        "save": {
            "profiler": pending.profiler,
            "nsys_mode": pending.nsys_mode,
            "experiment": pending.experiment,
            "baseline_run_id": pending.baseline_run_id,
            "nsys_rep": pending.nsys_rep,
            "nsys_sqlite": pending.nsys_sqlite,
            "artifacts": pending.artifacts,
        },
        "agreement": pending.agreement,
        "result": result_to_dict(pending.result),
    }
    text = json.dumps(data, indent=1)
    tried = []
    for folder in dict.fromkeys([*folders, Path.cwd(), Path(tempfile.gettempdir())]):
        path = folder / file_name(pending.result.run_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            try:
                partial.write_text(text)
                os.replace(partial, path)
            except BaseException:  # a full disk, or an interruption: no half file left behind
                with contextlib.suppress(OSError):
                    partial.unlink()
                raise
            return path
        except OSError as e:
            tried.append(f"{folder} ({e.strerror})")
    raise HarnessError(
        f"run {pending.result.run_id} was not saved ({why}) and no folder took a copy: {', '.join(tried)}"
    )


def read(path: Path, profilers: Sequence[str]) -> PendingRun:
    """The run a harness-unsaved-RUN.json holds, every field checked as `harness run` writes it
    (harness.store.unsaved_check; its profiler one of `profilers`); HarnessError naming the first that is
    not."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):  # /dev/zero: read without end
            what = "a socket" if stat.S_ISSOCK(mode) else "a device"
            raise HarnessError(f"{path} is {what}, not a file: give the harness-unsaved-RUN.json file")
        raw = path.read_text(encoding="utf-8")  # a pipe too, read once (`harness import <(ssh … cat F)`)
    except OSError as e:
        raise HarnessError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise HarnessError(f"{path} is not a harness unsaved-run file (not UTF-8 text: {e.reason})") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise HarnessError(f"{path} is not a harness unsaved-run file (not JSON: {e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise HarnessError(f"{path} is not a harness unsaved-run file (harness-unsaved-RUN.json)")
    version = data.get("version", 0)
    if type(version) is not int or version < 1:
        raise HarnessError(f"{path} is damaged: version is {version!r}, not a version of the file format")
    if version > VERSION:
        raise HarnessError(f"{path} was written by a newer harness (version {version}); upgrade")
    try:
        return _pending(data, profilers)
    except fields.Damaged as e:
        raise HarnessError(f"{path} is damaged: {e} (harness writes no such run): nothing imported") from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise HarnessError(f"{path} is damaged: {type(e).__name__}: {e}") from None


def _pending(data: dict[str, Any], profilers: Sequence[str]) -> PendingRun:
    fields.only(data, check.FILE_FIELDS, "the file")
    result = check.result_fields(data.get("result"))
    run = result_from_dict(result)
    check.check_result(run)
    save = fields.mapping({} if data.get("save") is None else data["save"], "save")
    check.check_save(save, profilers)
    phases = phases_of(run)
    return PendingRun(
        result=run,
        created_at=check.created(data.get("created_at")),
        profiler=save.get("profiler") or "none",
        nsys_mode=save.get("nsys_mode"),
        experiment=save.get("experiment"),
        baseline_run_id=save.get("baseline_run_id"),
        nsys_rep=save.get("nsys_rep"),
        nsys_sqlite=save.get("nsys_sqlite"),
        artifacts=save.get("artifacts"),
        agreement=check.check_agreement(data.get("agreement"), phases, AGREEMENT_COLUMNS),
    )
