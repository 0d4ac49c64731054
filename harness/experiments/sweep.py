"""Run configurations each in a fresh Python process (harness.execution.worker) and collect their results."""

from __future__ import annotations

import itertools
import json
import signal
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.core.records import RunConfig, RunResult, result_from_dict
from harness.core.signals import name
from harness.execution import supervisor
from harness.execution.runner import new_run_id, validate
from harness.execution.worker import read_steps

STDERR_TAIL = 2000


def grid(
    base: RunConfig,
    models: list[str],
    precisions: list[str],
    compiles: list[bool],
    batch_sizes: list[int] | None = None,
) -> list[RunConfig]:
    """The cross product, models outermost, batch sizes innermost (the base's batch size when none are
    given); every point is validated before anything runs."""
    configs = [
        replace(base, model=m, precision=p, compile=c, batch_size=b)
        for m, p, c, b in itertools.product(models, precisions, compiles, batch_sizes or [base.batch_size])
    ]
    for config in configs:
        validate(config)
    return configs


def worker_command(config_path: Path, result_path: Path) -> list[str]:
    return [sys.executable, "-m", "harness.execution.worker", str(config_path), str(result_path)]


def write_worker_config(
    config: RunConfig, run_id: str, path: Path, profiler: dict[str, Any] | None = None
) -> None:
    """`profiler`: an in-process profiler for the worker to start (harness.profilers.torch.TorchRequest)."""
    spec: dict[str, Any] = {"run_id": run_id, "config": config.to_dict()}
    if profiler:
        spec["profiler"] = profiler
    path.write_text(json.dumps(spec))


def read_worker_result(
    config: RunConfig, run_id: str, result_path: Path, returncode: int, stderr: str
) -> RunResult:
    """The child's RunResult, or an error result saying how the child died, with the steps it logged."""
    if result_path.exists() and result_path.stat().st_size:
        return result_from_dict(json.loads(result_path.read_text()))
    tail = stderr.strip()[-STDERR_TAIL:]
    if returncode >= 0:
        how = f"exit code {returncode}"
    else:
        how = f"killed by {_signal_name(-returncode)}"
        if -returncode == signal.SIGKILL:
            how += " (often the kernel's out-of-memory killer)"
    steps = read_steps(result_path)
    measured = sum(not s.warmup for s in steps)
    kept = f" after {measured} measured steps" if steps else ""
    error = f"worker {how}{kept}" + (f": {tail}" if tail else "")
    return RunResult(run_id=run_id, config=config, status="error", steps=steps, error=error)


def _signal_name(sig: int) -> str:
    try:
        return name(sig)
    except ValueError:
        return f"signal {sig}"


def run_isolated(
    config: RunConfig, run_id: str | None = None, profiler: dict[str, Any] | None = None
) -> RunResult:
    """One configuration in a fresh process (supervised: it ends with the harness; Ctrl-C is passed on)."""
    run_id = run_id or new_run_id(config.model)
    with tempfile.TemporaryDirectory(prefix="harness-") as tmp:
        cfg, res = Path(tmp) / "config.json", Path(tmp) / "result.json"
        write_worker_config(config, run_id, cfg, profiler)
        done = supervisor.run(worker_command(cfg, res), cleanup=[Path(tmp)])
        result = read_worker_result(config, run_id, res, done.returncode, done.stderr)
    if done.interrupted and result.status == "error":
        result.status = "interrupted"
    return result
