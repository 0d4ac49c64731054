"""Results database migrations (harness/store/migrations, Alembic): databases of older harnesses keep working.

The old database is made for real: the CREATE statements below are what SQLAlchemy emitted for
harness/store/schema.py as of commit 11cbcff (the baseline revision, 0001), and its run is inserted as that
harness wrote runs.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from test_store import make_result

from harness.profilers.capture import save as save_run
from harness.store import migrations
from harness.store.results import ResultsStore
from harness.store.schema import SCHEMA_VERSION, Base

OLD_SCHEMA = """
CREATE TABLE runs (
    id VARCHAR(64) NOT NULL, created_at DATETIME NOT NULL, model VARCHAR(64) NOT NULL,
    mode VARCHAR(16) NOT NULL, device VARCHAR(16) NOT NULL, device_name VARCHAR(128) NOT NULL,
    precision VARCHAR(8) NOT NULL, compile BOOLEAN NOT NULL, attention VARCHAR(16) NOT NULL,
    batch_size INTEGER NOT NULL, context_length INTEGER, warmup INTEGER NOT NULL, steps INTEGER NOT NULL,
    status VARCHAR(16) NOT NULL, error TEXT, profiler VARCHAR(16) NOT NULL, nsys_mode VARCHAR(16),
    experiment VARCHAR(64), params INTEGER, tokens_per_s FLOAT, flops_per_step FLOAT, achieved_flops FLOAT,
    mfu FLOAT, peak_memory_bytes INTEGER, nsys_rep TEXT, nsys_sqlite TEXT, config JSON NOT NULL,
    model_info JSON NOT NULL, env JSON NOT NULL, summary JSON NOT NULL, PRIMARY KEY (id)
);
CREATE INDEX ix_runs_experiment ON runs (experiment);
CREATE INDEX ix_runs_precision ON runs (precision);
CREATE INDEX ix_runs_device ON runs (device);
CREATE INDEX ix_runs_model ON runs (model);
CREATE TABLE harness_meta ("key" VARCHAR(64) NOT NULL, value TEXT NOT NULL, PRIMARY KEY ("key"));
CREATE TABLE step_timings (
    id INTEGER NOT NULL, run_id VARCHAR(64) NOT NULL, step INTEGER NOT NULL, phase VARCHAR(32) NOT NULL,
    duration_ns INTEGER NOT NULL, warmup BOOLEAN NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE CASCADE
);
CREATE INDEX ix_step_timings_run_id ON step_timings (run_id);
CREATE TABLE agreement (
    id INTEGER NOT NULL, run_id VARCHAR(64) NOT NULL, phase VARCHAR(32) NOT NULL, steps INTEGER NOT NULL,
    nvtx_mean_ns FLOAT NOT NULL, nvtx_median_ns FLOAT NOT NULL, timer_mean_ns FLOAT NOT NULL,
    timer_median_ns FLOAT NOT NULL, rel_diff FLOAT NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE CASCADE
);
CREATE INDEX ix_agreement_run_id ON agreement (run_id);
INSERT INTO harness_meta VALUES ('schema_version', '1');
INSERT INTO runs VALUES (
    'tiny-20261123-150000-ab12', '2026-11-23 15:00:00.000000', 'tiny', 'train', 'cpu', 'AMD EPYC', 'fp32', 0,
    'sdpa', 4, 128, 1, 2, 'ok', NULL, 'none', NULL, 'sweep-20261123-150000-0a0a', 22696448, 812.5, 5.5e9,
    4.4e9, NULL, 841097216, NULL, NULL, '{"model": "tiny", "batch_size": 4}', '{"d_model": 512}', '{}',
    '{"phases": [{"phase": "forward", "mean_ns": 1000000.0, "std_ns": 10.0}]}'
);
INSERT INTO step_timings (run_id, step, phase, duration_ns, warmup) VALUES
    ('tiny-20261123-150000-ab12', 0, 'forward', 3000000, 1),
    ('tiny-20261123-150000-ab12', 1, 'forward', 1000000, 0),
    ('tiny-20261123-150000-ab12', 2, 'forward', 1000000, 0);
"""
OLD_RUN = "tiny-20261123-150000-ab12"
ENERGY = {
    "energy_j": 12.5,
    "avg_power_w": 250.0,
    "peak_power_w": 300.0,
    "flops_per_j": 4e9,
    "tokens_per_j": 40.0,
    "energy_method": "counter",
}


def old_database(path: Path, *, marker: bool = True) -> Path:
    con = sqlite3.connect(path)
    con.executescript(OLD_SCHEMA)
    if not marker:  # as every database was before harness_meta
        con.execute("DROP TABLE harness_meta")
    con.commit()
    con.close()
    return path


def tables(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()


def revision(path: Path) -> str | None:
    with create_engine(f"sqlite:///{path}").connect() as conn:
        return migrations.revision_of(conn)


def with_energy(run_id: str):
    result = make_result(run_id)
    result.extra = {"energy_summary": dict(ENERGY), "power_notes": ["NVML: gpu0 (H100): power and energy"]}
    return result


def test_database_of_the_first_schema_is_upgraded_and_takes_energy_runs(tmp_path: Path) -> None:
    path = old_database(tmp_path / "old.sqlite")
    assert revision(path) is None
    store = ResultsStore(str(path))
    assert revision(path) == migrations.HEAD
    old = store.get(OLD_RUN)
    assert old.model == "tiny" and old.batch_size == 4 and old.energy_j is None and old.artifacts is None
    assert [s.duration_ns for s in old.step_timings] == [3_000_000, 1_000_000, 1_000_000]
    (row,) = store.runs().to_dict("records")
    assert row["forward_mean_ns"] == 1_000_000.0 and row["experiment"] == "sweep-20261123-150000-0a0a"

    save_run(store, with_energy("tiny-new"), baseline_run_id=OLD_RUN, artifacts={"trace": "t.json"})
    again = ResultsStore(str(path), readonly=True)
    new = again.runs(ids=["tiny-new"]).iloc[0]
    assert {k: new[k] for k in ENERGY} == ENERGY
    assert new["baseline_run_id"] == OLD_RUN and new["artifacts"] == {"trace": "t.json"}
    assert again.attention_results().empty and again.baselines().empty  # the tables added since exist
    store.tag_baseline("main", OLD_RUN)
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM harness_meta").fetchall() == [(str(SCHEMA_VERSION),)]
    con.close()


def test_read_only_open_upgrades_an_old_database_and_leaves_the_marker_alone(tmp_path: Path) -> None:
    path = old_database(tmp_path / "old.sqlite", marker=False)
    store = ResultsStore(str(path), readonly=True)
    assert list(store.runs()["run_id"]) == [OLD_RUN]
    assert revision(path) == migrations.HEAD
    assert "harness_meta" not in tables(path)  # reading does not make a database ours
    save_run(ResultsStore(str(path)), with_energy("tiny-new"))  # writing does
    assert "harness_meta" in tables(path)


def test_database_at_an_intermediate_revision_is_upgraded(tmp_path: Path) -> None:
    from alembic import command

    path = tmp_path / "mid.sqlite"
    with create_engine(f"sqlite:///{path}").begin() as conn:
        command.upgrade(migrations.config(conn), "0003")  # before baselines, artifacts, energy
    assert revision(path) == "0003" and "baselines" not in tables(path)
    save_run(ResultsStore(str(path)), with_energy("tiny-e"))
    assert revision(path) == migrations.HEAD
    assert ResultsStore(str(path), readonly=True).runs()["energy_j"].tolist() == [12.5]


def test_database_of_a_newer_harness_with_an_unknown_revision_is_used_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite"
    save_run(ResultsStore(str(path)), make_result("tiny-1"))
    con = sqlite3.connect(path)
    con.execute("UPDATE harness_alembic_version SET version_num = '0099'")
    con.commit()
    con.close()
    save_run(
        ResultsStore(str(path)), make_result("tiny-2")
    )  # additive changes: same SCHEMA_VERSION, still ours
    assert list(ResultsStore(str(path), readonly=True).runs()["run_id"]) == ["tiny-1", "tiny-2"]
    assert revision(path) == "0099"


def test_new_database_is_created_from_the_schema_and_stamped_at_head(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    ResultsStore(str(path))
    assert revision(path) == migrations.HEAD
    assert tables(path) == {*Base.metadata.tables, migrations.VERSION_TABLE}


def test_the_revisions_build_what_harness_schema_declares(tmp_path: Path) -> None:
    """A column or table added to harness/store/schema.py without a revision fails here."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    assert ScriptDirectory.from_config(migrations.config()).get_current_head() == migrations.HEAD
    engine = create_engine(f"sqlite:///{tmp_path / 'scratch.sqlite'}")
    with engine.begin() as conn:
        migrations.upgrade(conn)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE})
        differences = compare_metadata(context, Base.metadata)
    # SQLite cannot add a foreign key in place, so 0003 leaves runs.baseline_run_id without one there
    fks = [d for d in differences if d[0] == "add_fk" and d[1].parent.name == "runs"]
    assert [d for d in differences if d not in fks] == []
    assert [c.name for fk in fks for c in fk[1].columns] == ["baseline_run_id"]


def columns(path: Path) -> dict[str, set[str]]:
    """Each table of ours (Alembic's version table left out) with its columns and indexes."""
    con = sqlite3.connect(path)
    try:
        names = [n for n in tables(path) if n != migrations.VERSION_TABLE]
        return {
            n: {r[1] for r in con.execute(f"PRAGMA table_info({n})")}
            | {r[1] for r in con.execute(f"PRAGMA index_list({n})") if not r[1].startswith("sqlite_")}
            for n in names
        }
    finally:
        con.close()


def test_each_downgrade_undoes_its_upgrade(tmp_path: Path) -> None:
    """Up one revision at a time to the newest, then down one at a time: each revision's tables, columns and
    indexes are as its upgrade left them, and below the first nothing of ours is left."""
    from alembic import command
    from alembic.script import ScriptDirectory

    order = [s.revision for s in ScriptDirectory.from_config(migrations.config()).walk_revisions()][::-1]
    path = tmp_path / "down.sqlite"
    engine = create_engine(f"sqlite:///{path}")
    at: dict[str, dict[str, set[str]]] = {}
    for rev in order:
        with engine.begin() as conn:
            command.upgrade(migrations.config(conn), rev)
        at[rev] = columns(path)
    assert at[migrations.HEAD]["runs"] >= {"advice", "world_size", "energy_method", "artifacts"}
    for rev in order[-2::-1]:
        with engine.begin() as conn:
            command.downgrade(migrations.config(conn), rev)
        assert (revision(path), columns(path)) == (rev, at[rev])
    with engine.begin() as conn:
        command.downgrade(migrations.config(conn), "base")
    assert columns(path) == {}


def test_heads_command(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness.store.migrations", "heads"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == migrations.HEAD


@pytest.mark.parametrize("marker", [True, False], ids=["marked", "before-marker"])
def test_old_database_opened_by_two_writers_at_once_is_upgraded_once(tmp_path: Path, marker: bool) -> None:
    """Two processes open the same old database together: both succeed, and one revision is recorded."""
    path = old_database(tmp_path / "old.sqlite", marker=marker)
    code = (
        "import sys; from harness.store.results import ResultsStore; from test_store import make_result; "
        "ResultsStore(sys.argv[1]).save(make_result(sys.argv[2]))"
    )
    env = {**os.environ, "PYTHONPATH": f"{Path(__file__).parent}{os.pathsep}{Path(__file__).parents[1]}"}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path), f"tiny-{i}"], env=env) for i in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    con = sqlite3.connect(path)
    assert con.execute("SELECT version_num FROM harness_alembic_version").fetchall() == [(migrations.HEAD,)]
    con.close()
    assert sorted(ResultsStore(str(path), readonly=True).runs()["run_id"]) == sorted(
        [OLD_RUN, "tiny-0", "tiny-1"]
    )


def test_tables_of_run_rows_have_id_and_run_id_first_in_new_and_upgraded_databases(tmp_path: Path) -> None:
    """schema.RunRow's columns come first in a new database, as create_run_table puts them in an upgraded
    one: the two ways of making a database give these tables the same columns in the same order."""
    new, upgraded = tmp_path / "new.sqlite", tmp_path / "upgraded.sqlite"
    ResultsStore(str(new))
    with create_engine(f"sqlite:///{upgraded}").begin() as conn:
        migrations.upgrade(conn)

    def order(path: Path, table: str) -> list[str]:
        con = sqlite3.connect(path)
        try:
            return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        finally:
            con.close()

    for table in ("step_timings", "agreement", "block_timings"):
        assert order(new, table)[:2] == ["id", "run_id"]
        assert order(new, table) == order(upgraded, table)
