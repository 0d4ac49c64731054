"""Results databases with known numbers for the dashboard tests (built from real RunResult objects)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.core.records import ModelInfo, RunConfig, RunResult, StepRecord
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

MODELS = {
    "tiny": ModelInfo("transformer", 64, 256, 2, 2, 1000, 64, 100_000),
    "small": ModelInfo("transformer", 128, 512, 4, 4, 1000, 64, 800_000),
}
# model, precision -> (forward, backward, optimizer) ns of the measured steps; warm-up steps are 3x slower
STEP_NS = {
    ("tiny", "fp32"): [(1_000_000, 2_000_000, 500_000), (1_200_000, 2_200_000, 600_000)],
    ("tiny", "bf16"): [(800_000, 1_500_000, 400_000), (1_000_000, 1_700_000, 400_000)],
    ("small", "fp32"): [(3_000_000, 6_000_000, 1_000_000), (3_400_000, 6_400_000, 1_200_000)],
}


def result(
    run_id: str,
    model: str,
    precision: str,
    measured: list[tuple[int, int, int]],
    *,
    status: str = "ok",
    warmup: int = 1,
    tokens_per_s: float | None = 1000.0,
) -> RunResult:
    steps = []
    for i in range(warmup if measured else 0):
        f, b, o = measured[0]
        steps.append(StepRecord(i, True, {"forward": 3 * f, "backward": 3 * b, "optimizer": 3 * o}))
    for j, (f, b, o) in enumerate(measured):
        steps.append(StepRecord(warmup + j, False, {"forward": f, "backward": b, "optimizer": o}))
    return RunResult(
        run_id=run_id,
        config=RunConfig(
            model=model, device="cpu", precision=precision, warmup=warmup, steps=max(len(measured), 1)
        ),
        status=status,
        device="cpu",
        model=MODELS[model],
        steps=steps if status == "ok" else [],
        error="CUDA out of memory" if status == "oom" else None,
        tokens_per_s=tokens_per_s if status == "ok" else None,
    )


def fill(store: ResultsStore, export: Path | None = None) -> None:
    """A sweep (tiny/small × fp32/bf16, small bf16 OOM), an overhead experiment and one profiled run.

    `export`, when given, is recorded as the profiled runs' nsys_sqlite.
    """
    for (model, precision), measured in STEP_NS.items():
        save_run(
            store, result(f"{model}-{precision}-sweep01", model, precision, measured), experiment="sweep-1"
        )
    save_run(store, result("small-bf16-sweep01", "small", "bf16", [], status="oom"), experiment="sweep-1")
    base = [(1_000_000, 2_000_000, 500_000), (1_000_000, 2_000_000, 500_000)]
    slow = [(1_100_000, 2_200_000, 550_000), (1_100_000, 2_200_000, 550_000)]
    save_run(store, result("tiny-fp32-ovh000", "tiny", "fp32", base), experiment="overhead-1")
    save_run(
        store,
        result("tiny-fp32-ovh001", "tiny", "fp32", slow),
        profiler="nsys",
        nsys_mode="light",
        experiment="overhead-1",
    )
    sqlite = str(export) if export else None
    save_run(
        store,
        result("tiny-fp32-prof01", "tiny", "fp32", slow),
        profiler="nsys",
        nsys_mode="light",
        nsys_sqlite=sqlite,
    )
    store.save_agreement(
        "tiny-fp32-prof01",
        pd.DataFrame(
            {
                "phase": ["forward", "backward", "optimizer"],
                "steps": [2, 2, 2],
                "nvtx_mean_ns": [1_111_000.0, 2_200_000.0, 550_000.0],
                "timer_mean_ns": [1_100_000.0, 2_200_000.0, 550_000.0],
                "nvtx_median_ns": [1_111_000.0, 2_200_000.0, 550_000.0],
                "timer_median_ns": [1_100_000.0, 2_200_000.0, 550_000.0],
                "rel_diff": [0.01, 0.0, 0.0],
            }
        ),
    )
