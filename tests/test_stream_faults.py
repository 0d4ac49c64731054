"""Standard output and the terminal under attack: closed, full, an encoding without the
harness's own characters, COLUMNS of 0, 20 or 10¹¹, names holding invisible format characters, a newline
in a file name; and warnings wrapped on a terminal only. Each ends in one clear line and a
nonzero exit, or in output that is right for the stream it has. The stream cases run `harness` as a real
process: a closed or full standard output is the process's own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from rich.cells import cell_len
from test_escaping import renamed
from typer.testing import CliRunner

from harness.cli import app
from harness.cli.terminal.text import CONTROL

pytestmark = pytest.mark.attack
runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
LONG_NAME = "中文_café_kernel<" + "x" * 120 + ">(int)"  # shortened at any width; the head stays


def harness(*args: str | Path, stdout=subprocess.PIPE, close_stdout: bool = False, **env: str):  # type: ignore[no-untyped-def]
    """`python -m harness ARGS` as a process (standard output closed, when asked, as `>&-` does)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100", **env}
    return subprocess.run(
        [sys.executable, "-m", "harness", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=full,
        timeout=300,
        preexec_fn=(lambda: os.close(1)) if close_stdout else None,
    )


def one_error(proc: subprocess.CompletedProcess[bytes], needle: str) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert err.strip().splitlines() == [f"error: {needle}"], err


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_closed_stdout_says_so(a100_export: Path, fmt: str) -> None:
    proc = harness("kernels", a100_export, "--format", fmt, close_stdout=True)
    one_error(proc, "cannot write to standard output: it is closed")


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_a_full_stdout_says_so(a100_export: Path, fmt: str) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "wb") as full:
        proc = harness("kernels", a100_export, "--format", fmt, stdout=full)
    one_error(proc, "cannot write to standard output: No space left on device")


def test_help_into_a_full_stdout_says_so() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "wb") as full:
        proc = harness("--help", stdout=full)
    one_error(proc, "cannot write to standard output: No space left on device")


def test_a_command_writing_only_a_file_runs_with_stdout_closed(a100_export: Path, tmp_path: Path) -> None:
    proc = harness("timeline", a100_export, "-o", tmp_path / "t.json", close_stdout=True)
    assert proc.returncode == 0, proc.stderr.decode()
    assert (tmp_path / "t.json").stat().st_size > 1000


@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONIOENCODING": "ascii"},
        {"PYTHONIOENCODING": "latin-1"},
        {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""},
    ],
    ids=["ascii", "latin-1", "C-locale"],
)
def test_an_output_encoding_without_the_ellipsis(
    a100_export: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """A long name shortened with `...`, what the encoding lacks escaped, the table drawn whole and
    aligned (every line of the box as wide as the others)."""
    export = renamed(a100_export, tmp_path / "r.sqlite", kernel=LONG_NAME)
    proc = harness("kernels", export, **env)
    assert proc.returncode == 0, proc.stderr.decode()
    encoding = "latin-1" if env.get("PYTHONIOENCODING") == "latin-1" else "ascii"
    text = proc.stdout.decode(encoding)  # every byte is the encoding's
    rows = [line for line in text.splitlines() if line.startswith(("|", "+", "│", "┃"))]
    assert len({len(line) for line in rows}) == 1, text
    head = "\\u4e2d\\u6587_caf"  # 中文 escaped (neither encoding has it), never cut through an escape
    assert "..." in text and "…" not in text and "88.573" in text and head in text, text
    csv = harness("kernels", export, "--format", "csv", **env)
    assert csv.returncode == 0 and LONG_NAME.encode(
        "ascii", "backslashreplace"
    ).decode() in csv.stdout.decode(encoding).replace("é", "\\xe9")


@pytest.mark.parametrize("columns", ["0", "abc", "-5", "99999999999", "20"])
def test_any_columns_value_shows_the_whole_numbers(a100_export: Path, columns: str) -> None:
    """COLUMNS of 0 or a word is as if unset (80); 10¹¹ is taken as 10,000; 20 draws the deciding
    columns whole, wider than the terminal, never with their numbers cut."""
    result = runner.invoke(app, ["kernels", str(a100_export)], env={"COLUMNS": columns})
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    row = next(line for line in result.stdout.splitlines() if "saxpy" in line)
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[:3] == ["100.0", "88.573", "5"], row
    if columns in ("0", "abc", "-5"):
        assert max(cell_len(line) for line in result.stdout.splitlines()) <= 80


def test_lines_taken_as_nothing_or_huge(a100_export: Path) -> None:
    for lines in ("0", "99999999999999"):
        result = runner.invoke(app, ["kernels", str(a100_export)], env={"LINES": lines, "COLUMNS": "100"})
        assert result.exit_code == 0 and "88.573" in result.stdout, result.output


HIDDEN = {
    "U+200F": "\u200f", "U+061C": "\u061c", "U+2028": "\u2028", "U+2029": "\u2029", "U+200B": "\u200b",
    "U+200D": "\u200d", "U+FEFF": "\ufeff", "U+00AD": "\u00ad", "U+2066": "\u2066", "U+E0041": "\U000e0041",
    "U+202E": "\u202e",
}  # fmt: skip


@pytest.mark.parametrize("code", list(HIDDEN))
def test_invisible_characters_in_names_are_escaped(a100_export: Path, tmp_path: Path, code: str) -> None:
    char = HIDDEN[code]
    export = renamed(a100_export, tmp_path / "r.sqlite", kernel=f"saxpy{char}kernel")
    for args in (["kernels", str(export), "--wide"], ["kernels", str(export), "--format", "csv"]):
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert char not in result.output
        escape = f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
        escape = escape if ord(char) < 0x10000 else f"\\U{ord(char):08x}"
        assert f"saxpy{escape}kernel" in result.stdout, result.stdout


def test_every_invisible_character_is_in_the_class() -> None:
    """text.CONTROL holds every character of Unicode's control, format, line and paragraph separator and
    surrogate categories (as this Python's unicodedata knows them)."""
    missing = [
        f"U+{cp:04X}"
        for cp in range(0x110000)
        if unicodedata.category(chr(cp)) in ("Cc", "Cf", "Zl", "Zp", "Cs") and not CONTROL.match(chr(cp))
    ]
    assert missing == []


def test_a_newline_in_a_file_name_stays_in_the_title(a100_export: Path, tmp_path: Path) -> None:
    export = tmp_path / "new\nline.sqlite"
    shutil.copyfile(a100_export, export)
    result = runner.invoke(app, ["kernels", str(export)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("CUDA kernels in") and first.endswith("new\\nline.sqlite"), result.stdout
    assert "line.sqlite" not in result.stdout.splitlines()[1]


# --- warnings and notes: wrapped on a terminal, one line in a pipe -----------------------------------

LONG_NOTE = "note: no findings in report.sqlite: no rule fired; thresholds: "


def _on_a_terminal(args: list[str], columns: int) -> str:
    """What `harness ARGS` writes to standard error when that is a terminal (a pseudo-terminal here)."""
    main, tty = os.openpty()
    try:
        full = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": str(columns), "TERM": "dumb"}
        full.pop("FORCE_COLOR", None)
        full.pop("TTY_COMPATIBLE", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", *args],
            stdout=subprocess.DEVNULL, stderr=tty, env=full, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(tty)
        chunks = []
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:  # the terminal closed (EIO): the process is gone
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=300)
    finally:
        os.close(main)
    return re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode().replace("\r\n", "\n"))


@pytest.mark.parametrize("columns", [60, 80])
def test_a_long_note_wraps_on_a_terminal(cpu_export: Path, columns: int) -> None:
    text = _on_a_terminal(["advise", str(cpu_export)], columns)
    lines = text.rstrip("\n").splitlines()
    assert lines[0].startswith(LONG_NOTE[:30]) and len(lines) >= 3, text
    assert all(cell_len(line) <= columns for line in lines), text
    # each note starts its line, its continuation lines hang under its text
    rest = [line for line in lines[1:] if not line.startswith("note: ")]
    assert len(rest) >= 2 and all(
        line.startswith("      ") and not line.startswith("       ") for line in rest
    ), text
    joined = " ".join(line.strip() for line in lines)
    assert "(--threshold NAME=VALUE changes them)" in joined


def test_a_long_note_is_one_line_in_a_pipe(cpu_export: Path) -> None:
    proc = harness("advise", cpu_export, COLUMNS="80")
    notes = [line for line in proc.stderr.decode().splitlines() if line.startswith("note: no findings")]
    assert len(notes) == 1 and len(notes[0]) > 150 and notes[0].endswith("changes them)"), proc.stderr


# --- second round: other commands, the other stream, a run ------------------------------------------------


def test_diff_in_ascii_draws_its_headline_and_tables(a100_export: Path) -> None:
    """`diff` prints Δ, ×, → and its own sentences: in ASCII they are stand-ins or escapes, never an error."""
    for fmt in ("table", "markdown"):
        proc = harness("diff", a100_export, a100_export, "-f", fmt, PYTHONIOENCODING="ascii")
        assert proc.returncode == 0 and "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
        text = " ".join(proc.stdout.decode("ascii").split())
        assert "GPU busy time" in text and "kernels 5 -> 5" in text, text


@pytest.mark.parametrize("how", ["closed", "full"])
def test_errors_into_a_lost_stderr_keep_their_exit_code(tmp_path: Path, how: str) -> None:
    """Standard error closed or full: the error cannot be said, the exit code still is; nothing leaks
    into standard output."""
    if how == "full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    full = {**os.environ, "PYTHONPATH": str(REPO)}
    with open("/dev/full" if how == "full" else os.devnull, "wb") as sink:
        proc = subprocess.run(
            [sys.executable, "-m", "harness", "kernels", str(tmp_path / "missing.sqlite")],
            stdout=subprocess.PIPE, stderr=sink, env=full, timeout=300,
            preexec_fn=(lambda: os.close(2)) if how == "closed" else None,
        )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == b""


@pytest.mark.slow
@pytest.mark.attack(saves=True)
def test_a_run_into_a_full_stdout_is_saved_and_says_so(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    db = tmp_path / "r.sqlite"
    args = ["run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "-b", "1", "-t", "16"]
    with open("/dev/full", "wb") as full:
        proc = harness(*args, "--db", db, stdout=full)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "error: cannot write to standard output: No space left on device"
    listed = runner.invoke(app, ["runs", "--db", str(db), "--format", "csv"])
    assert listed.exit_code == 0 and listed.stdout.count("\nchar-") == 1, listed.output


@pytest.mark.parametrize("how", ["closed", "full"])
@pytest.mark.parametrize("command", ["timeline", "dashboard"])
def test_dash_into_a_lost_stdout_says_so(a100_export: Path, how: str, command: str) -> None:
    """`-o -` writes the file's bytes past the text layer: a closed or full standard output is still one
    line, and the interpreter's last flush adds nothing."""
    if how == "full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full" if how == "full" else os.devnull, "wb") as sink:
        proc = harness(command, a100_export, "-o", "-", stdout=sink, close_stdout=how == "closed")
    why = "it is closed" if how == "closed" else "No space left on device"
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err and "Exception ignored" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"error: cannot write standard output: {why}"), err
    assert sum(line.startswith("error:") for line in err.splitlines()) == 1, err
