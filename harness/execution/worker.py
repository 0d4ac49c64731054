"""Child-process entry: run one configuration and write its RunResult as JSON.

`harness sweep` starts one per configuration (so one's memory cannot affect the next),
`harness run --nsys` starts one under nsys. Usage: python -m harness.execution.worker CONFIG.json RESULT.json.
A profiler that works inside the worker names its own entry, which calls `main` with its hook (the config
file's "profiler" says how to build it): `harness run --profiler torch` runs harness.profilers.torch_hook.

The parent half is here too: `run_isolated` writes the config, runs the worker under harness's supervisor
and reads its result back (or says how it died); sweeps, profilers and ranks use it.

Each finished step is also appended to RESULT.steps.jsonl at once, so the steps measured before the
worker was killed outright (kill -9, the kernel's out-of-memory killer) or crashed are not lost. Ctrl-C and
SIGTERM end the run early and still write RESULT.json, with status "interrupted"; a signal after the first
is dropped (harness.core.signals.first_raises): the run is stopping already.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.records import RunConfig, RunResult, StepRecord, new_id, result_from_dict, result_to_dict
from harness.core.signals import first_raises, hand_on, interrupted, keep_ignored, name, signal_of
from harness.execution import supervisor
from harness.execution.generate import serving_figures
from harness.execution.ranks import distributed
from harness.execution.runner import planned_model, run_workload
from workloads.names import counted

STDERR_TAIL = 2000
ENTRY = "harness.execution.worker"  # python -m ENTRY CONFIG RESULT

# (config, the config file's "profiler") -> the runner's StepHook, or None
HookFactory = Callable[[RunConfig, "dict[str, Any] | None"], Any]


def steps_path(result_path: Path) -> Path:
    return result_path.with_name(result_path.name + ".steps.jsonl")


def read_steps(result_path: Path) -> list[StepRecord]:
    """The steps a worker logged before it died (a last line cut short is left out)."""
    steps = []
    try:
        lines = steps_path(result_path).read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            steps.append(StepRecord(**json.loads(line)))
        except (ValueError, TypeError):
            break
    return steps


def main(argv: list[str], make_hook: HookFactory | None = None) -> int:
    keep_ignored()
    config_path, result_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(config_path.read_text())
    config = RunConfig(**spec["config"])
    rank = None
    if config.world_size > 1:  # one rank of several, started by torchrun: files of its own
        rank = distributed.rank_from_env()
        if rank is None:
            print("error: a run across ranks is started by torchrun (harness run --nproc)", file=sys.stderr)
            return 2
        result_path = distributed.rank_path(result_path, rank)
    with first_raises(), steps_path(result_path).open("w") as log:

        def on_step(step: StepRecord) -> None:
            log.write(json.dumps(asdict(step)) + "\n")
            log.flush()

        try:
            hook = make_hook(config, spec.get("profiler")) if make_hook else None
            body = distributed.join(config, result_path) if rank is not None else None
            result = run_workload(config, run_id=spec["run_id"], on_step=on_step, hook=hook, make_body=body)
        except HarnessError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt as e:  # before the first step could start, or as the run finished its last
            result = _stopped_outside_the_steps(config, spec["run_id"], result_path, signal_of(e))
        except Exception as e:  # a crash in a sweep point is recorded, and the sweep goes on
            traceback.print_exc()
            # the steps finished before it are kept (a rank whose peer died fails in its collective call)
            result = with_kept_figures(
                RunResult(
                    run_id=spec["run_id"],
                    config=config,
                    status="error",
                    error=f"{type(e).__name__}: {e}",
                    steps=read_steps(result_path),
                )
            )
        # what was measured is written whole, whatever signal comes next
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        partial = result_path.with_name(result_path.name + ".partial")
        partial.write_text(json.dumps(result_to_dict(result)))
        os.replace(partial, result_path)
    if rank is not None:
        # a rank that failed must exit nonzero: torchrun then stops the others (they would wait forever)
        if result.status in ("error", "oom"):
            return 1
        distributed.finish()
    return 0


def _stopped_outside_the_steps(config: RunConfig, run_id: str, result_path: Path, sig: int) -> RunResult:
    """The run a signal stopped outside the runner's steps: before the first, or after the last as the run
    finished (its figures, its result); the steps it logged are kept, with their figures."""
    steps = read_steps(result_path)
    if not steps:
        why = interrupted(sig, "before the first step")
        return RunResult(run_id=run_id, config=config, status="interrupted", error=why)
    measured = sum(not s.warmup for s in steps)
    why = interrupted(sig, f"after {measured} of {config.steps} measured steps")
    stopped = RunResult(run_id=run_id, config=config, status="interrupted", error=why, steps=steps)
    return with_kept_figures(stopped)


def worker_command(config_path: Path, result_path: Path, entry: str = ENTRY) -> list[str]:
    """The worker's command line; `entry`: a module that runs `main` with a profiler's hook."""
    return supervisor.python(entry, str(config_path), str(result_path))


def write_worker_config(
    config: RunConfig, run_id: str, path: Path, profiler: dict[str, Any] | None = None
) -> None:
    """`profiler`: how the worker builds its hook (harness.profilers.torch.TorchOptions.worker_spec)."""
    spec: dict[str, Any] = {"run_id": run_id, "config": config.to_dict()}
    if profiler:
        spec["profiler"] = profiler
    path.write_text(json.dumps(spec))


def read_worker_result(
    config: RunConfig,
    run_id: str,
    result_path: Path,
    returncode: int,
    stderr: str,
    dropped: int = 0,
    stopped_by: int | None = None,
) -> RunResult:
    """The child's RunResult, or an error result saying how the child died, with the steps it logged and
    the end of its output (`dropped`: bytes of it before `stderr` already left out, said with the rest).
    `stopped_by`: the signal the harness passed on; a child killed after it (Ctrl-C twice, SIGTERM's
    grace run out) was stopped by the harness: its run is interrupted, by that signal."""
    if result_path.exists() and result_path.stat().st_size:
        return result_from_dict(json.loads(result_path.read_text()))
    steps = read_steps(result_path)
    measured = sum(not s.warmup for s in steps)
    if stopped_by is not None and returncode < 0:
        when = f"after {counted(measured, 'measured step')}" if steps else "before the first step"
        why = f"{when}; the worker was killed by {_signal_name(-returncode)} before it wrote its result"
        error = interrupted(stopped_by, why)
        return with_kept_figures(
            RunResult(run_id=run_id, config=config, status="interrupted", steps=steps, error=error)
        )
    tail, left_out = _output_end(stderr.strip(), dropped)
    if returncode >= 0:
        how = f"exit code {returncode}"
    else:
        how = f"killed by {_signal_name(-returncode)}"
        if -returncode == signal.SIGKILL:
            how += " (often the kernel's out-of-memory killer)"
    kept = f" after {counted(measured, 'measured step')}" if steps else ""
    error = f"worker {how}{kept}" + (f": {tail}" if tail else "")
    if left_out:
        printed = dropped + len(stderr.encode())
        error = (
            f"worker {how}{kept}: the end of its output ({left_out:,} of its {printed:,} bytes before it "
            f"left out):\n{tail}"
        )
    return with_kept_figures(
        RunResult(run_id=run_id, config=config, status="error", steps=steps, error=error)
    )


def with_kept_figures(result: RunResult) -> RunResult:
    """A run whose worker died before it wrote its result (killed, crashed) keeps the figures its logged
    steps give, as a run interrupted inside its worker does: its tokens/s, and generate's serving figures
    (TTFT, TPOT, tokens/s), of the measured steps kept, and the model it was to build (its shape and
    parameters, from its spec); the KV cache and the decode path of more than one new token, which only the
    worker knew, are left out."""
    config = result.config
    if result.model is None:
        result.model = planned_model(config)
    if config.mode == "generate":
        serving = serving_figures(result, {})
        if serving is not None:
            result.extra["serving"] = serving
            # a step is its prefill and decode: batch × new tokens over the mean step, as the runner's
            result.tokens_per_s = serving["output_tokens_per_s"]
        return result
    measured = [sum(s.phases.values()) for s in result.steps if not s.warmup and s.phases]
    context = result.model.context_length if result.model else None
    if measured and context and sum(measured):
        # train and forward: batch × context over the mean measured step, as the runner's
        result.tokens_per_s = config.batch_size * context / (sum(measured) / len(measured) / 1e9)
    return result


def _output_end(text: str, dropped: int) -> tuple[str, int]:
    """The last STDERR_TAIL characters of `text`, from a line's start, and how many bytes before them are
    left out (`dropped` of them already)."""
    if len(text) <= STDERR_TAIL:
        return text, dropped
    end = text[-STDERR_TAIL:]
    if "\n" in end:
        end = end[end.find("\n") + 1 :]
    return end, dropped + len(text.encode()) - len(end.encode())


def _signal_name(sig: int) -> str:
    try:
        return name(sig)
    except ValueError:
        return f"signal {sig}"


def logged_steps(result_path: Path) -> int:
    """How many steps a running worker has finished (the lines of its step log)."""
    try:
        return steps_path(result_path).read_bytes().count(b"\n")
    except OSError:
        return 0


class StepWatch:
    """A supervisor `watch` that never stops the command: every `every_s` it reports the steps the slowest
    of the workers writing `results` has finished (the progress bar of a run in another process)."""

    def __init__(self, results: list[Path], on_steps: Callable[[int], None], every_s: float = 0.5) -> None:
        self.results, self.on_steps, self.every_s = results, on_steps, every_s
        self.last, self.said = 0.0, -1

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            done = min((logged_steps(r) for r in self.results), default=0)
            if done != self.said:
                self.said = done
                self.on_steps(done)
        return False


def run_isolated(
    config: RunConfig,
    run_id: str | None = None,
    profiler: dict[str, Any] | None = None,
    on_steps: Callable[[int], None] | None = None,
    entry: str = ENTRY,
) -> RunResult:
    """One configuration in a fresh process (supervised: it ends with the harness; Ctrl-C is passed on);
    `on_steps(n)` as its steps finish, for a progress bar. A signal that came as the worker finished its run
    all the same (ok, or out of memory) leaves the run as it ended and is handed on after it (`hand_on`): a
    caller that keeps the run holds signals around this call (harness.core.signals.deferred) and stops
    once it is stored; elsewhere it is raised."""
    run_id = run_id or new_id(config.model)
    with tempfile.TemporaryDirectory(prefix="harness-") as tmp:
        cfg, res = Path(tmp) / "config.json", Path(tmp) / "result.json"
        write_worker_config(config, run_id, cfg, profiler)
        watch = StepWatch([res], on_steps) if on_steps else None
        done = supervisor.run(worker_command(cfg, res, entry), cleanup=[Path(tmp)], watch=watch)
        result = read_worker_result(
            config, run_id, res, done.returncode, done.stderr, done.dropped, done.interrupted
        )
    if done.interrupted and result.status == "error":
        result.status = "interrupted"
    elif done.interrupted and result.status != "interrupted":
        # the worker had written its result (it exits a second or more after, torch's teardown; it is
        # deaf to Ctrl-C and SIGTERM while it writes): the run stays as it ended, the signal the caller's
        hand_on(done.interrupted)
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
