"""Results database: a RunResult saved and read back is the same run; filters; bad locations."""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from harness.records import ModelInfo, RunConfig, RunResult, StepRecord
from harness.store import ResultsStore, resolve_url


def make_result(run_id: str, model: str = "tiny", precision: str = "fp32", fwd: int = 1_000_000) -> RunResult:
    steps = [
        StepRecord(
            step=i, warmup=i < 2, phases={"forward": fwd + i, "backward": 2 * fwd + i, "optimizer": fwd // 2}
        )
        for i in range(5)
    ]
    return RunResult(
        run_id=run_id,
        config=RunConfig(model=model, precision=precision, warmup=2, steps=3),
        status="ok",
        device="cpu",
        device_name="x86_64",
        model=ModelInfo("transformer", 512, 1344, 4, 16, 10_000, 128, 22_696_448),
        steps=steps,
        tokens_per_s=1234.5,
        env={"torch": "2.13.0"},
    )


def test_round_trip(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    store.save(make_result("tiny-1"))
    run = store.get("tiny-1")
    assert run.model == "tiny" and run.status == "ok" and run.params == 22_696_448
    assert len(run.step_timings) == 15
    measured_fwd = [t.duration_ns for t in run.step_timings if t.phase == "forward" and not t.warmup]
    assert measured_fwd == [1_000_002, 1_000_003, 1_000_004]
    phases = {p["phase"]: p for p in run.summary["phases"]}
    assert phases["forward"]["mean_ns"] == pytest.approx(1_000_003)
    assert phases["forward"]["count"] == 3
    assert run.env == {"torch": "2.13.0"}


def test_runs_table_filters_and_prefix(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    store.save(make_result("tiny-a", precision="fp32"))
    store.save(make_result("small-b", model="small", precision="bf16", fwd=3_000_000))
    df = store.runs()
    assert list(df["run_id"]) == ["tiny-a", "small-b"]
    assert df.loc[1, "forward_mean_ns"] == pytest.approx(3_000_003)
    assert list(store.runs(precision="bf16")["model"]) == ["small"]
    assert list(store.runs(last=1)["run_id"]) == ["small-b"]
    assert store.get("small").id == "small-b"  # unique prefix
    steps = store.step_timings(["tiny-a"])
    assert len(steps) == 15 and set(steps["phase"]) == {"forward", "backward", "optimizer"}


def test_unknown_run(tmp_db: str) -> None:
    with pytest.raises(HarnessError, match="no run with id"):
        ResultsStore(tmp_db).get("nope")


def test_unopenable_database(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(HarnessError, match="cannot open results database"):
        ResultsStore(str(blocker / "sub" / "results.sqlite"))


def test_resolve_url(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_DB", str(tmp_path / "x.sqlite"))
    assert resolve_url(None) == f"sqlite:///{tmp_path / 'x.sqlite'}"
    assert resolve_url("postgresql://u@h/db") == "postgresql://u@h/db"
