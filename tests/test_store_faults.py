"""The results database under faults: busy, corrupt, someone else's, missing, mistyped, created in a race.

Every fault ends in one line and a nonzero exit, and a run the database will not take lands in a file that
`harness import` stores. The lock tests hold SQLite's lock from a real second process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from procs import output, start, wait_until
from reading import flat
from test_store import make_result
from typer.testing import CliRunner

from harness.cli import app
from harness.core.errors import HarnessError
from harness.profilers.capture import save as save_run
from harness.store.results import NoDatabase, ResultsStore, UnsavedRun

pytestmark = pytest.mark.attack(saves=True)  # scripts/attack.sh runs and counts these
runner = CliRunner()


def invoke(*args: str, **env: str):
    return runner.invoke(app, list(args), env=env or None, catch_exceptions=False)


def one_line(result) -> str:
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def filled(path: Path, n: int = 2) -> ResultsStore:
    store = ResultsStore(str(path))
    for i in range(n):
        save_run(store, make_result(f"tiny-{i}"))
    return store


def tables(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()


# --- read-only commands create nothing ------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["runs"], ["show", "tiny-1"], ["dashboard", "--out", "d.html"]], ids=lambda c: c[0]
)
def test_read_only_command_on_a_mistyped_db_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(*command, "--db", "typo-dir/x.sqlite")
    assert result.exit_code == 1
    assert one_line(result).startswith(f"error: no results database at {tmp_path / 'typo-dir' / 'x.sqlite'}")
    assert list(tmp_path.iterdir()) == []


def test_read_only_store_of_an_empty_file_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(NoDatabase, match=r"no results in .*empty\.sqlite"):
        ResultsStore(str(empty), readonly=True)
    assert empty.stat().st_size == 0


# --- someone else's database ------------------------------------------------------------------------------


def test_database_of_another_schema_is_never_written(tmp_path: Path) -> None:
    other = tmp_path / "app.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, started TEXT)")  # a name we use, not our table
    con.execute("INSERT INTO users (name) VALUES ('ada')")
    con.commit()
    con.close()
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    message = f"{other} is not a harness results database (it holds other tables: runs, users)"
    with pytest.raises(HarnessError, match="is not a harness results database"):
        ResultsStore(str(other))
    for args in (["runs"], ["run", "char", "--device", "cpu", "--steps", "1", "--warmup", "0"]):
        result = invoke(*args, "--db", str(other))
        assert result.exit_code == 1
        assert message in one_line(result)
    assert tables(other) == {"runs", "users"}
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before


def test_database_from_before_the_marker_is_ours(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    filled(path, 1)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE harness_meta")  # as every database was before harness_meta
    con.commit()
    con.close()
    assert list(ResultsStore(str(path), readonly=True).runs()["run_id"]) == ["tiny-0"]
    assert "harness_meta" not in tables(path)  # reading adds nothing
    save_run(ResultsStore(str(path)), make_result("tiny-9"))
    assert "harness_meta" in tables(path)


def test_database_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    filled(path, 1)
    con = sqlite3.connect(path)
    con.execute("UPDATE harness_meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(HarnessError, match="has schema 99, newer than this harness knows"):
        ResultsStore(str(path))


# --- corrupt files, wrong URLs ----------------------------------------------------------------------------


def test_corrupt_database_is_one_line_in_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    filled(path, 3)
    with path.open("r+b") as f:  # every page but the first (the schema) overwritten
        f.seek(4096)
        f.write(b"\xa5" * (path.stat().st_size - 4096))
    expected = f"error: results database {path} is corrupt (database disk image is malformed)"
    for args in (["runs"], ["show", "tiny-1"], ["dashboard", "--out", str(tmp_path / "d.html")]):
        result = invoke(*args, "--db", str(path))
        assert result.exit_code == 1
        assert one_line(result).startswith(expected)


def test_file_that_is_no_database(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 1000)
    result = invoke("runs", "--db", str(text))
    assert result.exit_code == 1
    assert f"{text} is not a SQLite database" in one_line(result)


def test_url_without_its_driver_names_the_package(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("psycopg"):
        pytest.skip("psycopg is installed here")
    result = invoke("runs", "--db", "postgresql+psycopg://user:secret@localhost/results")
    assert result.exit_code == 1
    line = one_line(result)
    assert "needs the Python package 'psycopg': pip install 'harness[postgresql]'" in line
    assert "secret" not in line
    result = invoke("runs", "--db", "foo://x")
    assert result.exit_code == 1
    assert "unknown database URL scheme 'foo://'" in one_line(result)


@pytest.mark.parametrize("command", [["runs"], ["import", "x.json"], ["run", "tiny", "--device", "cpu"]])
def test_an_empty_db_is_a_usage_error(tmp_path: Path, command: list[str]) -> None:
    """`--db ""` read as no --db: the default database (in the home folder) was read or written unasked."""
    result = invoke(*command, "--db", "", HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"))
    assert result.exit_code == 2
    assert one_line(result) == (
        "error: --db is empty: give a database path or URL, or leave --db out for the default"
    )
    assert not list(tmp_path.rglob("*.sqlite"))


def test_bad_timeout_setting(tmp_path: Path) -> None:
    result = invoke("runs", "--db", str(tmp_path / "x.sqlite"), HARNESS_DB_TIMEOUT="soon")
    assert result.exit_code == 2
    assert "HARNESS_DB_TIMEOUT must be a number of seconds" in one_line(result)


@pytest.mark.parametrize("value", ["\u0663", "1_0", "\uff15"])
def test_a_timeout_of_other_digits_is_refused(tmp_path: Path, value: str) -> None:
    """float() read '٣' as 3 s and '1_0' as 10 s: every other number the harness reads is ASCII digits."""
    result = invoke("runs", "--db", str(tmp_path / "x.sqlite"), HARNESS_DB_TIMEOUT=value)
    assert result.exit_code == 2
    assert (
        one_line(result)
        == f"error: HARNESS_DB_TIMEOUT must be a number of seconds (0 or more), got {value!r}"
    )


# --- creation races ---------------------------------------------------------------------------------------


def _create_in_step(barrier, folder: str, rounds: int, failures) -> None:
    for i in range(rounds):
        barrier.wait()
        try:
            ResultsStore(str(Path(folder) / f"fresh{i}.sqlite"))
        except HarnessError as e:
            failures.put(str(e))


@pytest.mark.slow
def test_processes_creating_one_database_at_once_all_succeed(tmp_path: Path) -> None:
    # before the fix about a third of these failed with "table runs already exists"
    ctx = multiprocessing.get_context("fork")
    barrier, failures, rounds = ctx.Barrier(3), ctx.Queue(), 12
    args = (barrier, str(tmp_path), rounds, failures)
    procs = [ctx.Process(target=_create_in_step, args=args) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert failures.empty(), failures.get()
    assert all(tables(tmp_path / f"fresh{i}.sqlite") >= {"runs", "harness_meta"} for i in range(rounds))


# --- a busy database --------------------------------------------------------------------------------------

HOLD = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("COMMIT")
"""


def hold_lock(db: Path, seconds: float) -> subprocess.Popen[bytes]:
    """Another process holding the database's write lock (and, in SQLite's default mode, its readers')."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"locked\n"
    return proc


def refused_while_locked(db: Path, run_id: str) -> tuple[ResultsStore, UnsavedRun]:
    """A store of one run at `db` whose save of run `run_id` another process's lock refuses (with
    HARNESS_DB_TIMEOUT short): the store, and its refusal."""
    store = filled(db, 1)
    holder = hold_lock(db, 120)
    try:
        with pytest.raises(UnsavedRun) as caught:
            save_run(store, make_result(run_id))
    finally:
        holder.kill()
        holder.wait()
    return store, caught.value


@pytest.mark.slow
def test_busy_database_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_DB_TIMEOUT", "60")
    store = filled(tmp_path / "r.sqlite", 1)
    holder = hold_lock(tmp_path / "r.sqlite", 3)
    began = time.monotonic()
    save_run(store, make_result("tiny-late"))
    assert time.monotonic() - began > 1.5  # it waited for the lock, then saved
    holder.wait()
    assert list(store.runs()["run_id"]) == ["tiny-0", "tiny-late"]


@pytest.mark.slow
def test_locked_database_keeps_the_run_in_a_file_for_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_DB_TIMEOUT", "1")
    db = tmp_path / "r.sqlite"
    store, refusal = refused_while_locked(db, "tiny-locked")
    file = tmp_path / "harness-unsaved-tiny-locked.json"
    assert refusal.path == file and file.is_file()
    assert str(refusal).startswith(
        f"run tiny-locked is not in the results database: results database {db} is locked by another "
        "process (waited 1 s; HARNESS_DB_TIMEOUT sets how long)"
    )
    assert f"`harness import {file}` stores it" in str(refusal)
    for expected in ("new", "already stored"):  # importing twice stores the run once
        result = invoke("import", str(file), "--db", str(db), "--format", "json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == [{"file": str(file), "run": "tiny-locked", "stored": expected}]
    assert list(store.runs()["run_id"]) == ["tiny-0", "tiny-locked"]
    steps = store.step_timings(["tiny-locked"])
    assert (
        len(steps) == 15
        and steps["duration_ns"].tolist() == store.step_timings(["tiny-0"])["duration_ns"].tolist()
    )


def test_import_refuses_what_is_not_an_unsaved_run(tmp_path: Path) -> None:
    db = str(tmp_path / "r.sqlite")
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    for path, message in (
        (other, f"{other} is not a harness unsaved-run file"),
        (tmp_path / "none.json", f"cannot read {tmp_path / 'none.json'}: No such file or directory"),
    ):
        result = invoke("import", str(path), "--db", db)
        assert result.exit_code == 1
        assert message in one_line(result)


@pytest.mark.slow
def test_run_that_cannot_be_saved_says_where_it_went(tmp_path: Path) -> None:
    """`harness run` (a real process) finds the database locked when it saves: the run goes to a file."""
    db = tmp_path / "l.db"
    filled(db, 1)
    args = ["run", "char", "--device", "cpu", "--steps", "50", "--warmup", "1", "-b", "1", "-t", "32"]
    proc = start([*args, "--db", str(db)], tmp_path, uuid.uuid4().hex, HARNESS_DB_TIMEOUT="1")

    def has_db_open() -> bool:  # the store is open (and checked) before the work starts
        fds = Path(f"/proc/{proc.pid}/fd")
        if not fds.exists():
            return True
        return str(db) in open_files(fds)

    wait_until(has_db_open, 120, "harness run to open the database")
    holder = hold_lock(db, 600)
    try:
        assert proc.wait(600) == 1, output(tmp_path)
    finally:
        proc.kill()
        holder.kill()
        holder.wait()
    text = output(tmp_path)
    assert "Traceback" not in text
    (file,) = tmp_path.glob("harness-unsaved-char-*.json")
    assert "is locked by another process (waited 1 s; HARNESS_DB_TIMEOUT sets how long)" in text
    assert f"It was written to {file}; `harness import {file}` stores it" in flat(text)
    assert "forward" in text  # the results were printed all the same
    assert invoke("import", str(file), "--db", str(db)).exit_code == 0
    listed = json.loads(invoke("runs", "--db", str(db), "--format", "json").stdout)
    assert [r["status"] for r in listed] == ["ok", "ok"] and listed[1]["forward_mean_ns"] > 0


def open_files(fds: Path) -> set[str]:
    """What a process's descriptors name; one closed while they are read is left out (it was there when
    the folder was listed, and gone when its link was read)."""
    names = set()
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            names.add(os.readlink(fd))
    return names


@pytest.mark.slow
def test_ctrl_c_in_a_reading_command_says_so_and_exits_130(tmp_path: Path) -> None:
    """`harness runs` (a real process) waits for a locked database; Ctrl-C there ended it with 130 and not a
    word. It says it was interrupted, in one line, and still exits 130. The process is known to be inside
    the command by the database it holds open; it stays there (the lock is held for 600 s) until the
    signal."""
    import signal

    db = tmp_path / "r.sqlite"
    filled(db, 1)
    holder = hold_lock(db, 600)
    proc = start(["runs", "--db", str(db)], tmp_path, uuid.uuid4().hex, HARNESS_DB_TIMEOUT="600")
    try:

        def waiting() -> bool:
            fds = Path(f"/proc/{proc.pid}/fd")
            return not fds.exists() or str(db) in open_files(fds)

        wait_until(waiting, 300, "harness runs to open the database")
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(300) == 130, output(tmp_path)
    finally:
        proc.kill()
        holder.kill()
        holder.wait()
    assert (
        tmp_path / "stderr.txt"
    ).read_text() == "error: interrupted by SIGINT before the command finished\n"
    assert (tmp_path / "stdout.txt").read_text() == ""


def test_a_signal_no_command_caught_is_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same in process: Ctrl-C (KeyboardInterrupt) while `harness runs` reads; SIGTERM as its code."""
    from harness.core.signals import Terminated

    db = tmp_path / "r.sqlite"
    filled(db, 1)
    for raised, code, name in ((KeyboardInterrupt, 130, "SIGINT"), (Terminated, 143, "SIGTERM")):

        def stopped(*args: object, exc: type[BaseException] = raised, **kwargs: object) -> None:
            raise exc

        monkeypatch.setattr(ResultsStore, "runs", stopped)
        result = invoke("runs", "--db", str(db))
        assert result.exit_code == code and "Traceback" not in result.output
        assert result.stderr == f"error: interrupted by {name} before the command finished\n"
