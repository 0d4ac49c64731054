"""A run's configuration edited by hand in the results database: each field is read as `harness import` takes
it (its type, its bounds, a name the harness has), or the run is damaged, said in one line by every command
that reads it; `optimize RUN` made its command line of what was stored (`--batch-size x`). A configuration of
an older harness, without a field added since, and one with a field of a newer harness, are read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_store_edited import ONE, edited, imported, runner

from harness.cli import app

pytestmark = pytest.mark.attack
# the JSON path and the value set there (SQL), what the line names
DAMAGE = {
    "batch size text": ("'$.batch_size', 'x'", "config.batch_size is 'x', not a whole number"),
    "batch size -3": ("'$.batch_size', -3", "config.batch_size is -3, outside 1.."),
    "batch size 1e300": ("'$.batch_size', 1e300", "config.batch_size is 1e+300, not a whole number"),
    "batch size a list": ("'$.batch_size', json('[1]')", "config.batch_size is [1], not a whole number"),
    "context length -5": ("'$.context_length', -5", "config.context_length is -5, outside 1.."),
    "precision unknown": ("'$.precision', 'fp8'", "config.precision is 'fp8', not one of "),
    "device unknown": ("'$.device', 'tpu'", "config.device is 'tpu', not one of "),
    "a fix a list": ("'$.fixes', json('[[1]]')", "config.fixes is [[1]], not a list of the catalogue's"),
    "loader workers past the most": (
        "'$.loader_workers', 100000",
        "config.loader_workers is 100000, outside 0..256",
    ),
    "rank timeout past a timedelta": (
        "'$.rank_timeout', 1e20",
        "config.rank_timeout is 1e+20, not a time --rank-timeout takes",
    ),
    "endpoint with ESC": ("'$.rdzv_endpoint', 'h' || char(27)", "config.rdzv_endpoint is 'h\\x1b': it holds"),
}
COMMANDS = [["runs"], ["show", "a-1"], ["diff", "a-1", "b-1"], ["health", "a-1"], ["optimize", "a-1"]]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported(tmp_path_factory.mktemp("config"), "a-1", "b-1")


@pytest.mark.parametrize("edit", list(DAMAGE))
def test_a_configuration_field_edited_by_hand_is_one_line(stored: Path, tmp_path: Path, edit: str) -> None:
    setting, field = DAMAGE[edit]
    db = edited(stored, tmp_path, ONE.format(f"config = json_set(config, {setting})"))
    said = f"error: results database {db}: run 'a-1' is damaged ({field}"
    for command in COMMANDS:
        result = runner.invoke(app, [*command, "--db", str(db)])
        assert result.exit_code == 1, (command, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(said), (command, result.stderr)
        assert "--batch-size" not in result.stdout
        if command == ["runs"]:
            assert "b-1" in result.stdout and "a-1" not in result.stdout, result.stdout


def test_a_configuration_of_an_older_or_newer_harness_is_read(stored: Path, tmp_path: Path) -> None:
    """A field missing (a run stored before it existed) is its default; a field this harness lacks (a newer
    harness's database, read as it is) is passed over by every reader."""
    db = edited(
        stored,
        tmp_path,
        ONE.format("config = json_remove(config, '$.new_tokens', '$.power_period_ms', '$.rank_timeout')"),
        "update runs set config = json_set(config, '$.future_knob', 3, '$.plant', 'host-sync') "
        "where id = 'b-1'",
    )
    for command in COMMANDS:
        result = runner.invoke(app, [*command, "--db", str(db)])
        assert result.exit_code == 0, (command, result.output)
        assert "damaged" not in result.output, (command, result.output)
    optimized = runner.invoke(app, ["optimize", "b-1", "--db", str(db)])
    assert optimized.exit_code == 0, optimized.output
    assert re.search(r"`harness optimize char .*--plant host-sync`", optimized.output), optimized.output
    assert "future" not in optimized.output


def test_a_model_or_plant_of_a_newer_harness_is_read(stored: Path, tmp_path: Path) -> None:
    """A model or plant this harness lacks is a newer harness's, as a field it lacks is: read as stored,
    shown as text; one holding a control character is still damaged."""
    db = edited(
        stored, tmp_path, ONE.format("config = json_set(config, '$.model', '7B', '$.plant', 'fp8-gemm')")
    )
    for command in (["runs"], ["show", "a-1"]):
        result = runner.invoke(app, [*command, "--db", str(db)])
        assert result.exit_code == 0 and "damaged" not in result.output, (command, result.output)
    shown = runner.invoke(app, ["show", "a-1", "--db", str(db), "--format", "json"])
    assert "fp8-gemm" in shown.stdout
    (tmp_path / "esc").mkdir()
    bad = edited(
        stored, tmp_path / "esc", ONE.format("config = json_set(config, '$.plant', 'x' || char(27))")
    )
    result = runner.invoke(app, ["show", "a-1", "--db", str(bad)])
    assert result.exit_code == 1 and "config.plant is 'x\\x1b'" in result.stderr, result.output
