"""Results database: a RunResult saved and read back is the same run; filters; bad locations."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.errors import HarnessError
from harness.core.records import ModelInfo, RunConfig, RunResult, StepRecord
from harness.profilers.capture import save as save_run
from harness.store.location import describe_url
from harness.store.results import ResultsStore, resolve_url


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
    save_run(store, make_result("tiny-1"))
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
    save_run(store, make_result("tiny-a", precision="fp32"))
    save_run(store, make_result("small-b", model="small", precision="bf16", fwd=3_000_000))
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


def test_a_database_is_named_as_given(tmp_path) -> None:
    """`runs in …` and the errors that name a --db say its path as given: SQLAlchemy's rendering said
    /tmp/x@y.sqlite as /tmp/x%40y.sqlite and sqlite:///:memory: as sqlite:///%3Amemory%3A. A password is
    still hidden."""
    db = tmp_path / "a b@c:d 100%.sqlite"
    save_run(ResultsStore(str(db)), make_result("tiny-1"))
    out = CliRunner().invoke(app, ["runs", "--db", str(db)], env={"COLUMNS": "1000"})
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0] == f"runs in sqlite:///{db}"
    memory = CliRunner().invoke(app, ["runs", "--db", "sqlite:///:memory:"])
    assert memory.exit_code == 2 and "--db sqlite:///:memory: is a database in memory" in memory.output
    assert describe_url("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"


def test_profiled_run_is_linked_to_its_baseline(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-base"), experiment="overhead-1")
    save_run(
        store,
        make_result("tiny-prof", fwd=1_100_000),
        profiler="nsys",
        nsys_mode="light",
        experiment="overhead-1",
        baseline_run_id="tiny-base",
    )
    save_run(store, make_result("tiny-other"))
    assert list(store.runs()["baseline_run_id"].fillna("")) == ["", "tiny-base", ""]
    assert [r.id for r in store.linked("tiny-prof")] == ["tiny-base"]
    (profiled,) = store.linked("tiny-base")
    assert profiled.id == "tiny-prof" and len(profiled.step_timings) == 15  # loaded with its steps
    assert store.linked("tiny-other") == [] and store.linked("nope") == []


def test_database_of_an_older_harness_gets_the_new_columns(tmp_path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite"
    save_run(ResultsStore(str(path)), make_result("tiny-old"))
    with sqlite3.connect(path) as conn:  # as an older harness made it: no baseline_run_id, no revision
        conn.execute("DROP TABLE harness_alembic_version")
        cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] != "baseline_run_id"]
        conn.execute("DROP INDEX ix_runs_baseline_run_id")
        conn.execute(f"CREATE TABLE runs_old AS SELECT {', '.join(cols)} FROM runs")
        conn.execute("DROP TABLE runs")
        conn.execute("ALTER TABLE runs_old RENAME TO runs")
        assert "baseline_run_id" not in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    store = ResultsStore(str(path))
    assert store.get("tiny-old").baseline_run_id is None
    save_run(store, make_result("tiny-new"), baseline_run_id="tiny-old")
    assert list(store.runs()["baseline_run_id"].fillna("")) == ["", "tiny-old"]


def test_read_only_commands_read_a_database_of_an_older_harness(tmp_path) -> None:
    """`harness runs` / `show` / `dashboard` on a database made before attention_results and
    baseline_run_id existed: its tables are brought up to date, nothing else changes."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    save_run(ResultsStore(str(path)), make_result("tiny-old"))
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE harness_alembic_version")
        cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] != "baseline_run_id"]
        conn.execute("DROP INDEX ix_runs_baseline_run_id")
        conn.execute(f"CREATE TABLE runs_old AS SELECT {', '.join(cols)} FROM runs")
        conn.execute("DROP TABLE runs")
        conn.execute("ALTER TABLE runs_old RENAME TO runs")
        conn.execute("DROP TABLE attention_results")
    store = ResultsStore(str(path), readonly=True)
    assert list(store.runs()["run_id"]) == ["tiny-old"]
    assert store.attention_results().empty


def test_run_ids_started_in_one_second_stay_apart() -> None:
    """A run saved under another's id replaces it, and `optimize` or a sweep starts many runs of one model
    within a second: an id carries 8 random hex digits (4 met once in a few hundred optimisations), and a
    thousand drawn at once are a thousand."""
    import re

    from harness.core.records import new_id

    ids = [new_id("tiny") for _ in range(1000)]
    assert all(re.fullmatch(r"tiny-\d{8}-\d{6}-[0-9a-f]{8}", i) for i in ids)
    assert len(set(ids)) == 1000


def test_a_run_id_is_never_given_twice_by_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two draws of the same 8 digits in one second gave two runs one id (a thousand ids at once met so about
    once in 8,600 tries): the second is drawn again."""
    from datetime import datetime

    from harness.core import records

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return cls(2026, 1, 2, 3, 4, 5)

    draws = iter(["0badf00d", "0badf00d", "feedface"])
    monkeypatch.setattr(records, "datetime", Frozen)
    monkeypatch.setattr(records.secrets, "token_hex", lambda n: next(draws))
    assert [records.new_id("tiny"), records.new_id("tiny")] == [
        "tiny-20260102-030405-0badf00d",
        "tiny-20260102-030405-feedface",
    ]
