"""The energy of a --power run, made from the samples the worker kept as the run is finished
(harness.profilers.capture.finish): where the samples give none, the power note says why, true to them.
The samples are the sampler's frame through the worker's result file (JSON), as a run hands them back."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.core.records import RunConfig, RunResult, StepRecord, result_from_dict, result_to_dict
from harness.energy.power import SAMPLE_COLUMNS
from harness.profilers.capture import finish

PHASES = {"forward": 100_000, "backward": 200_000, "optimizer": 50_000}
NAN = float("nan")


def step(n: int, *, warmup: bool = False) -> StepRecord:
    at = 1_000_000 * (n + 1)
    starts = {"forward": at, "backward": at + 100_000, "optimizer": at + 300_000}
    return StepRecord(n, warmup, dict(PHASES), starts=starts)


def finished(watts: list[tuple[int, float]], steps: list[StepRecord]) -> RunResult:
    """A run with these steps and one GPU's power readings (t_ns, W), as the worker's file hands it back."""
    rows = [["gpu0", i, t, w, NAN] + [NAN] * (len(SAMPLE_COLUMNS) - 5) for i, (t, w) in enumerate(watts)]
    frame = pd.DataFrame(rows, columns=SAMPLE_COLUMNS)
    floats = [c for c in SAMPLE_COLUMNS if c not in ("device", "tick", "t_ns")]
    frame = frame.astype({"tick": "int64", "t_ns": "int64", **dict.fromkeys(floats, "float64")})
    kept = {"samples": frame.to_dict(orient="split", index=False), "flops": {}, "tokens_per_step": 8.0}
    run = RunResult("r", RunConfig("tiny", power=True), "ok", steps=steps)
    run.extra.update(power_samples=kept, power_notes=[])
    return finish(result_from_dict(json.loads(json.dumps(result_to_dict(run)))))


EVERY_10_US = range(0, 4_000_000, 10_000)
NO_STEP = "no energy: the run has no measured step"


@pytest.mark.parametrize(
    ("watts", "steps", "note"),
    [
        # every reading after the last step: the table's joules are null
        ([(t, 300.0) for t in range(5_000_000, 6_000_000, 10_000)], [step(0), step(1)],
         "no energy: the power samples give none over the measured steps"),
        # the sensor answered, but never with a number (NaN, null in the file)
        ([(t, NAN) for t in EVERY_10_US], [step(0), step(1)],
         "no energy: the power samples give none over the measured steps"),
        # the sampler took none
        ([], [step(0), step(1)], "no energy: no power sample was taken"),
        # a run stopped in its warm-up
        ([(t, 300.0) for t in EVERY_10_US], [step(0, warmup=True)], NO_STEP),
    ],
    ids=["outside", "nan", "no-samples", "warm-up-only"],
)  # fmt: skip
def test_a_run_without_energy_says_why(
    watts: list[tuple[int, float]], steps: list[StepRecord], note: str
) -> None:
    run = finished(watts, steps)
    assert run.extra["power_notes"] == [note]
    assert (run.extra.get("energy_summary") or {}).get("energy_j") is None
    assert "power_samples" not in run.extra


def test_readings_inside_the_steps_give_energy_and_no_note() -> None:
    """Half the readings NaN: the others give the energy of the measured window (step 1's start to step 2's
    end)."""
    watts = [(t, NAN if i % 2 else 300.0) for i, t in enumerate(EVERY_10_US)]
    run = finished(watts, [step(0, warmup=True), step(1), step(2)])
    assert run.extra["power_notes"] == []
    assert run.extra["energy_summary"]["energy_j"] == pytest.approx(300.0 * 1_350_000 / 1e9)
