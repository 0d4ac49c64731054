"""An export whose write-ahead log holds changes and has no index beside it (`X-wal`, no `X-shm`) is read
from a private copy in the temporary folder (analysis.readers.sqlite_files): every command that reads it
removes that copy when it ends, whether it ends well, with an error or by Ctrl-C. Each `kernels`, `nvtx`,
`summary`, `timeline` and `-f json` left a whole copy of the export in /tmp/harness-export-*/."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from export_data import commit_without_checkpoint
from procs import default_sigint
from typer.testing import CliRunner

from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def logged(a100_export: Path, tmp_path: Path) -> Path:
    """The A100 export in WAL mode with its kernels doubled in the log, the log's index removed."""
    export = tmp_path / "exports" / "report.sqlite"
    export.parent.mkdir()
    shutil.copy(a100_export, export)
    with sqlite3.connect(export) as db:
        db.execute("PRAGMA journal_mode=wal")
    db.close()
    commit_without_checkpoint(export)
    export.with_name("report.sqlite-shm").unlink()
    return export


@pytest.fixture
def tmp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder of this process (tempfile's) and of the processes it starts (TMPDIR)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.parametrize(
    "args",
    [["kernels"], ["kernels", "-f", "json"], ["nvtx"], ["summary"], ["timeline", "--out", "{tmp}/t.json"]],
    ids=["kernels", "json", "nvtx", "summary", "timeline"],
)
def test_a_command_leaves_no_copy_of_the_export(
    logged: Path, tmp_folder: Path, cache_dir: Path, tmp_path: Path, args: list[str]
) -> None:
    command = [args[0], str(logged), *(a.format(tmp=tmp_path) for a in args[1:])]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    if args == ["kernels", "-f", "json"]:
        assert '"Instances":10' in result.stdout.replace(" ", "")  # read with its log: 5 kernels twice
    assert list(tmp_folder.iterdir()) == []


def test_a_command_that_fails_after_opening_leaves_no_copy(
    logged: Path, tmp_folder: Path, cache_dir: Path, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["timeline", str(logged), "--step", "7", "--out", str(tmp_path / "t.json")])
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert list(tmp_folder.iterdir()) == []


READ_THEN_WAIT = """
import sys
from analysis.trace.opening import open_trace
trace = open_trace(sys.argv[1], cache=False)
print(len(trace.frame("kernels", ["start"])), flush=True)  # the copy is read: 10 kernels
sys.stdin.readline()  # until the test has seen the copy
{end}
"""


@pytest.mark.parametrize("end", ["sigint", "error", "unclosed"])
def test_a_process_that_ends_without_closing_its_reader_leaves_no_copy(
    logged: Path, tmp_folder: Path, end: str
) -> None:
    """Ctrl-C while the export is open, an error, or a reader never closed: the copy goes when the process
    ends."""
    tail = {"sigint": "", "error": "raise RuntimeError('boom')", "unclosed": ""}[end]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_folder)}
    proc = subprocess.Popen(
        [sys.executable, "-c", READ_THEN_WAIT.format(end=tail), str(logged)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "10"
    assert [p.name.startswith("harness-export-") for p in tmp_folder.iterdir()] == [True]  # while it reads
    if end == "sigint":  # Ctrl-C while it waits
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate("\n", timeout=60)
    assert proc.returncode == {"sigint": -signal.SIGINT, "error": 1, "unclosed": 0}[end], err
    assert list(tmp_folder.iterdir()) == []
