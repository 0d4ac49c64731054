"""Child-process entry: run one configuration and write its RunResult as JSON.

`harness sweep` starts one per configuration (so one's memory cannot affect the next),
`harness run --nsys` starts one under nsys and `harness run --profiler torch` one with torch.profiler on
(the config file's "profiler"). Usage: python -m harness.execution.worker CONFIG.json RESULT.json

Each finished step is also appended to RESULT.steps.jsonl at once, so the steps measured before the
worker was killed outright (kill -9, the kernel's out-of-memory killer) are not lost. Ctrl-C and SIGTERM
end the run early and still write RESULT.json, with status "interrupted".
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from dataclasses import asdict
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.records import RunConfig, RunResult, StepRecord, result_to_dict
from harness.core.signals import interrupted, signal_of, sigterm_raises


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


def main(argv: list[str]) -> int:
    config_path, result_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(config_path.read_text())
    config = RunConfig(**spec["config"])
    rank = None
    if config.world_size > 1:  # one rank of several, started by torchrun: files of its own
        from harness.execution.ranks import distributed

        rank = distributed.rank_from_env()
        if rank is None:
            print("error: a run across ranks is started by torchrun (harness run --nproc)", file=sys.stderr)
            return 2
        result_path = distributed.rank_path(result_path, rank)
    with sigterm_raises(), steps_path(result_path).open("w") as log:

        def on_step(step: StepRecord) -> None:
            log.write(json.dumps(asdict(step)) + "\n")
            log.flush()

        try:
            from harness.execution.runner import run_workload
            from harness.execution.torch_hook import hook_for

            hook = hook_for(config, spec.get("profiler"))
            body = distributed.join(config, result_path) if rank is not None else None
            result = run_workload(config, run_id=spec["run_id"], on_step=on_step, hook=hook, make_body=body)
        except HarnessError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt as e:  # before the first step could start
            why = interrupted(signal_of(e), "before the first step")
            result = RunResult(run_id=spec["run_id"], config=config, status="interrupted", error=why)
        except Exception as e:  # a crash in a sweep point is recorded, and the sweep goes on
            traceback.print_exc()
            result = RunResult(
                run_id=spec["run_id"], config=config, status="error", error=f"{type(e).__name__}: {e}"
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
