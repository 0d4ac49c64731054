"""`harness import` of what is not a saved run's file, of a creation time in another zone, stopped by Ctrl-C;
`harness baseline tag` for scripts. Copies of the real harness-unsaved-char.json (a `harness run char` whose
save found the database locked)."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import ResultsStore

pytestmark = pytest.mark.attack(saves=True)
runner = CliRunner()
REAL = Path(__file__).parent / "data" / "harness-unsaved-char.json"
RUN_ID = "char-20261127-101937-51e2"


def copy(tmp_path: Path, name: str, **fields: Any) -> Path:
    """The real file under `name`, with the top-level `fields` set and the run id `run_id` where given."""
    data = json.loads(REAL.read_text())
    if "run_id" in fields:
        data["result"]["run_id"] = fields.pop("run_id")
    data.update(fields)
    out = tmp_path / name
    out.write_text(json.dumps(data))
    return out


def one_line(result: Any, exit_code: int) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == exit_code and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def created(db: Path) -> dict[str, str]:
    runs = ResultsStore(str(db), readonly=True).runs()
    return dict(zip(runs["run_id"], runs["created_at"], strict=True))


def test_a_creation_time_of_another_zone_is_stored_as_that_instant_and_imported_once(tmp_path: Path) -> None:
    """10:20:24+05:00 was stored as 10:20:24 UTC (the offset dropped: five hours off), and the same file
    imported again was refused as another copy of the run, its creation time differing."""
    db = tmp_path / "r.sqlite"
    path = copy(tmp_path, "e.json", created_at="2026-11-27T10:20:24+05:00")
    first = runner.invoke(app, ["import", str(path), "--db", str(db), "-f", "json"])
    assert first.exit_code == 0 and json.loads(first.stdout)[0]["stored"] == "new", first.output
    assert created(db) == {RUN_ID: "2026-11-27T05:20:24+00:00"}
    again = runner.invoke(app, ["import", str(path), "--db", str(db), "-f", "json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)[0]["stored"] == "already stored"


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00"])
def test_a_creation_time_past_the_years_a_date_holds_in_utc_is_refused(tmp_path: Path, when: str) -> None:
    """The first was stored (its offset dropped), and importing it again ended in an OverflowError traceback
    as the two creation times were compared in UTC."""
    db = tmp_path / "r.sqlite"
    path = copy(tmp_path, "e.json", created_at=when)
    for _ in range(2):
        line = one_line(runner.invoke(app, ["import", str(path), "--db", str(db)]), 1)
        assert f"created_at is {when!r}, outside the years 1 to 9999 in UTC" in line, line
    assert not db.exists()


def test_a_device_is_refused_at_once(tmp_path: Path) -> None:
    """`import /dev/zero` read without end, until a MemoryError traceback once the machine's memory ran out;
    a device is refused before it is read (/dev/null here, which ends, so that this test cannot eat the
    machine's memory where the check is missing)."""
    line = one_line(runner.invoke(app, ["import", "/dev/null", "--db", str(tmp_path / "r.sqlite")]), 1)
    assert line == "error: /dev/null is a device, not a file: give the harness-unsaved-RUN.json file"


def test_a_socket_is_refused(tmp_path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    path = tmp_path / "s.sock"
    sock.bind(str(path))
    try:
        line = one_line(runner.invoke(app, ["import", str(path), "--db", str(tmp_path / "r.sqlite")]), 1)
    finally:
        sock.close()
    assert line == f"error: {path} is a socket, not a file: give the harness-unsaved-RUN.json file"


def test_a_pipe_is_read_once(tmp_path: Path) -> None:
    """`harness import <(ssh host cat F)`: the saved run from a pipe is stored."""
    read, write = os.pipe()
    data = REAL.read_bytes()
    assert len(data) < 65536  # the pipe holds it whole: written before it is read
    os.write(write, data)
    os.close(write)
    try:
        db = tmp_path / "r.sqlite"
        result = runner.invoke(app, ["import", f"/dev/fd/{read}", "--db", str(db), "-f", "csv"])
    finally:
        os.close(read)
    assert result.exit_code == 0 and f"{RUN_ID},new" in result.stdout, result.output
    assert list(created(db)) == [RUN_ID]


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_as_a_run_is_written_stores_none_of_it_and_says_what_went_in(tmp_path: Path) -> None:
    """Ctrl-C as the second file's steps were written: the first is stored, nothing of the second (its
    transaction rolled back), every file kept. It said `interrupted by SIGINT before the command finished`
    alone, not which files went in."""
    first, second, third = (copy(tmp_path, f"{n}.json", run_id=f"char-{n}") for n in ("a", "b", "c"))
    db = tmp_path / "r.sqlite"
    sent = []

    def interrupt(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        # the second run's steps, after its row (in the same transaction)
        if not sent and statement.startswith("INSERT INTO step_timings") and "char-b" in repr(parameters):
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)

    event.listen(Engine, "before_cursor_execute", interrupt)
    try:
        result = runner.invoke(app, ["import", str(first), str(second), str(third), "--db", str(db)])
    finally:
        event.remove(Engine, "before_cursor_execute", interrupt)
    assert sent
    line = one_line(result, 130)
    assert line.startswith(f"error: interrupted by SIGINT while importing {second}: its run is stored whole")
    assert line.endswith(f"; imported before it: {first} (new: run char-a); not tried after it: {third}")
    assert list(created(db)) == ["char-a"]
    store = ResultsStore(str(db), readonly=True)
    assert set(store.step_timings()["run_id"]) == {"char-a"}
    assert all(p.is_file() for p in (first, second, third))
    again = runner.invoke(app, ["import", str(first), str(second), "--db", str(db), "-f", "csv"])
    assert again.exit_code == 0 and "char-a,already stored" in again.stdout and "char-b,new" in again.stdout


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_baseline_tag_for_scripts(tmp_path: Path, fmt: str) -> None:
    """`baseline tag` printed `baseline:NAME = RUN (was OLD)` whatever the script asked for (no --format)."""
    db = tmp_path / "r.sqlite"
    a, b = copy(tmp_path, "a.json", run_id="char-a"), copy(tmp_path, "b.json", run_id="char-b")
    assert runner.invoke(app, ["import", str(a), str(b), "--db", str(db)]).exit_code == 0
    tag = ["baseline", "tag", "main", "--db", str(db), "--format", fmt]
    first, moved = runner.invoke(app, [*tag, "char-a"]), runner.invoke(app, [*tag, "char-b"])
    assert first.exit_code == moved.exit_code == 0, first.output + moved.output
    if fmt == "json":
        rows = [json.loads(first.stdout), json.loads(moved.stdout)]
        assert rows == [
            [{"name": "main", "run_id": "char-a", "was": None, "status": "ok"}],
            [{"name": "main", "run_id": "char-b", "was": "char-a", "status": "ok"}],
        ]
    else:
        assert first.stdout == "name,run_id,was,status\nmain,char-a,,ok\n"
        assert moved.stdout == "name,run_id,was,status\nmain,char-b,char-a,ok\n"
    table = runner.invoke(app, ["baseline", "tag", "main", "char-a", "--db", str(db)])
    assert table.stdout == "baseline:main = char-a (was char-b)\n"
