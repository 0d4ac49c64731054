"""Advice proven on planted causes: every cause a CPU capture shows is the first finding of its capture, its
rule the catalogue's; the clean control gets no finding above 5 % of its step time. Real runs of the `char`
model, 3 measured steps, under nsys (the slow loader, the recompiles) and under torch.profiler (those two,
the host sync, the parameter loop, math attention): docs/advice.md has the whole table
(scripts/plant_advice.py makes it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import ResultsStore
from workloads.plants import catalogue

pytestmark = [pytest.mark.slow]
runner = CliRunner()
RUN = ["run", "char", "--device", "cpu", "--steps", "3", "--warmup", "1"]
PROFILERS = {"nsys": ["--nsys", "--no-nsys-baseline"], "torch": ["--profiler", "torch"]}
# every cause the catalogue says a CPU capture under nsys shows, and those a torch.profiler trace shows by
# its operators (the copies are host-to-host on a CPU, the optimizer's loop is CPU AdamW's default: hidden)
SHOWN = [("nsys", c) for c, k in catalogue.CAUSES.items() if k.cpu == catalogue.SHOWS] + [
    ("torch", c) for c in ("host-sync", "launch-bound", "math-attention", "slow-loader", "recompile")
]


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torch on one thread, here and in the run nsys starts: on a loaded machine its thread pool waits for
    cores (a char step took 5.6 s at a load of 8 on 2 cores, 0.16 s on one thread), and the model's time
    would swamp every planted cause's share of the step."""
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _advised(tmp_db: str, profiler: str, cause: str) -> tuple[list[dict], int]:
    """The findings of `harness advise RUN` on the run just made, and its measured steps' time (ns)."""
    made = runner.invoke(app, [*RUN, *PROFILERS[profiler], "--plant", cause], catch_exceptions=False)
    assert made.exit_code == 0, made.output
    store = ResultsStore(tmp_db)
    (run_id,) = store.runs()["run_id"]
    advised = runner.invoke(app, ["advise", run_id, "--format", "json"], catch_exceptions=False)
    assert advised.exit_code == 0, advised.output
    timers = store.step_timings([run_id])
    step_ns = int(timers.loc[~timers["warmup"].astype(bool), "duration_ns"].sum())
    return json.loads(advised.stdout)["findings"], step_ns


@pytest.mark.parametrize(("profiler", "cause"), SHOWN, ids=[f"{p}-{c}" for p, c in SHOWN])
def test_a_planted_cause_is_the_first_finding(in_tmp: Path, tmp_db: str, profiler: str, cause: str) -> None:
    found, _ = _advised(tmp_db, profiler, cause)
    assert found, f"nothing fired on {cause} under {profiler}"
    assert found[0]["Rule"] == catalogue.CAUSES[cause].rule, found
    assert found[0]["Data"], found[0]  # its evidence as data


@pytest.mark.parametrize("profiler", list(PROFILERS))
def test_the_clean_control_gets_nothing_above_five_percent(in_tmp: Path, tmp_db: str, profiler: str) -> None:
    found, step_ns = _advised(tmp_db, profiler, "clean")
    assert step_ns > 0
    assert [f["Rule"] for f in found if f["Time at stake (ns)"] > 0.05 * step_ns] == []
