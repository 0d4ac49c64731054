"""Counts the database cannot store and rank counts the machine cannot hold: refused before anything runs,
one line and exit 2, no database made."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app

pytestmark = pytest.mark.attack(saves=True)
HUGE = str(10**23)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "tiny", "--steps", HUGE],
        ["run", "tiny", "--seed", HUGE],
        ["run", "tiny", "--seed", "-" + HUGE],
        ["run", "tiny", "--warmup", HUGE],
        ["run", "tiny", "--batch-size", HUGE],
        ["run", "tiny", "--new-tokens", HUGE, "--mode", "generate"],
        ["sweep", "--models", "tiny", "--steps", HUGE],
        ["sweep", "--models", "tiny", "--batch-sizes", f"1,{HUGE}"],
        ["overhead", "tiny", "--steps", HUGE],
    ],
    ids=[
        "steps",
        "seed",
        "negative-seed",
        "warmup",
        "batch",
        "new-tokens",
        "sweep",
        "sweep-batches",
        "overhead",
    ],
)
def test_counts_past_int64_are_refused_before_anything_runs(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "results.sqlite"
    result = CliRunner().invoke(app, [*args, "--device", "cpu", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "out of range" in result.output and "Traceback" not in result.output
    assert not db.exists()


def test_nproc_past_the_machine_is_refused_with_the_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HARNESS_MAX_RANKS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)  # 2 cores, 8 GiB: 8
    monkeypatch.setattr("harness.core.bounds._available_memory", lambda: 8 * 1024**3)
    db = tmp_path / "results.sqlite"
    result = CliRunner().invoke(app, ["run", "tiny", "--device", "cpu", "--nproc", "1000", "--db", str(db)])
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert "--nproc 1000 is more ranks than this machine holds (at most 8: 2 cores, 4 ranks a core)" in line
    assert "HARNESS_MAX_RANKS=1000" in line
    assert not db.exists()


def test_the_rank_limit_can_be_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.core.bounds import check_ranks, rank_limit

    monkeypatch.setenv("HARNESS_MAX_RANKS", "2000")
    assert rank_limit()[0] == 2000
    check_ranks(1000)
    monkeypatch.setenv("HARNESS_MAX_RANKS", "many")
    with pytest.raises(Exception, match="not a whole number"):
        check_ranks(1000)
    for other_digits in ("\u0663\u0660\u0660\u0660", "1_000"):  # int() reads both as a count
        monkeypatch.setenv("HARNESS_MAX_RANKS", other_digits)
        with pytest.raises(Exception, match="not a whole number"):
            check_ranks(1000)


def test_memory_limits_the_ranks_when_it_is_lower(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.core.bounds import rank_limit

    monkeypatch.delenv("HARNESS_MAX_RANKS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr("harness.core.bounds._available_memory", lambda: 2 * 1024**3)
    limit, why = rank_limit()
    assert limit == 5 and "GiB available" in why
