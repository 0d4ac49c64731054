"""A results database edited by hand, read past where the user did not name what is damaged: an attention
sweep or a named baseline that fails its check is left out of `dashboard` and `baseline list` and named
after their output, exit 1, as a damaged run is (tests/test_store_edited.py); one the user names (`dashboard
--sweep`, a run id's start that only a damaged run has) refuses in its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_store_edited import edited, imported, runner

from harness.cli import app

pytestmark = pytest.mark.attack
DAMAGED = "it was changed outside the harness; restore a copy of the database"


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs a-1 and b-1 and two attention sweeps, attn-old and attn-new (the newest), as stored."""
    from harness.core import env
    from harness.core.records import AttentionCell, AttentionConfig, AttentionSweep
    from harness.store.results import ResultsStore

    folder = tmp_path_factory.mktemp("sweeps")
    db = imported(folder, "a-1", "b-1")
    store = ResultsStore(str(db))
    config = AttentionConfig(head_dims=(16,), seq_lens=(256,))
    for sweep_id in ("attn-old", "attn-new"):
        sweep = AttentionSweep(sweep_id, config, "cpu", "x86", "rss", env.collect())
        for impl in ("math", "sdpa"):
            store.save_attention(sweep, AttentionCell(impl, 16, 256, "ok", 1e5, 1e3, 2e5, 2e3, 2**20))
    store.engine.dispose()
    return db


NEWEST_CELL = (
    "update attention_results set forward_mean_ns = 'x' where sweep_id = 'attn-new' and impl = 'sdpa'"
)
SWEEP_SAID = "attention sweep 'attn-new' is damaged (sdpa head_dim 16 seq_len 256: forward_mean_ns is 'x'"


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_the_dashboard_draws_the_newest_sound_sweep_and_names_the_damaged_one(
    sweeps: Path, tmp_path: Path
) -> None:
    """The newest sweep damaged: the page was refused whole in its line."""
    db = edited(sweeps, tmp_path, NEWEST_CELL)
    page = tmp_path / "page.html"
    result = runner.invoke(app, ["dashboard", "-o", str(page), "--db", str(db), "--format", "json"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    lines = _lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"error: results database {db}: {SWEEP_SAID}"), lines
    assert lines[0].endswith(DAMAGED), lines
    (panel,) = [p for p in json.loads(result.stdout) if p["Panel"] == "attention"]
    assert panel["Drawn"] is True and "attn-old" in page.read_text() and "attn-new" not in page.read_text()


@pytest.mark.parametrize("named", ["attn-new", "attn-n"])
def test_the_dashboard_of_a_damaged_sweep_named_refuses_in_its_line(
    sweeps: Path, tmp_path: Path, named: str
) -> None:
    db = edited(sweeps, tmp_path, NEWEST_CELL)
    page = tmp_path / "page.html"
    result = runner.invoke(app, ["dashboard", "-o", str(page), "--sweep", named, "--db", str(db)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.stderr.startswith(f"error: results database {db}: {SWEEP_SAID}"), result.stderr
    assert result.stderr.count("\n") == 1 and not page.exists(), result.output


BASELINES = (
    "insert into baselines (name, run_id, created_at) values ('main', 'a-1', 'never')",
    "insert into baselines (name, run_id, created_at) values ('sound', 'b-1', '2026-11-27 10:00:00.000000')",
)


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ((), "baseline 'main' is damaged (created_at is 'never', not a time)"),
        (("update runs set created_at = 'never' where id = 'a-1'",), "run 'a-1' is damaged (created_at is"),
    ],
    ids=["its tag", "its run's time"],
)
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_baseline_list_lists_the_sound_baselines_and_names_a_damaged_one(
    sweeps: Path, tmp_path: Path, sql: tuple[str, ...], said: str, fmt: str
) -> None:
    """`main` damaged (its tag's time, or its run's): `baseline list` was refused whole in its line."""
    db = edited(sweeps, tmp_path, *BASELINES, *sql)
    result = runner.invoke(app, ["baseline", "list", "--db", str(db), "--format", fmt])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    lines = _lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"error: results database {db}: {said}"), lines
    assert lines[0].endswith(DAMAGED), lines
    assert "sound" in result.stdout and "main" not in result.stdout, result.stdout


def test_baseline_list_with_every_baseline_damaged_says_no_more(sweeps: Path, tmp_path: Path) -> None:
    """Not `no baselines yet`: there is one, damaged."""
    db = edited(sweeps, tmp_path, BASELINES[0])
    result = runner.invoke(app, ["baseline", "list", "--db", str(db)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert _lines(result.stderr) == [_lines(result.stderr)[0]] and "no baselines" not in result.output
    assert "baseline 'main' is damaged" in result.stderr and result.stdout == ""


def test_the_sweeps_and_baselines_as_stored_are_read(sweeps: Path, tmp_path: Path) -> None:
    db = edited(sweeps, tmp_path, BASELINES[1])
    listed = runner.invoke(app, ["baseline", "list", "--db", str(db), "--format", "json"])
    assert listed.exit_code == 0 and listed.stderr == "", listed.output
    assert [b["name"] for b in json.loads(listed.stdout)] == ["sound"]
    page = tmp_path / "page.html"
    drawn = runner.invoke(app, ["dashboard", "-o", str(page), "--db", str(db), "--sweep", "attn-old"])
    assert drawn.exit_code == 0 and "attn-old" in page.read_text(), drawn.output


NEWER_B = "update runs set created_at = '2026-11-28 10:00:00.000000' where id = 'b-1'"
B_DAMAGED = "update runs set summary = '[1, 2' where id = 'b-1'"
B_SAID = "run 'b-1' is damaged (summary is '[1, 2', not JSON)"


def test_a_run_id_start_of_a_damaged_run_and_another_is_the_start_of_both(
    sweeps: Path, tmp_path: Path
) -> None:
    """`show run` with run-b damaged beside run-a: refused in run-b's line, as if it had been named."""
    db = edited(
        sweeps,
        tmp_path,
        "update runs set id = 'run-' || substr(id, 1, 1)",
        "update step_timings set run_id = 'run-' || substr(run_id, 1, 1)",
        "update runs set summary = '[1, 2', created_at = '2026-11-28 10:00:00.000000' where id = 'run-b'",
    )
    assert runner.invoke(app, ["show", "run-b", "--db", str(db)]).exit_code == 1  # damaged
    result = runner.invoke(app, ["show", "run", "--db", str(db)])
    assert result.exit_code == 2 and "damaged" not in result.output, result.output
    assert result.stderr == (
        "error: 'run' is the start of 2 runs' ids (run-a, run-b): give more of one; `harness runs` lists the "
        "runs\n"
    )


@pytest.mark.parametrize("ref", ["b", "b-", "latest", "-1"])
def test_a_reference_only_a_damaged_run_answers_refuses_in_its_line(
    sweeps: Path, tmp_path: Path, ref: str
) -> None:
    """A start of its id, `latest` or -1 for the newest run: the run the user meant cannot be read, said so,
    never another shown in its place."""
    db = edited(sweeps, tmp_path, NEWER_B, B_DAMAGED)
    result = runner.invoke(app, ["show", ref, "--db", str(db)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.stderr.startswith(f"error: results database {db}: {B_SAID}"), result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == "", result.output


NVTX_A = "update runs set config = json_set(config, '$.nvtx_detail', json('true')) where id = 'a-1'"


def test_blocks_latest_passes_over_a_newer_damaged_run_made_without_nvtx_detail(
    sweeps: Path, tmp_path: Path
) -> None:
    """b-1, newer, made without --nvtx-detail and damaged: `blocks` (the newest --nvtx-detail run) was
    refused in b-1's line; it reads a-1, which has no block times."""
    db = edited(sweeps, tmp_path, NVTX_A, NEWER_B, B_DAMAGED)
    result = runner.invoke(app, ["blocks", "--db", str(db)])
    assert result.exit_code == 1 and "damaged" not in result.output, result.output
    assert result.stderr == "error: run a-1 has no per-block times stored and no trace to read them from\n"


def test_blocks_latest_of_a_damaged_newest_nvtx_detail_run_refuses_in_its_line(
    sweeps: Path, tmp_path: Path
) -> None:
    db = edited(sweeps, tmp_path, NVTX_A, "update runs set summary = '[1, 2' where id = 'a-1'")
    result = runner.invoke(app, ["blocks", "--db", str(db)])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith(f"error: results database {db}: run 'a-1' is damaged (summary is"), (
        result.stderr
    )
