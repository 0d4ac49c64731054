"""Runs across ranks (`--nproc N`): N workers started by PyTorch's launcher, collected as one run.

The harness starts `python -m harness.execution.ranks.rank_launcher` (torch.distributed.run, under
harness.execution.supervisor) with
`--no-python` and the worker command (with --nsys: `nsys profile … worker`, one report per rank). Every
rank writes its RunResult, its steps log and a heartbeat beside each other in one temporary folder
(harness.execution.ranks.distributed.rank_path); this process reads them all and makes one RunResult whose
steps carry
their rank. Failures:

- a rank that crashes, runs out of memory or is killed: torchrun stops the others, and rank_launcher writes
  which rank failed first and how; the run is stored as failed naming it, with every step measured;
- a rank that starts no phase for `rank_timeout` seconds (before its first one: at least STARTUP_S) is
  hung: the launcher gets SIGTERM (torchrun passes it on, nsys writes what it had), and the run is stored
  as failed naming the rank that went quiet first;
- whatever is left is ended by the supervisor, as for every worker.

With --nnodes > 1 each node runs `harness run` with its --node-rank and stores the ranks it started.
"""

from __future__ import annotations

import json
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.core import signals
from harness.core.records import RunConfig, RunResult, new_id
from harness.execution import supervisor
from harness.execution.ranks.distributed import beat_path, rank_path
from harness.execution.worker import (
    StepWatch,
    read_worker_result,
    run_isolated,
    worker_command,
    write_worker_config,
)
from workloads.names import COMM_PHASES

STARTUP_S = 60.0  # a rank's time to import torch, join the group and build the model before its first phase


def local_ranks(config: RunConfig) -> list[int]:
    """The global ranks this node starts (torchrun's static layout: node_rank × nproc + local rank)."""
    return [config.node_rank * config.nproc + i for i in range(config.nproc)]


def torchrun_args(config: RunConfig) -> list[str]:
    args = [f"--nproc-per-node={config.nproc}", f"--nnodes={config.nnodes}", "--max-restarts=0"]
    if config.rdzv_endpoint:
        args += [
            "--rdzv-backend=static",
            f"--rdzv-endpoint={config.rdzv_endpoint}",
            f"--node-rank={config.node_rank}",
        ]
    return [*args, "--no-python"]


class Watchdog:
    """Asked by supervisor.run while the ranks run: True once a rank has started no phase for too long."""

    def __init__(self, result: Path, ranks: list[int], timeout: float) -> None:
        self.result, self.ranks, self.timeout = result, ranks, timeout
        self.began = time.time()
        self.hung: int | None = None
        self.last_phase = ""

    def _last(self, rank: int) -> float | None:
        """When the rank last started a phase; None when it has finished."""
        if rank_path(self.result, rank).exists():
            return None
        try:
            return beat_path(rank_path(self.result, rank)).stat().st_mtime
        except OSError:
            return self.began + max(STARTUP_S - self.timeout, 0.0)

    def __call__(self) -> bool:
        now = time.time()
        quiet = {r: t for r in self.ranks if (t := self._last(r)) is not None and now - t > self.timeout}
        if not quiet:
            return False
        last = {r: self._phase(r) for r in quiet}
        # a rank quiet in a collective waits for another: the hung one is quiet in a phase of its own (of
        # those, the quiet longest); a rank slow to begin its step can start it after the others wait
        self.hung = min(quiet, key=lambda r: (last[r].split(" ")[-1] in COMM_PHASES, quiet[r]))
        self.last_phase = last[self.hung]
        return True

    def _phase(self, rank: int) -> str:
        """The last "step phase" line of the rank's heartbeat ("" where there is none to read)."""
        try:
            lines = beat_path(rank_path(self.result, rank)).read_text().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def error(self) -> str:
        where = ""
        if self.last_phase:
            step, phase = self.last_phase.split(" ", 1)
            where = f" (hung in step {step}, {phase})"
        return f"rank {self.hung} started no phase for {self.timeout:g} s (--rank-timeout){where}; stopped"


@dataclass
class Launched:
    """What the ranks left: one RunResult per local rank, the launcher's exit and output, the failure."""

    ranks: dict[int, RunResult]
    returncode: int
    output: str
    interrupted: int | None = None
    failed_rank: int | None = None
    failure: str | None = None


Wrap = Callable[[list[str]], tuple[list[str], dict[str, str]]]  # worker argv -> (profiler's argv, env)


def launch(
    config: RunConfig, run_id: str, wrap: Wrap | None = None, on_steps: Callable[[int], None] | None = None
) -> Launched:
    """Start the ranks (each under `wrap`, a profiler around the worker command, if given), wait, and read
    what each left; `on_steps(n)`: the steps the slowest local rank has finished, as they finish."""
    ranks = local_ranks(config)
    with tempfile.TemporaryDirectory(prefix="harness-") as tmp:
        cfg, res, failures = Path(tmp) / "config.json", Path(tmp) / "result.json", Path(tmp) / "failures.json"
        write_worker_config(config, run_id, cfg)
        target, env = wrap(worker_command(cfg, res)) if wrap else (worker_command(cfg, res), None)
        argv = supervisor.python(
            "harness.execution.ranks.rank_launcher", str(failures), *torchrun_args(config), *target
        )
        watchdog = Watchdog(res, ranks, config.rank_timeout)
        steps = StepWatch([rank_path(res, r) for r in ranks], on_steps) if on_steps else None

        def watch() -> bool:
            if steps is not None:
                steps()
            return watchdog()

        done = supervisor.run(argv, cleanup=[Path(tmp)], env=env, merge_stderr=True, watch=watch)
        failed = json.loads(failures.read_text()) if failures.is_file() else {}
        per_rank: dict[int, RunResult] = {}
        for rank in ranks:
            how = failed.get("ranks", {}).get(str(rank), {})
            # torchrun's output is the ranks' stderr, unprefixed: its tail stands for each rank's
            why = how.get("message") or _tail(done.stdout)
            code = how.get("exitcode", done.returncode)
            per_rank[rank] = read_worker_result(config, run_id, rank_path(res, rank), code, why)
            for step in per_rank[rank].steps:
                step.rank = rank
    out = Launched(per_rank, done.returncode, done.stdout, done.interrupted)
    if watchdog.hung is not None:
        out.failed_rank, out.failure = watchdog.hung, watchdog.error()
    elif failed:
        out.failed_rank = int(failed["first"])
        first = per_rank.get(out.failed_rank)
        why = first.error if first is not None else failed["ranks"][str(out.failed_rank)]["message"]
        out.failure = f"rank {out.failed_rank}: {why}"
    elif done.returncode != 0 and not done.interrupted:
        bad = [r for r, result in per_rank.items() if result.status in ("error", "oom")]
        out.failed_rank = bad[0] if bad else None
        out.failure = (
            f"rank {bad[0]}: {per_rank[bad[0]].error}" if bad else f"torchrun failed: {_tail(done.stdout, 5)}"
        )
    return out


def _tail(output: str, lines: int = 20) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


def combine(config: RunConfig, run_id: str, launched: Launched) -> RunResult:
    """One RunResult of all ranks: every step with its rank; throughput summed over ranks, MFU their mean,
    peak memory their maximum; the block times (--nvtx-detail) of the first rank; failed naming the rank, or
    interrupted, or ok when every rank was: also when a signal came as they ended (each had written its
    result; `run_ranks` hands the signal on)."""
    import statistics

    results = [launched.ranks[r] for r in sorted(launched.ranks)]
    lead = next((r for r in results if r.model is not None), results[0])
    out = RunResult(
        run_id=run_id,
        config=config,
        status="ok",
        device=lead.device,
        device_name=lead.device_name,
        model=lead.model,
        env=lead.env,
        steps=[s for r in results for s in r.steps],
        blocks=results[0].blocks,  # --nvtx-detail: the first rank's timers (a profiled run: its trace)
    )
    if all(r.status == "ok" for r in results) and launched.failure is None:
        out.tokens_per_s = _sum(r.tokens_per_s for r in results)
        out.flops_per_step = _sum(r.flops_per_step for r in results)
        out.achieved_flops = _sum(r.achieved_flops for r in results)
        mfus = [r.mfu for r in results if r.mfu is not None]
        out.mfu = statistics.fmean(mfus) if mfus else None
    peaks = [r.peak_memory_bytes for r in results if r.peak_memory_bytes is not None]
    out.peak_memory_bytes = max(peaks) if peaks else None
    if memory := rank_memory(results):
        out.extra["memory"] = memory
    out.extra["ranks"] = [
        {"rank": r, "status": res.status, "error": res.error} for r, res in sorted(launched.ranks.items())
    ]
    out.extra["world_size"] = config.world_size
    if launched.failure is not None:
        failed = launched.ranks.get(launched.failed_rank) if launched.failed_rank is not None else None
        out.status = "oom" if failed is not None and failed.status == "oom" else "error"
        out.error = launched.failure
        out.extra["failed_rank"] = launched.failed_rank
    elif any(r.status == "interrupted" for r in results) or (
        launched.interrupted and any(r.status != "ok" for r in results)
    ):
        out.status = "interrupted"
        # a rank stopped without writing its result (its error, how it died): said with the signal
        ended = signals.interrupted(launched.interrupted or signal.SIGINT, "before every rank ended")
        out.error = next((r.error for r in results if r.status == "interrupted"), None) or ended
    elif any(r.status != "ok" for r in results):
        bad = next((r, res) for r, res in sorted(launched.ranks.items()) if res.status != "ok")
        out.status, out.error = bad[1].status, f"rank {bad[0]}: {bad[1].error}"
        out.extra["failed_rank"] = bad[0]
    return out


PEAKS = ("peak_rss_bytes", "peak_allocated_bytes", "peak_reserved_bytes")


def rank_memory(results: list[RunResult]) -> dict:
    """The ranks' memory summaries (harness.execution.memory.record) as one: each peak the largest rank's,
    the analytic breakdown one rank's (every rank holds the same model, gradients and optimizer state)."""
    found = [r.extra["memory"] for r in results if r.extra.get("memory")]
    if not found:
        return {}
    memory = dict(found[0])
    for name in PEAKS:
        values = [m[name] for m in found if m.get(name) is not None]
        if values:
            memory[name] = max(values)
    if len(results) > 1 and memory.get("peak_source"):
        memory["peak_source"] += f", the largest of {len(results)} ranks"
    return memory


def _sum(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return float(sum(found)) if found else None


def run_ranks(
    config: RunConfig, run_id: str | None = None, on_steps: Callable[[int], None] | None = None
) -> RunResult:
    """`config` across its ranks, as one RunResult (see `combine`); `on_steps` as in `launch`. A signal that
    came as every rank finished its run all the same leaves the run as it ended and is handed on after it,
    as `run_isolated` does for one process (harness.core.signals.hand_on): a caller that keeps the run holds
    signals around this call and stops once it is stored; elsewhere it is raised."""
    run_id = run_id or new_id(config.model)
    launched = launch(config, run_id, on_steps=on_steps)
    result = combine(config, run_id, launched)
    if launched.interrupted and result.status != "interrupted":
        signals.hand_on(launched.interrupted)
    return result


def run_any(config: RunConfig, run_id: str | None = None) -> RunResult:
    """A fresh process for one rank (worker.run_isolated), torchrun's N for several."""
    return run_ranks(config, run_id) if config.world_size > 1 else run_isolated(config, run_id)
