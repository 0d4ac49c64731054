"""Inputs that could hang or mislead: a named pipe as input, an export another process
holds locked, a WAL export in a read-only folder, a JSON trace with a byte-order mark, folders holding
files the folder reading passed over or could not read. Each gives the right table, or one clear line."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from export_data import commit_without_checkpoint, distinct_copy
from kineto_data import trace_path
from typer.testing import CliRunner

from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()
HARNESS = [sys.executable, "-m", "harness"]


class Feeder:
    """Writes `data` into the named pipe `fifo` whenever a reader opens it, until stopped: a command that
    opens the pipe a second time gets it again after `release_s` (so that code which hangs there fails
    the test instead of hanging it)."""

    def __init__(self, fifo: Path, data: bytes, release_s: float = 8.0) -> None:
        self.fifo, self.data, self.release_s = fifo, data, release_s
        self.opened = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet
                time.sleep(0.01)
                continue
            if self.opened and time.monotonic() - last < self.release_s:
                os.close(fd)  # a second open: let it wait a while, then give it an empty pipe
                time.sleep(0.01)
                continue
            self.opened += 1
            last = time.monotonic()
            try:
                os.set_blocking(fd, True)
                os.write(fd, self.data if self.opened == 1 else b"")
            except OSError:
                pass
            finally:
                os.close(fd)

    def __enter__(self) -> Feeder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "trace.json"
    os.mkfifo(path)
    yield path


@pytest.mark.parametrize(
    "args", [["kernels"], ["timeline", "-o", "OUT"], ["breakdown"], ["diff", "SAME"]], ids=str
)
def test_a_named_pipe_is_refused_not_waited_on(fifo: Path, tmp_path: Path, args: list[str]) -> None:
    """The first look at the input (is it JSON?) used the pipe up; the next open waited for a writer for
    ever."""
    data = gzip.decompress(trace_path("alexnet").read_bytes())
    given = [str(fifo) if a == "SAME" else str(tmp_path / "out.json") if a == "OUT" else a for a in args]
    with Feeder(fifo, data):
        result = runner.invoke(app, [given[0], str(fifo), *given[1:]])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert f"error: {fifo} is a named pipe, not a file" in text and "save it to a file first" in text
    assert not (tmp_path / "out.json").exists()


def test_a_device_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["kernels", "/dev/zero"])
    assert result.exit_code == 1 and "error: /dev/zero is a device, not a file" in " ".join(
        result.output.split()
    )


def test_an_export_locked_by_a_writer_says_locked_not_corrupt(a100_export: Path, tmp_path: Path) -> None:
    """`nsys export` holds its export with an exclusive lock while it writes: "corrupt or truncated … export
    it again" was wrong and sent the user to redo good work."""
    export = tmp_path / "report.sqlite"
    shutil.copy(a100_export, export)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time\n"
         "db = sqlite3.connect(sys.argv[1], isolation_level=None); db.execute('BEGIN EXCLUSIVE')\n"
         "print('held', flush=True); sys.stdin.read()", str(export)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = runner.invoke(app, ["kernels", str(export), "--no-cache"])
    finally:
        holder.communicate("")
    text = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"error: {export} is locked by another program that is writing it" in text
    assert "corrupt" not in text


def _wal_export(a100_export: Path, folder: Path, *, committed: bool) -> Path:
    """A copy of the A100 export in WAL mode, with (committed) its kernels doubled in the log by a process
    that died before a checkpoint, its index removed."""
    folder.mkdir()
    export = folder / "report.sqlite"
    shutil.copy(a100_export, export)
    with sqlite3.connect(export) as db:
        db.execute("PRAGMA journal_mode=wal")
    db.close()
    if committed:
        commit_without_checkpoint(export)
        (folder / "report.sqlite-shm").unlink()
    return export


def _read_only(folder: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    """`command` run with `folder` read-only: its mode 0555 for a user other than root; for root (who may
    write anyway) a read-only bind mount in a mount namespace of the command's own."""
    env = {**os.environ, "COLUMNS": "300"}
    folder.chmod(0o555)
    try:
        if os.geteuid() != 0:
            return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        script = (
            'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99; shift; '
            'touch "$0/probe" 2>/dev/null && exit 98; exec "$@"'
        )
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", script, str(folder), str(folder), *command],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        if done.returncode in (98, 99) or "unshare:" in done.stderr:
            pytest.skip(
                f"a read-only folder cannot be had here (root, and no mount namespace: {done.stderr})"
            )
        return done
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("committed", [False, True], ids=["no-changes-in-log", "changes-in-log"])
def test_a_wal_export_in_a_read_only_folder_is_read(
    a100_export: Path, tmp_path: Path, committed: bool
) -> None:
    """A WAL export on a read-only mount was "corrupt or truncated": SQLite could not make the `-shm` and
    `-wal` it wanted beside it. It is read as it is, the log's changes with it."""
    export = _wal_export(a100_export, tmp_path / "ro", committed=committed)
    before = sorted(p.name for p in export.parent.iterdir())
    done = _read_only(export.parent, [*HARNESS, "kernels", str(export), "-f", "csv", "--no-cache"])
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(io.StringIO(done.stdout))
    assert table["Instances"].sum() == (10 if committed else 5)
    assert sorted(p.name for p in export.parent.iterdir()) == before


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("name", ["bom.json", "bom.json.gz", "bom.txt"])
def test_a_json_trace_with_a_byte_order_mark_is_read(tmp_path: Path, name: str) -> None:
    """ "not valid JSON (Expecting value at byte 0)", and no word of the mark."""
    text = BOM + gzip.decompress(trace_path("alexnet").read_bytes())
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    plain = runner.invoke(app, ["kernels", str(trace_path("alexnet")), "-f", "csv", "--no-cache"])
    result = runner.invoke(app, ["kernels", str(path), "-f", "csv", "--no-cache"])
    assert result.exit_code == 0, result.output
    assert result.stdout == plain.stdout


def _folder(a100_export: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "runs"
    (folder / "nested.sqlite").mkdir(parents=True)
    distinct_copy(a100_export, folder / "a.sqlite")
    distinct_copy(a100_export, folder / "B.SQLITE")
    shutil.copy(a100_export, folder / "c.sqlite3")
    os.mkfifo(folder / "piped.json")
    (folder / "README.md").write_text("not an export, and not named like one: not mentioned")
    return folder


def test_a_folder_says_what_it_skipped(a100_export: Path, tmp_path: Path) -> None:
    """`harness kernels DIR` passed over `.SQLITE`, `.sqlite3` and a folder named `*.sqlite` without a
    word. An upper-case suffix is an export's name; the others are named in a note."""
    folder = _folder(a100_export, tmp_path)
    result = runner.invoke(app, ["kernels", str(folder), "-f", "csv"])
    assert result.exit_code == 0, result.output
    assert pd.read_csv(io.StringIO(result.stdout))["Instances"].sum() == 10  # a.sqlite and B.SQLITE
    note = " ".join(result.stderr.split())
    assert f"note: skipped in the folder {folder}: c.sqlite3 (not an export's name: .sqlite," in note
    assert "nested.sqlite (a folder, not a file)" in note and "piped.json (a named pipe, not a file)" in note
    assert "README" not in note


def test_a_folder_with_an_unreadable_export_says_which_were_read_and_which_refused(
    a100_export: Path, tmp_path: Path
) -> None:
    """One unreadable file among several: the error named only that file."""
    folder = _folder(a100_export, tmp_path)
    (folder / "broken.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 10)
    (folder / "empty.json").write_text("")
    result = runner.invoke(app, ["kernels", str(folder)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "error: 2 of 4 exports could not be read, so no table was made:" in text
    assert f"{folder / 'broken.sqlite'} is truncated" in text and f"{folder / 'empty.json'} is empty" in text
    assert f"Read: {folder / 'B.SQLITE'}, {folder / 'a.sqlite'}." in text  # natural order, as ranks are
    assert "skipped in the folder" in text and "c.sqlite3" in text


# --- the second round: the same families on other inputs and paths ---------------------------------------


def test_an_export_left_half_written_is_read_as_sqlite_rolls_it_back(
    a100_export: Path, tmp_path: Path
) -> None:
    """A writer that stopped mid-transaction leaves a hot journal: `mode=ro` cannot roll it back ("attempt to
    write a readonly database", shown as "cannot read"), and the file alone is half-changed. It is read
    from a private copy of both, as SQLite rolls it back; the user's files stay as they are."""
    folder = tmp_path / "hot"
    folder.mkdir()
    export = folder / "report.sqlite"
    shutil.copy(a100_export, export)
    code = (
        "import os, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None); db.execute('PRAGMA cache_size=2')\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "for t in ('CUPTI_ACTIVITY_KIND_KERNEL', 'CUPTI_ACTIVITY_KIND_RUNTIME', 'StringIds'):\n"
        "    db.execute(f'DELETE FROM {t}')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(export)], check=True)
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sorted(files) == ["report.sqlite", "report.sqlite-journal"]
    for _ in range(2):  # never from the cache: the journal is part of what the file holds
        result = runner.invoke(app, ["kernels", str(export), "-f", "csv"])
        assert result.exit_code == 0, result.output
        assert pd.read_csv(io.StringIO(result.stdout))["Instances"].sum() == 5
        assert "has a rollback journal beside it (report.sqlite-journal" in " ".join(result.stderr.split())
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files


def test_a_named_pipe_among_several_exports_is_named_with_the_ones_read(
    a100_export: Path, fifo: Path, tmp_path: Path
) -> None:
    with Feeder(fifo, b"{}"):
        result = runner.invoke(app, ["kernels", str(a100_export), str(fifo)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert f"error: 1 of 2 exports could not be read, so no table was made: {fifo} is a named pipe" in text
    assert f"Read: {a100_export}." in text


def test_a_glob_says_what_it_matched_and_skipped(a100_export: Path, tmp_path: Path) -> None:
    shutil.copy(a100_export, tmp_path / "a.sqlite")
    os.mkfifo(tmp_path / "b.sqlite")
    (tmp_path / "c.sqlite").mkdir()
    result = runner.invoke(app, ["kernels", str(tmp_path / "*.sqlite"), "-f", "csv"])
    assert result.exit_code == 0, result.output
    note = " ".join(result.stderr.split())
    assert f"skipped of what {tmp_path / '*.sqlite'} matches: {tmp_path / 'b.sqlite'} (a named pipe" in note
    assert f"{tmp_path / 'c.sqlite'} (a folder, not a file)" in note


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_trace_in_utf16_or_utf32_says_so(tmp_path: Path, encoding: str) -> None:
    text = gzip.decompress(trace_path("alexnet").read_bytes()).decode()
    for name in ("t.json", "t.txt"):  # named like a trace or not
        path = tmp_path / name
        path.write_bytes(text.encode(encoding))
        result = runner.invoke(app, ["kernels", str(path)])
        assert result.exit_code == 1 and "Traceback" not in result.output
        said = " ".join(result.output.split())
        assert f"error: {path} is {encoding.upper()} text (it starts with its byte-order mark)" in said


def test_a_named_pipe_named_like_a_report_is_refused_as_a_pipe(tmp_path: Path) -> None:
    """A pipe named `.nsys-rep` was "no such report": it is there, and it is a pipe."""
    pipe = tmp_path / "run.nsys-rep"
    os.mkfifo(pipe)
    result = runner.invoke(app, ["kernels", str(pipe)])
    assert result.exit_code == 1
    assert f"error: {pipe} is a named pipe, not a file" in " ".join(result.output.split())


def test_a_compressed_export_or_trace_says_how_it_is_packed(a100_export: Path, tmp_path: Path) -> None:
    """A gzipped export was called `not valid JSON (not UTF-8 at byte N)`, a trace kept as bzip2, xz or
    zstd `not an SQLite file`, a zip archive either: each now says what the file is and what to pass."""
    import bz2
    import lzma
    import zipfile

    text = gzip.decompress(trace_path("alexnet").read_bytes())
    packed = {
        "report.sqlite.gz": (gzip.compress(a100_export.read_bytes()), "is a gzipped SQLite export: an"),
        "t.json.bz2": (bz2.compress(text), "is compressed with bzip2, which is not read: decompress it"),
        "t.json.xz": (lzma.compress(text), "is compressed with xz, which is not read: decompress it"),
        "t.json.zst": (b"\x28\xb5\x2f\xfd" + bytes(16), "is compressed with zstd, which is not read"),
    }
    for name, (content, _) in packed.items():
        (tmp_path / name).write_bytes(content)
    with zipfile.ZipFile(tmp_path / "traces.zip", "w") as archive:
        archive.writestr("t.json", text)
    packed["traces.zip"] = (b"", "is a zip archive: extract the export or trace in it and pass that")
    for name, (_, said) in packed.items():
        path = tmp_path / name
        for command in (["kernels", str(path)], ["health", str(path)]):
            result = runner.invoke(app, command)
            assert result.exit_code == 1 and "Traceback" not in result.output, result.output
            assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
            assert result.stderr.startswith(f"error: {path} {said}"), result.stderr
