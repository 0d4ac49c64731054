"""`show RUN` repeats the health and findings stored with a run, judged of its export as the run was
captured: where that export is gone, or is no longer the file judged (replaced, written in place), it says
so in one line and points at `harness health RUN`, which judges the export as it is now. It tells without
reading the export again: size and times, and where they differ its sampled digest."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from reading import flat
from test_store import make_result
from typer.testing import CliRunner

from analysis.advice.record import CHANGED, GONE, since_judged
from analysis.front.examine import capture_advice
from analysis.trace.opening import open_trace
from harness.cli import app
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
RUN = "tiny-prof"
JUDGED_THEN = "those shown are as judged then; `harness health tiny-prof` judges the export as it is now"


def stored_run(tmp_db: str, export: Path) -> dict:
    """A run under nsys stored with the health and findings its export gave as it was captured."""
    with open_trace(export) as trace:
        record = capture_advice(trace)
    save_run(ResultsStore(tmp_db), make_result(RUN), profiler="nsys", nsys_mode="light",
             nsys_sqlite=str(export), advice=record)  # fmt: skip
    return record


@pytest.fixture
def export(tmp_path: Path, cpu_export: Path) -> Path:
    copy = tmp_path / "run.sqlite"
    shutil.copy(cpu_export, copy)
    return copy


def shown(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["show", RUN, *args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, flat(result.stderr)


def test_show_says_the_export_was_written_in_place_since_it_was_judged(tmp_db: str, export: Path) -> None:
    """Its NVTX ranges deleted after the run was stored: `show` said "health ok" alone, as judged at capture,
    while `health RUN` reads the export now and warns."""
    record = stored_run(tmp_db, export)
    assert record["export"]["size"] == export.stat().st_size
    with sqlite3.connect(export) as con:
        con.execute("DELETE FROM NVTX_EVENTS")
    con.close()
    code, _, said = shown()
    assert code == 0 and said.startswith("note: health ok (12 checks)")
    assert (
        f"note: run {RUN}'s export is not the file its health and findings were judged of ({export} has "
        f"changed since the run was captured): {JUDGED_THEN}"
    ) in said
    health = runner.invoke(app, ["health", RUN])
    assert "NVTX ranges warn" in flat(health.stderr)


def test_show_says_the_export_was_replaced_by_another(tmp_db: str, export: Path, a100_export: Path) -> None:
    stored_run(tmp_db, export)
    shutil.copy(a100_export, export)
    _, _, said = shown()
    assert f"({export} has changed since the run was captured): {JUDGED_THEN}" in said
    code, out, said = shown("--format", "json")  # csv and json: on stderr, the document as it was
    assert code == 0 and json.loads(out)["health"] and JUDGED_THEN in said


def test_show_says_the_export_is_gone(tmp_db: str, export: Path) -> None:
    stored_run(tmp_db, export)
    export.unlink()
    _, _, said = shown()
    assert (
        f"note: run {RUN}'s export is gone ({export}): its health and findings shown are those judged of it "
        "when the run was captured"
    ) in said


def test_show_says_nothing_of_an_export_as_judged_or_only_touched(tmp_db: str, export: Path) -> None:
    """The same bytes with other times (copied back over itself, touched): its content decides, and it is
    the file judged."""
    record = stored_run(tmp_db, export)
    _, _, said = shown()
    assert "export" not in said and since_judged(record) is None
    data = export.read_bytes()
    export.write_bytes(data)
    os.utime(export, ns=(1_000_000_000, 1_000_000_000))
    _, _, said = shown()
    assert "export" not in said and since_judged(record) is None


def test_since_judged_tells_without_reading_a_file_of_the_same_size_and_times(
    tmp_db: str, export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`show` must stay fast: an export whose size and times are those kept is not read at all; one whose
    size differs is not read either."""
    record = stored_run(tmp_db, export)

    def no_read(*args: object) -> str:
        raise AssertionError("the export was read")

    monkeypatch.setattr("analysis.advice.record.content_digest", no_read)
    assert since_judged(record) is None
    with open(export, "ab") as f:
        f.write(b"\0" * 4096)
    assert since_judged(record) == CHANGED
    export.unlink()
    assert since_judged(record) == GONE
    assert since_judged({**record, "export": None}) == GONE  # a record kept without a stamp: gone is known
