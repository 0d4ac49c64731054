"""Files and folders this user may not read or search, given to every command that takes a path: one line
naming what cannot be read, exit 1, never click's usage block nor a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_store_faults import filled

pytestmark = pytest.mark.attack

HARNESS = [sys.executable, "-m", "harness"]
# root reads whatever the mode says: without these capabilities it obeys the mode as any user does
NO_OVERRIDE = "-dac_override,-dac_read_search"


def _as_a_user(tmp: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The harness run with the permissions a user other than root has (for root: without the
    capabilities that let it read whatever the mode says)."""
    env = {
        **os.environ,
        "COLUMNS": "300",
        "HARNESS_DB": str(tmp / "results.sqlite"),
        "HARNESS_CACHE_DIR": str(tmp / "cache"),
    }
    command = [*HARNESS, *map(str, args)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root, and no setpriv to run without the capability to read any file")
        command = [setpriv, f"--inh-caps={NO_OVERRIDE}", f"--bounding-set={NO_OVERRIDE}", *command]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if "setpriv:" in done.stderr:
        pytest.skip(f"capabilities cannot be dropped here: {done.stderr.strip()}")
    return done


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Path]:
    """A folder of mode 000 holding an export-named file: neither listed nor searched."""
    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "report.sqlite").write_bytes(b"SQLite format 3\x00")
    folder.chmod(0)
    yield folder
    folder.chmod(0o755)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [["kernels"], ["nvtx"], ["summary"], ["breakdown"], ["ranks"], ["import"], ["timeline", "-o", "OUT"],
     ["dashboard", "-o", "OUT"]],
    ids=lambda c: c[0],
)  # fmt: skip
def test_an_export_this_user_may_not_read_is_said_in_one_line(tmp_path: Path, command: list[str]) -> None:
    """Said as a file that cannot be read (exit 1), as a missing one is; not as click's usage error of four
    lines and exit 2 (`Invalid value for 'REPORT': Path … is not readable`)."""
    export = tmp_path / "report.sqlite"
    export.write_bytes(b"SQLite format 3\x00")
    export.chmod(0)
    name, *rest = command
    line = _one_line(
        _as_a_user(tmp_path, name, export, *[str(tmp_path / "out") if a == "OUT" else a for a in rest])
    )
    assert line == f"error: cannot read {export}: Permission denied"
    assert export.stat().st_size == 16  # nothing written into it


@pytest.mark.parametrize(
    "command", [["nvtx"], ["breakdown"], ["ranks"], ["cache", "--clear", "--report"]], ids=lambda c: c[0]
)
def test_a_folder_this_user_may_not_list_is_said_in_one_line(
    tmp_path: Path, locked: Path, command: list[str]
) -> None:
    """Its exports are looked for in it: the line says it cannot be listed."""
    line = _one_line(_as_a_user(tmp_path, *command, locked))
    assert line == f"error: cannot read the folder {locked}: Permission denied"


@pytest.mark.parametrize(
    "command",
    [["kernels", "EXPORT"], ["nvtx", "EXPORT"], ["health", "EXPORT"], ["diff", "EXPORT", "EXPORT2"],
     ["timeline", "EXPORT", "-o", "OUT"], ["cache", "--clear", "--report", "EXPORT"], ["runs", "--db", "DB"],
     ["run", "tiny", "--device", "cpu", "--db", "DB"]],
    ids=lambda c: c[0],
)  # fmt: skip
def test_a_path_in_a_folder_this_user_may_not_search_names_that_folder(
    tmp_path: Path, locked: Path, command: list[str]
) -> None:
    """Looking at the path at all (is_file, exists) is refused, wherever a command first looks: the line
    names the folder that cannot be searched; a run starts nothing, and nothing is written."""
    other = tmp_path / "other.sqlite"
    other.write_bytes(b"SQLite format 3\x00")
    names = {
        "EXPORT": locked / "report.sqlite",
        "EXPORT2": other,
        "DB": locked / "results.sqlite",
        "OUT": tmp_path / "out.json",
    }
    line = _one_line(_as_a_user(tmp_path, *[names.get(a, a) for a in command]))
    assert line.startswith("error: cannot reach ") and line.endswith(
        f"this user may not search the folder {locked} (no x permission)"
    ), line
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "results.sqlite").exists()


@pytest.mark.parametrize("command", ["kernels", "health", "timeline"])
def test_a_report_this_user_may_not_read_is_said_so_before_nsys_export(tmp_path: Path, command: str) -> None:
    """A .nsys-rep is exported first: nsys's words for one it may not read name a boost error
    (`[boost::errinfo_file_name_*] = …`); the line says the report cannot be read, whatever nsys is there."""
    report = tmp_path / "report.nsys-rep"
    report.write_bytes(b"not read")
    report.chmod(0)
    out = ["-o", str(tmp_path / "out.json")] if command == "timeline" else []
    line = _one_line(_as_a_user(tmp_path, command, report, *out))
    assert line == f"error: cannot read {report}: Permission denied"
    assert not report.with_suffix(".sqlite").exists()  # no export made beside it


FOLDER = (
    "this user may not write its folder {folder} (SQLite keeps a journal beside the database as it writes); "
    "pass --db a writable location"
)
UNWRITABLE = {
    "a database in it": "cannot be written: " + FOLDER,
    "a new database in it": "is not there and cannot be created: " + FOLDER,
    "a read-only database": "is read-only (attempt to write a readonly database); pass --db a writable one",
}


@pytest.mark.parametrize("command", ["run", "import"])
@pytest.mark.parametrize("where", list(UNWRITABLE))
def test_a_database_this_user_may_not_write_is_refused_before_the_run(
    tmp_path: Path, command: str, where: str
) -> None:
    """SQLite creates the file, and the journal of every write, in the database's folder: a database in a
    folder this user may not write took no run, and `run` learnt so only after the run (its record then
    went to a file). Said before any work, with the folder named (a file of mode 0444: as read-only);
    nothing written anywhere."""
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "runs.sqlite"
    if where != "a new database in it":
        filled(db, 1)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    locked = db if where == "a read-only database" else folder
    locked.chmod(0o444 if locked == db else 0o555)
    try:
        args = (
            ["run", "char", "--device", "cpu", "--steps", "1", "--warmup", "0"]
            if command == "run"
            else ["import", str(Path(__file__).parent / "data" / "harness-unsaved-char.json")]
        )
        done = _as_a_user(tmp_path, *args, "--db", db)
    finally:
        locked.chmod(0o644 if locked == db else 0o755)
    line = _one_line(done)  # no progress line: the run never started
    assert line == f"error: results database {db} " + UNWRITABLE[where].format(folder=folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"]  # no unsaved-run file either
