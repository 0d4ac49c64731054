"""Files the commands write: never over a file the command reads, whatever it is called (the
same path, another spelling, a symbolic or hard link, SQLite's journal beside an export); `-`, a device or
a named pipe written as a stream, never replaced by a renamed file. And one name for the option that says
where: `--out`/`-o` on every command whose output is a file, `--output` kept hidden."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from test_store import make_result
from typer.testing import CliRunner

from harness.cli import app
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

pytestmark = pytest.mark.attack
runner = CliRunner()
READS = "is a file this command reads"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_error(result, needle: str) -> str:  # type: ignore[no-untyped-def]
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    joined = " ".join(line.strip() for line in lines)
    assert joined.startswith("error: ") and joined.count("error: ") == 1 and needle in joined, result.output
    return joined


@pytest.fixture
def export(a100_export: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "x.sqlite"
    shutil.copyfile(a100_export, copy)
    return copy


def spellings(export: Path) -> dict[str, Path]:
    """The export under other names: itself, `../dir/x`, a symbolic link, a hard link."""
    link = export.with_name("link.sqlite")
    link.symlink_to(export.name)
    hard = export.with_name("hard.sqlite")
    os.link(export, hard)
    return {
        "same": export,
        "dotdot": export.parent / ".." / export.parent.name / export.name,
        "symlink": link,
        "hardlink": hard,
    }


COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "timeline": lambda src, out: ["timeline", str(src), "-o", str(out)],
    "dashboard": lambda src, out: ["dashboard", str(src), "-o", str(out)],
    "diff --html": lambda src, out: ["diff", str(src), str(src), "--html", str(out)],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("name", ["same", "dotdot", "symlink", "hardlink"])
def test_an_output_over_the_input_is_refused(export: Path, command: str, name: str) -> None:
    before = digest(export)
    target = spellings(export)[name]
    result = runner.invoke(app, COMMANDS[command](export, target))
    one_error(result, READS)
    assert digest(export) == before and export.with_name("link.sqlite").is_symlink()


def test_a_kineto_trace_is_not_cut_down_by_its_own_timeline(tmp_path: Path) -> None:
    from kineto_data import write_trace
    from test_kineto_faults import KERNEL

    trace = write_trace(tmp_path / "t.json", [KERNEL, {**KERNEL, "ts": 2000}])
    before = digest(trace)
    one_error(runner.invoke(app, ["timeline", str(trace), "-o", str(trace)]), READS)
    assert digest(trace) == before


def test_the_journal_beside_an_export_is_refused(export: Path) -> None:
    """Written there, it would be read by SQLite as the export's own journal the next time it opens."""
    for suffix in ("-wal", "-journal", "-shm"):
        target = export.with_name(export.name + suffix)
        one_error(runner.invoke(app, ["timeline", str(export), "-o", str(target)]), "journal")
        assert not target.exists()


def test_a_csv_folder_holding_a_link_to_the_input_is_refused(export: Path, tmp_path: Path) -> None:
    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / "01-headline-b-against-a.csv").symlink_to(export)
    before = digest(export)
    result = runner.invoke(app, ["diff", str(export), str(export), "-f", "csv", "--out", str(folder)])
    one_error(result, READS)
    assert digest(export) == before


@pytest.mark.attack(saves=True)
def test_a_dashboard_over_its_results_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "results.sqlite"
    save_run(ResultsStore(str(db)), make_result("tiny-1"))
    result = runner.invoke(app, ["dashboard", "--db", str(db), "-o", str(db)])
    one_error(result, READS)
    assert list(ResultsStore(str(db), readonly=True).runs()["run_id"]) == ["tiny-1"]


def test_a_named_pipe_is_written_as_a_stream(export: Path, tmp_path: Path) -> None:
    """The pipe's reader gets the whole trace, and the pipe stays a pipe."""
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    received = tmp_path / "received.json"
    with received.open("wb") as sink:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
        try:
            result = runner.invoke(app, ["timeline", str(export), "-o", str(fifo)])
            assert result.exit_code == 0, result.output
            reader.wait(timeout=30)
        finally:
            reader.kill()
            reader.wait()
    assert fifo.is_fifo()
    events = json.loads(received.read_text())["traceEvents"]
    assert sum(e.get("cat") == "kernel" for e in events) == 5


@pytest.mark.parametrize("command", ["timeline", "dashboard"])
def test_a_device_is_written_as_a_stream_never_replaced(export: Path, tmp_path: Path, command: str) -> None:
    """`-o` naming a character device (here through a link to /dev/null) writes into it: the link and
    the device stay what they were."""
    null = tmp_path / "null"
    null.symlink_to(os.devnull)
    result = runner.invoke(app, COMMANDS[command](export, null))
    assert result.exit_code == 0, result.output
    assert null.is_symlink() and null.is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "x.sqlite"]


def test_a_device_made_for_the_test_stays_a_device(export: Path, tmp_path: Path) -> None:
    node = tmp_path / "mynull"
    try:
        os.mknod(node, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, as /dev/null
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD); the link to /dev/null above covers devices")
    result = runner.invoke(app, ["timeline", str(export), "-o", str(node)])
    assert result.exit_code == 0, result.output
    assert node.is_char_device()


@pytest.mark.parametrize("command", ["timeline", "dashboard"])
def test_dash_is_standard_output(
    export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, COMMANDS[command](export, Path("-")))
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "-").exists()
    if command == "timeline":
        events = json.loads(result.stdout)["traceEvents"]
        assert sum(e.get("cat") == "kernel" for e in events) == 5
        assert "wrote standard output" in result.stderr
    else:
        assert result.stdout.startswith("<!DOCTYPE html>") and result.stdout.rstrip().endswith("</html>")
        assert "wrote standard output" in result.stderr  # the summary goes with the notes


def test_a_folder_as_the_output_is_refused(export: Path, tmp_path: Path) -> None:
    one_error(runner.invoke(app, ["timeline", str(export), "-o", str(tmp_path)]), "is a folder")


@pytest.mark.parametrize("command", [*COMMANDS, "roofline --html"])
@pytest.mark.parametrize("there", [False, True], ids=["new", "there"])
def test_an_output_ending_in_a_slash_is_refused(
    export: Path, tmp_path: Path, command: str, there: bool
) -> None:
    """`-o newdir/` wrote a regular file named `newdir` (the slash was lost when the option became a Path):
    a name ending in a slash names a folder, there or not, and is refused in one line; nothing is written."""
    folder = tmp_path / "newdir"
    if there:
        folder.mkdir()
    args = (
        ["roofline", "tiny", "--html", "-"]
        if command == "roofline --html"
        else COMMANDS[command](export, folder)
    )
    args[-1] = f"{folder}/"
    option = "--out" if args[-2] == "-o" else args[-2]
    said = one_error(runner.invoke(app, args), "ends in a slash")
    expected = (
        f"{option} {folder}/ ends in a slash, naming a folder: give a file name (in it, e.g. {folder}/out)"
    )
    assert said == f"error: {expected}"
    assert folder.is_dir() == there and (not there or not any(folder.iterdir()))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["x.sqlite", *(["newdir"] if there else [])])


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_existing_folder_as_the_output_is_refused(export: Path, tmp_path: Path, command: str) -> None:
    folder = tmp_path / "pages"
    folder.mkdir()
    one_error(runner.invoke(app, COMMANDS[command](export, folder)), "is a folder")
    assert folder.is_dir() and not any(folder.iterdir())


def test_a_written_file_named_with_a_slash_is_refused_by_the_library(tmp_path: Path) -> None:
    from analysis.outputs import OutputRefused, write_text

    with pytest.raises(OutputRefused, match="ends in a slash, naming a folder"):
        write_text(f"{tmp_path}/newdir/", "x")
    assert list(tmp_path.iterdir()) == []


def test_a_regular_file_is_still_replaced_whole(export: Path, tmp_path: Path) -> None:
    """The rename stays for files: the old trace is replaced, its mode kept, no temporary file left."""
    out = tmp_path / "t.json"
    out.write_text("old")
    out.chmod(0o600)
    assert runner.invoke(app, ["timeline", str(export), "-o", str(out)]).exit_code == 0
    assert json.loads(out.read_text())["traceEvents"] and out.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "x.sqlite"]


def test_a_link_to_a_file_keeps_being_a_link(export: Path, tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(real.name)
    assert runner.invoke(app, ["timeline", str(export), "-o", str(link)]).exit_code == 0
    assert link.is_symlink() and json.loads(real.read_text())["traceEvents"]


# --- one name for one meaning -------------------------------------------------------------------------


def test_every_file_output_is_named_out(export: Path, tmp_path: Path) -> None:
    for args, target in (
        (["timeline", str(export), "--out"], tmp_path / "a.json"),
        (["timeline", str(export), "-o"], tmp_path / "b.json"),
        (["timeline", str(export), "--output"], tmp_path / "c.json"),  # the old name, hidden
        (["dashboard", str(export), "--output"], tmp_path / "d.html"),
        (["diff", str(export), str(export), "-f", "csv", "-o"], tmp_path / "e"),
        (["diff", str(export), str(export), "-f", "csv", "--output"], tmp_path / "f"),
    ):
        result = runner.invoke(app, [*args, str(target)])
        assert result.exit_code == 0, (args, result.output)
        assert target.exists()
    for command in ("timeline", "dashboard", "diff"):
        help_text = runner.invoke(app, [command, "-h"], env={"COLUMNS": "200"}).output
        assert "--out" in help_text and "--output" not in help_text, help_text


def test_timeline_without_an_output_says_which_option(export: Path) -> None:
    result = runner.invoke(app, ["timeline", str(export)])
    one_error(result, "--out FILE")


# --- second round: the other commands that write, the other ways a file is read ---------------------------


@pytest.fixture
def two_runs(export: Path, tmp_path: Path) -> Path:
    """A results database of two nsys runs whose exports are copies of the A100 export."""
    db = tmp_path / "r.sqlite"
    store = ResultsStore(str(db))
    for run_id, fwd in (("tiny-a", 1_000_000), ("tiny-b", 2_000_000)):
        copy = tmp_path / f"{run_id}.sqlite"
        shutil.copyfile(export, copy)
        save_run(store, make_result(run_id, fwd=fwd), profiler="nsys", nsys_sqlite=str(copy))
    return db


@pytest.mark.attack(saves=True)
@pytest.mark.parametrize(
    "args",
    [
        ["diff", "tiny-a", "tiny-b", "--html", "tiny-a.sqlite"],
        ["diff", "tiny-a", "tiny-b", "--html", "r.sqlite"],
        ["dashboard", "-o", "tiny-b.sqlite"],
        ["roofline", "tiny-a", "--html", "r.sqlite"],
        ["ranks", "tiny-a", "--html", "r.sqlite"],
    ],
    ids=["diff-run-export", "diff-db", "dashboard-run-export", "roofline-db", "ranks-db"],
)
def test_what_a_run_reads_is_refused_too(
    two_runs: Path, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = two_runs.parent
    monkeypatch.chdir(folder)
    before = {p.name: digest(p) for p in folder.glob("*.sqlite")}
    one_error(runner.invoke(app, [*args, "--db", str(two_runs)]), READS)
    assert {p.name: digest(p) for p in folder.glob("*.sqlite")} == before
    assert list(ResultsStore(str(two_runs), readonly=True).runs()["run_id"]) == ["tiny-a", "tiny-b"]


def test_ranks_page_over_a_rank_export_is_refused(a100_export: Path, tmp_path: Path) -> None:
    from export_data import distinct_copy, with_harness_ranges

    ranks = [with_harness_ranges(a100_export, tmp_path / f"job.rank{r}.sqlite") for r in (0, 1)]
    distinct_copy(ranks[1], ranks[1])  # its own bytes: another rank, not a copy of the first
    before = digest(ranks[1])
    result = runner.invoke(app, ["ranks", str(ranks[0]), str(ranks[1]), "--html", str(ranks[1])])
    one_error(result, READS)
    assert digest(ranks[1]) == before


def test_the_export_beside_a_report_is_refused(export: Path, tmp_path: Path) -> None:
    """`timeline x.nsys-rep -o x.sqlite`: the export beside the report (newer than it) is what is read."""
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"not read: the export beside it is newer")
    os.utime(report, (1, 1))
    before = digest(export)
    for command in ("timeline", "dashboard"):
        one_error(runner.invoke(app, COMMANDS[command](report, export)), READS)
    assert digest(export) == before


def _harness(args: list[str], **redirect: object) -> subprocess.CompletedProcess[bytes]:
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "harness", *args], env=env, timeout=300, **redirect)  # type: ignore[call-overload]


@pytest.mark.parametrize("stream", ["stdout", "stderr", "both"])
def test_output_redirected_into_the_input_is_refused(export: Path, stream: str) -> None:
    """`harness kernels x.sqlite >> x.sqlite` (or `2>>`): the export keeps its bytes; the error line goes
    where the other stream goes."""
    before = digest(export)
    with export.open("ab") as into:
        redirect = {
            "stdout": {"stdout": into, "stderr": subprocess.PIPE},
            "stderr": {"stdout": subprocess.PIPE, "stderr": into},
            "both": {"stdout": into, "stderr": into},
        }[stream]
        proc = _harness(["kernels", str(export)], **redirect)
    assert proc.returncode == 2 and digest(export) == before
    said = (proc.stderr if stream == "stdout" else proc.stdout or b"").decode()
    if stream != "both":
        assert said.startswith("error: standard ") and "which this command reads" in said, said


@pytest.mark.attack(saves=True)
def test_runs_redirected_into_the_database_is_refused(two_runs: Path) -> None:
    before = digest(two_runs)
    with two_runs.open("ab") as into:
        proc = _harness(["runs", "--db", str(two_runs)], stdout=into, stderr=subprocess.PIPE)
    assert proc.returncode == 2 and b"standard output is redirected into" in proc.stderr
    assert digest(two_runs) == before
    assert list(ResultsStore(str(two_runs), readonly=True).runs()["run_id"]) == ["tiny-a", "tiny-b"]


def test_a_socket_as_the_output_is_one_line(export: Path, tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        result = runner.invoke(app, ["timeline", str(export), "-o", str(path)])
    finally:
        server.close()
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"error: cannot write {path}")
    assert path.is_socket()


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/FD"])
def test_a_name_of_an_open_descriptor_is_written_through_it(export: Path, tmp_path: Path, name: str) -> None:
    """`-o /dev/stdout >> log` (or `-o /dev/fd/3 3>> log`): the trace is appended to the log, as `-` is.
    The name was followed to the log and a new file renamed over it: what the log held was lost."""
    log = tmp_path / "log.txt"
    log.write_text("earlier\n")
    with log.open("ab") as into:
        fd = into.fileno()
        redirect = (
            {"stdout": into} if name == "/dev/stdout" else {"pass_fds": (fd,), "stdout": subprocess.PIPE}
        )
        target = name.replace("FD", str(fd))
        proc = _harness(["timeline", str(export), "-o", target], stderr=subprocess.PIPE, **redirect)
    assert proc.returncode == 0, proc.stderr
    held, trace = log.read_text().split("\n", 1)
    assert held == "earlier"
    assert sum(e.get("cat") == "kernel" for e in json.loads(trace)["traceEvents"]) == 5
    said = "standard output" if name == "/dev/stdout" else target
    assert f"note: wrote {said}: " in proc.stderr.decode()


def test_a_dashboard_on_dev_stdout_keeps_its_summary_off_the_page(export: Path) -> None:
    """`dashboard -o /dev/stdout | …`: the page alone on standard output, the summary on standard error, as
    with `-o -`. The table of panels was written after the page, into it."""
    proc = _harness(
        ["dashboard", str(export), "-o", "/dev/stdout"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.returncode == 0, proc.stderr
    page = proc.stdout.decode()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "wrote standard output" in proc.stderr.decode() and "Panel" in proc.stderr.decode()


# --- the folders an output goes in ----------------------------------------------------------------------

WRITERS: dict[str, Callable[[Path, Path], list[str]]] = {
    **COMMANDS,
    "diff -f csv -o": lambda src, out: ["diff", str(src), str(src), "-f", "csv", "-o", str(out)],
    "ranks --html": lambda src, out: ["ranks", str(src), "--html", str(out)],
    "roofline --html": lambda src, out: ["roofline", "--model", "char", "--gpu", "H100", "--html", str(out)],
}


@pytest.mark.parametrize("command", list(WRITERS))
def test_every_output_gets_its_missing_folders(export: Path, tmp_path: Path, command: str) -> None:
    """One rule for every option that names a file or folder to write: missing folders are created."""
    target = tmp_path / "new" / "deeper" / "out"
    result = runner.invoke(app, WRITERS[command](export, target))
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert target.is_dir() if command == "diff -f csv -o" else target.is_file()


@pytest.mark.parametrize("command", list(WRITERS))
def test_a_file_in_the_way_of_an_output_folder_is_one_line(
    export: Path, tmp_path: Path, command: str
) -> None:
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine\n")
    target = blocker / "deeper" / "out"
    said = one_error(
        runner.invoke(app, WRITERS[command](export, target)), f"{blocker} is a file, not a folder"
    )
    assert said.startswith(f"error: cannot write {target}")
    assert blocker.read_text() == "mine\n"


def test_why_a_path_cannot_be_made_names_what_is_missing(tmp_path: Path) -> None:
    """No permission names the folder that could not be created, where one is missing; a folder that is
    there, or a file, keeps the system's words (a CSV written into a folder there is not a folder to
    create)."""
    import errno

    from analysis.outputs import in_the_way

    denied = OSError(errno.EACCES, "Permission denied")
    there = tmp_path / "there"
    there.mkdir()
    assert (
        in_the_way(there / "a" / "b", denied)
        == f"no permission to create folder {there / 'a'} (Permission denied)"
    )
    assert in_the_way(there, denied) == "Permission denied"
    assert in_the_way(there / "page.html", denied, folder=False) == "Permission denied"
    assert in_the_way(there / "new" / "page.html", denied, folder=False) == (
        f"no permission to create folder {there / 'new'} (Permission denied)"
    )
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine\n")
    not_a_folder = OSError(errno.ENOTDIR, "Not a directory")
    assert in_the_way(blocker / "d", not_a_folder) == f"{blocker} is a file, not a folder"
    assert in_the_way(blocker / "p.html", not_a_folder, folder=False) == f"{blocker} is a file, not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may create folders anywhere")
def test_an_output_folder_without_permission_is_one_line(export: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        result = runner.invoke(app, COMMANDS["timeline"](export, locked / "new" / "t.json"))
        one_error(result, f"no permission to create folder {locked / 'new'}")
    finally:
        locked.chmod(0o755)
