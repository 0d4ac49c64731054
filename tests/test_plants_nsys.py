"""Planted causes captured by the real nsys on the CPU: `harness run --plant CAUSE --nsys` and the same cause
as a program under `harness profile`, with what a capture shows of it (docs/plants.md)."""

from __future__ import annotations

import sqlite3
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import ResultsStore
from workloads.names import DATA
from workloads.plants import SAMPLE_WAIT_S

pytestmark = [pytest.mark.nsys, pytest.mark.slow]
runner = CliRunner()
STEPS = ["--steps", "2", "--warmup", "1"]


def ranges_and_calls(export: Path) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]]]:
    """The export's NVTX ranges and OS-runtime calls as (start, end, name), read-only."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        names = dict(con.execute("SELECT id, value FROM StringIds"))
        nvtx = [
            (start, end, text if text is not None else names.get(text_id, ""))
            for start, end, text, text_id in con.execute(
                "SELECT start, end, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL"
            )
        ]
        osrt = [(s, e, names[n]) for s, e, n in con.execute("SELECT start, end, nameId FROM OSRT_API")]
    finally:
        con.close()
    return nvtx, osrt


def inside(calls: list[tuple[int, int, str]], start: int, end: int) -> Counter[str]:
    """Nanoseconds per OS-runtime call name within [start, end]."""
    found: Counter[str] = Counter()
    for s, e, name in calls:
        if start <= s and e <= end:
            found[name] += e - s
    return found


def calls_inside(calls: list[tuple[int, int, str]], start: int, end: int) -> Counter[str]:
    """How many OS-runtime calls of each name lie within [start, end]."""
    return Counter(name for s, e, name in calls if start <= s and e <= end)


def holds_the_loader_waits(osrt: list[tuple[int, int, str]], start: int, end: int) -> bool:
    """A `data` range of a batch of 4 lasts at least the four waits and holds them as clock_nanosleep calls.
    The calls' own durations are not summed: Python sleeps to an absolute deadline, so a call entered late
    on a busy machine lasts less than its wait while the range still lasts all of it."""
    return end - start >= 4 * SAMPLE_WAIT_S * 1e9 and calls_inside(osrt, start, end)["clock_nanosleep"] >= 4


def test_host_sync_run_is_captured(in_tmp: Path) -> None:
    args = ["run", "tiny", "--device", "cpu", "--plant", "host-sync", "--nsys", "--no-nsys-baseline", *STEPS]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (export,) = (in_tmp / "nsys_profiles").glob("*.sqlite")
    nvtx, _ = ranges_and_calls(export)
    assert Counter(name for *_, name in nvtx if name != "measured") == {
        "step": 3, "forward": 3, "backward": 3, "optimizer": 3
    }  # fmt: skip
    (run_id,) = ResultsStore(f"sqlite:///{in_tmp / 'results.sqlite'}").runs()["run_id"]
    stored = ResultsStore(f"sqlite:///{in_tmp / 'results.sqlite'}").get(run_id)
    assert stored.config["plant"] == "host-sync" and stored.nsys_sqlite == str(export.resolve())


def test_slow_loader_sleeps_inside_its_data_range(in_tmp: Path) -> None:
    """What the rules look for: a `data` range inside forward, and inside it the loader's waits as
    OS-runtime calls (clock_nanosleep), one per sample."""
    args = [
        "run",
        "char",
        "--device",
        "cpu",
        "--plant",
        "slow-loader",
        "--nsys",
        "--no-nsys-baseline",
        *STEPS,
    ]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (export,) = (in_tmp / "nsys_profiles").glob("*.sqlite")
    nvtx, osrt = ranges_and_calls(export)
    data = sorted((s, e) for s, e, name in nvtx if name == DATA)
    forwards = sorted((s, e) for s, e, name in nvtx if name == "forward")
    assert len(data) == len(forwards) == 3
    for (ds, de), (fs, fe) in zip(data, forwards, strict=True):
        assert fs <= ds and de <= fe
        assert holds_the_loader_waits(osrt, ds, de)
    # and none of the step's other sleeps: what sleeps in a step sleeps in its loader
    steps = [(s, e) for s, e, name in nvtx if name == "step"]
    in_data = sum(inside(osrt, *d)["clock_nanosleep"] for d in data)
    assert sum(inside(osrt, *st)["clock_nanosleep"] for st in steps) == in_data


def test_the_program_under_harness_profile(in_tmp: Path) -> None:
    """The cause as a user's program: its own `step`, `data` and phase ranges in the export."""
    cmd = [
        sys.executable,
        "-m",
        "workloads.plants",
        "slow-loader",
        "--model",
        "char",
        "--device",
        "cpu",
        *STEPS,
    ]
    result = runner.invoke(
        app, ["profile", "--name", "plant-slow-loader", "--", *cmd], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    (export,) = (in_tmp / "nsys_profiles").glob("*.sqlite")
    nvtx, osrt = ranges_and_calls(export)
    assert Counter(name for *_, name in nvtx) == {
        "step": 3, "data": 3, "forward": 3, "backward": 3, "optimizer": 3
    }  # fmt: skip
    for start, end, name in nvtx:
        if name == "data":
            assert holds_the_loader_waits(osrt, start, end)
