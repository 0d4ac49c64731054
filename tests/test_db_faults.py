"""The results database under attack: --db in memory or naming a folder, SIGTERM while a save
waits on a locked database, an interrupted unsaved-run file."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import typer
from reading import flat
from test_store import make_result
from test_store_faults import filled, hold_lock, refused_while_locked
from typer.testing import CliRunner

from harness.cli import app
from harness.profilers import registry
from harness.profilers.capture import save as save_run
from harness.store import unsaved
from harness.store.results import UnsavedRun

pytestmark = pytest.mark.attack(saves=True)
runner = CliRunner()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?uri=true"])
@pytest.mark.parametrize("command", [["run", "tiny", "--device", "cpu"], ["runs"], ["import", "x.json"]])
def test_a_database_in_memory_is_refused(url: str, command: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [*command, "--db", url])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is a database in memory" in result.output
    assert list(tmp_path.iterdir()) == []


def test_an_sqlite_uri_names_its_file_not_a_folder_file_colon(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "r.sqlite"
    filled(db, 1)
    result = runner.invoke(app, ["runs", "--db", f"sqlite:///file:{db}?mode=ro&uri=true", "--format", "csv"])
    assert result.exit_code == 0, result.output  # it said "no results database at file:…"
    assert "tiny-0" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"]  # no folder "file:" made


def test_a_read_only_database_is_refused_before_the_run_not_after_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "r.sqlite"
    filled(db, 1)
    before = db.read_bytes()
    args = ["run", "char", "--device", "cpu", "--steps", "1", "--warmup", "0"]
    result = runner.invoke(app, [*args, "--db", f"sqlite:///file:{db}?mode=ro&uri=true"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: results database {db} is read-only (attempt to write a readonly database); pass --db a "
        "writable one"
    ]  # the run was made, then written to a file for `harness import`
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"] and db.read_bytes() == before


@pytest.mark.parametrize("command", [["run", "tiny", "--device", "cpu"], ["runs"], ["show", "x"]])
def test_a_db_that_is_a_folder_says_so(command: list[str], tmp_path: Path) -> None:
    result = runner.invoke(app, [*command, "--db", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"--db {tmp_path} is a folder, not a database file" in flat(result.output)
    assert "unable to open database file" not in result.output


def test_sigterm_while_waiting_on_a_locked_database_keeps_the_run_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_DB_TIMEOUT", "120")
    db = tmp_path / "r.sqlite"
    store = filled(db, 1)
    holder = hold_lock(db, 120)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    began = time.monotonic()
    try:
        timer.start()
        with pytest.raises(UnsavedRun) as caught:
            save_run(store, make_result("tiny-term"))
    finally:
        timer.cancel()
        holder.kill()
        holder.wait()
    assert time.monotonic() - began < 30  # it stopped waiting, not after HARNESS_DB_TIMEOUT
    file = tmp_path / "harness-unsaved-tiny-term.json"
    assert caught.value.path == file and file.is_file() and caught.value.signal == signal.SIGTERM
    assert "SIGTERM came while it waited" in str(caught.value)
    waited = float(re.search(r"\(waited ([0-9.]+) s;", str(caught.value)).group(1))  # not the 120 it may
    assert 0.4 <= waited <= time.monotonic() - began + 0.1
    assert unsaved.read(file, registry.NAMES).result.run_id == "tiny-term"


def test_the_command_says_where_the_run_went_and_exits_143(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli.run import _save

    class Locked:
        def save(self, result: object, **how: object) -> None:
            raise UnsavedRun(
                "run r is not in the results database: ... It was written to F", Path("F"), 15,
                run_id="r", reason="...",
            )  # fmt: skip

    with pytest.raises(typer.Exit) as ended:
        _save(Locked(), make_result("r"))  # type: ignore[arg-type]
    assert ended.value.exit_code == 143
    assert "It was written to F" in capsys.readouterr().err


class Refusing:
    """A store whose every save is refused, with `signal` (a signal that came as it waited) or none."""

    def __init__(self, signal: int | None) -> None:
        self.signal = signal

    def save(self, result: object, **how: object) -> None:
        raise UnsavedRun(
            "run r is not in the results database: ... It was written to F", Path("F"), self.signal,
            run_id="r", reason="...",
        )  # fmt: skip


def test_one_save_serves_the_commands_and_the_captures() -> None:
    """A save's refusal is returned, its line listed once; one that came with a signal is returned too, or,
    where the caller ends on it (`run --repeats`, `sweep`), raised with the signal's exit code."""
    from harness.profilers.capture import save_once

    said: list[str] = []
    quiet, late = save_once(Refusing(None), make_result("r"), said), Refusing(15)  # type: ignore[arg-type]
    assert quiet is not None and quiet.exit_code == 1
    assert save_once(late, make_result("r"), said) is not None  # type: ignore[arg-type]
    assert said == ["run r is not in the results database: ... It was written to F"]
    with pytest.raises(UnsavedRun) as ended:
        save_once(late, make_result("r"), signal_ends=True)  # type: ignore[arg-type]
    assert (ended.value.signal, ended.value.exit_code) == (15, 143)
    assert save_once(Refusing(15), make_result("r")) is not None  # type: ignore[arg-type]


def test_a_refusal_says_whose_run_it_is_and_why_and_only_that_run_is_said_not_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's refusal carries the run it refused and the reason, and where a run is (stored or in a
    file) is read from that, never from the words of the line people are shown: a line that names another
    run does not make that run unsaved."""
    from harness.core.records import RunConfig, RunResult
    from harness.profilers.capture import stored_as

    monkeypatch.setenv("HARNESS_DB_TIMEOUT", "1")
    db = tmp_path / "r.sqlite"
    _, refusal = refused_while_locked(db, "b-1")
    assert (refusal.run_id, refusal.path) == ("b-1", tmp_path / "harness-unsaved-b-1.json")
    assert refusal.reason == (
        f"results database {db} is locked by another process (waited 1 s; HARNESS_DB_TIMEOUT sets how long)"
    )
    assert str(refusal).startswith(f"run b-1 is not in the results database: {refusal.reason}. ")
    error = "interrupted by SIGTERM after 1 of 3 measured steps"
    refused, other = (
        RunResult(i, RunConfig(model="char"), "interrupted", error=error) for i in ("b-1", "r-1")
    )
    assert stored_as(refused, [None, refusal]) == "not stored (its file is named on its own line)"
    assert stored_as(other, [None, refusal]) == "stored as interrupted"
    why = "run r-1 holds the lock"  # the database's words, quoting another run
    words = UnsavedRun(
        f"run b-1 is not in the results database: {why}", refusal.path, run_id="b-1", reason=why
    )
    assert stored_as(other, [words]) == "stored as interrupted"


def test_an_interrupted_unsaved_file_leaves_no_partial(tmp_path: Path, monkeypatch) -> None:
    real = Path.write_text

    def cut(self: Path, text: str, *args: object, **kwargs: object) -> int:
        real(self, text[:10])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", cut)
    pending = unsaved.PendingRun(result=make_result("r"), created_at=datetime.now())
    with pytest.raises(KeyboardInterrupt):
        unsaved.write(pending, [tmp_path], "locked")
    assert list(tmp_path.iterdir()) == []


def test_an_unsaved_file_in_a_full_folder_leaves_no_partial(tmp_path: Path, monkeypatch) -> None:
    real = Path.write_text

    def full(self: Path, text: str, *args: object, **kwargs: object) -> int:
        if self.parent == tmp_path:
            real(self, text[:10])
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    monkeypatch.chdir(tmp_path.parent)  # the next folder tried after the full one
    pending = unsaved.PendingRun(result=make_result("r2"), created_at=datetime.now())
    path = unsaved.write(pending, [tmp_path], "locked")
    assert path.parent != tmp_path and path.is_file()
    path.unlink()
    assert list(tmp_path.iterdir()) == []
