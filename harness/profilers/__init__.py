"""The profilers `harness run --profiler` can put around a run, one module each, with one contract:

wrap the measured steps, leave artifacts in the profile folder, and return what the run stores (the
profiler's name and its artifacts as {kind: path}).

- nsys: harness.profilers.nsys (the run in a child process under Nsight Systems; .nsys-rep and .sqlite)
- torch: harness.profilers.torch (torch.profiler in the worker process; a gzipped Chrome trace)
"""

from __future__ import annotations

from pathlib import Path

PROFILERS = ("nsys", "torch")
MODULES = {"nsys": "harness.profilers.nsys", "torch": "harness.profilers.torch"}
DEFAULT_DIRS = {"nsys": Path("nsys_profiles"), "torch": Path("torch_profiles")}


def nsys_artifacts(rep: Path | None, sqlite: Path | None) -> dict[str, str]:
    """nsys's files as stored in a run's `artifacts`."""
    return {kind: str(path) for kind, path in (("nsys_rep", rep), ("nsys_sqlite", sqlite)) if path}
