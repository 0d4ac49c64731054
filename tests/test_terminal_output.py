"""Output for people fits the terminal: at 80 columns every table, note and help screen fits; the columns
left out are named; `--wide` shows everything; `-h` and `--version` work."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from harness import __version__
from harness.cli import app

runner = CliRunner()
COMMANDS = ["run", "sweep", "runs", "show", "overhead", "doctor", "kernels", "nvtx", "nvtx-gpu", "api",
            "memops", "launch", "osrt", "summary", "dashboard"]  # fmt: skip


def run(*args: str | Path, columns: int = 80):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def fits(text: str, width: int = 80) -> None:
    """Every line at most `width` cells, and none padded with trailing spaces."""
    for line in text.splitlines():
        assert cell_len(line) <= width, f"{cell_len(line)} cells: {line!r}"
        assert line == line.rstrip(), f"trailing spaces: {line!r}"


def left_out(text: str) -> str:
    """The note naming the columns left out (it may wrap: joined back into one line)."""
    joined = " ".join(line.strip() for line in text.splitlines())
    match = re.search(
        r"note: \d+ of \d+ columns left out to fit \d+ columns: (.*?); --wide shows them", joined
    )
    assert match, text
    return match.group(1)


def test_export_tables_fit_80_columns(a100_export: Path, cpu_export: Path) -> None:
    for args in (("kernels", a100_export), ("launch", a100_export), ("nvtx", a100_export),
                 ("api", a100_export), ("memops", a100_export), ("nvtx-gpu", a100_export),
                 ("nvtx-gpu", a100_export, "--kernels"), ("summary", a100_export),
                 ("nvtx", cpu_export, "--trace"), ("osrt", cpu_export), ("summary", cpu_export)):  # fmt: skip
        result = run(*args)
        assert result.exit_code == 0, result.output
        fits(result.stdout)
    kernels = run("kernels", a100_export).stdout
    assert set(left_out(kernels).split(", ")) >= {"Min (ms)", "Max (ms)", "StdDev (ms)"}
    assert "Total" in kernels and "88.573" in kernels and "saxpy(double *" in kernels  # what matters stays
    launch = run("launch", a100_export).stdout
    assert {"PID", "TID", "API Name", "QStdDev (ms)"} <= set(left_out(launch).split(", "))
    assert "Kernel Name" in launch and "17.747" in launch  # TAvg: the whole latency
    trace = run("nvtx", cpu_export, "--trace").stdout
    assert "RangeStack" in left_out(trace) and "forward" in trace


def test_a_wider_terminal_shows_more(a100_export: Path) -> None:
    at_80 = left_out(run("kernels", a100_export).stdout).split(", ")
    at_120 = run("kernels", a100_export, columns=120)
    fits(at_120.stdout, 120)
    assert len(left_out(at_120.stdout).split(", ")) < len(at_80)
    at_200 = run("kernels", a100_export, columns=200).stdout
    assert "left out" not in at_200 and "saxpy(double *, double *, double *, double, int)" in at_200


def test_wide_shows_every_column_and_whole_names(a100_export: Path, cpu_export: Path, tmp_path: Path) -> None:
    for args in (("kernels", a100_export), ("launch", a100_export), ("nvtx", a100_export),
                 ("api", a100_export), ("osrt", cpu_export), ("memops", a100_export),
                 ("nvtx-gpu", a100_export), ("summary", a100_export)):  # fmt: skip
        narrow, wide = run(*args), run(*args, "--wide")
        assert wide.exit_code == 0, wide.output
        assert "columns left out" in narrow.stdout and "columns left out" not in wide.stdout, args
        assert max(map(cell_len, wide.stdout.splitlines())) > 80
    launch = run("launch", a100_export, "--wide").stdout
    for header in ("PID", "QStdDev", "API Name", "saxpy(double *, double *, double *, double, int)"):
        assert header in launch
    dashboard = run("dashboard", a100_export, "--out", tmp_path / "d.html", "--wide")
    assert dashboard.exit_code == 0, dashboard.output


def test_run_runs_show_doctor_fit_80_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a short database path: the title holds it, and a path is never broken
    monkeypatch.setenv("HARNESS_DB", "sqlite:///results.sqlite")
    done = run("run", "char", "--device", "cpu", "--steps", "1", "--warmup", "0")
    assert done.exit_code == 0, done.output
    fits(done.stdout)
    assert {"d_model", "num_heads", "forward std (ms)"} <= set(left_out(done.stdout).split(", "))
    assert "tokens/s" in done.stdout and "optimizer" in done.stdout
    assert "progress: char train: 1/1 steps [" in done.stderr  # stdout is no terminal here
    runs = run("runs")
    fits(runs.stdout)
    assert "created" in left_out(runs.stdout)
    (listed,) = json.loads(run("runs", "--format", "json").stdout)
    assert listed["run_id"] in runs.stdout  # the id `show` takes is never shortened
    show = run("show", listed["run_id"])
    assert show.exit_code == 0
    fits(show.stdout)
    doctor = run("doctor", "--no-self-test")
    # it fails on a machine without an nsys (`make setup` installs one), and prints its table all the same
    assert doctor.exit_code == 0 or "nsys not found" in doctor.stdout, doctor.output
    fits(doctor.stdout)
    assert "results database" in doctor.stdout and "left out" not in doctor.stdout  # details wrap instead
    wide = run("runs", "--wide")
    assert "created" in wide.stdout and "profiler" in wide.stdout and "left out" not in wide.stdout
    wide_show = run("show", listed["run_id"], "--wide")
    assert wide_show.exit_code == 0 and "left out" not in wide_show.stdout


def test_help_fits_80_columns() -> None:
    for command in ["", *COMMANDS]:
        result = run(*([command] if command else []), "-h")
        assert result.exit_code == 0, (command, result.output)
        assert result.stdout.startswith("Usage: ")
        fits(result.stdout)
        assert "<bool>" not in result.stdout and "list[" not in result.stdout, command
    top = run("--help").stdout
    for command in COMMANDS:  # each command's one-line summary is whole, not cut with "..."
        (line,) = [line for line in top.splitlines() if line.strip().startswith(f"{command} ")]
        assert not line.endswith("..."), line
    assert "--no-nsys-baseline" in run("run", "-h").stdout
    overhead = run("overhead", "-h").stdout
    assert "--nsys-mode" in overhead and "--modes" not in overhead


def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0 and result.stdout == f"harness {__version__}\n"


def test_notes_wrap_between_words_and_keep_paths_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.cli.terminal.output import emit

    monkeypatch.setenv("COLUMNS", "80")
    path = "/home/someone/projects/harness/nsys_profiles/small-20250101-120000-abcd.nsys-rep"
    out = io.StringIO()
    df = pd.DataFrame({"Name": ["x"], "Total Time (ns)": [1_000_000]})
    emit(df, title="a title", notes=[f"report: {path}", "word " * 30], file=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "a title"
    assert f"      {path}" in lines or f"note: report: {path}" in lines  # on a line of its own, whole
    fits("\n".join(line for line in lines if path not in line))


@pytest.mark.slow
def test_progress_goes_to_stderr_when_piped(tmp_path: Path) -> None:
    """A real process with stdout and stderr piped: progress lines on stderr, the table alone on stdout."""
    env = {**os.environ, "HARNESS_DB": f"sqlite:///{tmp_path / 'r.sqlite'}", "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("progress: ")]
    assert progress[0].startswith("progress: char train: 1/3 steps [")
    assert progress[-1].startswith("progress: char train: 3/3 steps [")
    assert "progress" not in done.stdout and "forward" in done.stdout


def test_progress_reminds_during_a_long_silence() -> None:
    from harness.cli.terminal.progress import Progress

    out = io.StringIO()
    with Progress("small train under nsys", live=False, quiet_s=0.2, file=out) as progress:
        progress.stage("run under nsys 2022.4.2")
        import time

        time.sleep(1.0)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("progress: small train under nsys: run under nsys 2022.4.2 [0 s]")
    assert any(
        line.startswith("progress: still running: small train under nsys: run under") for line in lines
    )


def test_progress_says_a_count_once() -> None:
    """A run in another process is watched: the watch reports 0 steps before the first ends, after the
    stage's line has said 0/N; `0/27 steps` was printed twice. Each count is said once."""
    from harness.cli.terminal.progress import Progress

    out = io.StringIO()
    with Progress("tiny train under torch.profiler", 27, unit="steps", live=False, file=out) as progress:
        progress.stage("run under torch.profiler (fresh process)")
        for done in (0, 0, 1, 1, 27):
            progress.advance(done)
    said = [line.rsplit(" [", 1)[0] for line in out.getvalue().splitlines()]
    assert said == [
        "progress: tiny train under torch.profiler: run under torch.profiler (fresh process): 0/27 steps",
        "progress: tiny train under torch.profiler: run under torch.profiler (fresh process): 1/27 steps",
        "progress: tiny train under torch.profiler: run under torch.profiler (fresh process): 27/27 steps",
    ]


def test_a_column_named_twice_in_priority_is_shown_once() -> None:
    from harness.cli.terminal.output import rich_table

    df = pd.DataFrame({"Name": ["k"], "Total Time (ns)": [5], "Instances": [2]})
    df.attrs["priority"] = ["Instances", "Name", "Instances"]
    fitted = rich_table(df, width=200)
    # shown in the frame's order, each once (ns columns are shown in ms)
    assert [str(c.header) for c in fitted.table.columns] == ["Name", "Total Time (ms)", "Instances"]
    assert fitted.dropped == []


def _rows(text: str) -> list[str]:
    """The body rows of a boxed table (lines between the header rule and the bottom border)."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return lines[top + 1 : end]


def test_timed_tables_fit_the_terminal_height(cpu_export: Path) -> None:
    """cpu-train's osrtsum has 21 rows: at 25 lines the first 14 (largest time first), then one line."""
    full = pd.read_csv(io.StringIO(run("osrt", cpu_export, "--format", "csv").stdout))
    assert len(full) == 21  # csv keeps every row
    short = runner.invoke(app, ["osrt", str(cpu_export)], env={"COLUMNS": "100", "LINES": "25"})
    assert short.exit_code == 0, short.output
    lines = short.stdout.splitlines()
    assert len(lines) <= 24  # and the prompt
    rows = _rows(short.stdout)
    assert [r.split("│")[-2].strip() for r in rows] == full["Name"].head(len(rows)).tolist()
    assert len(rows) == 14
    assert (
        "note: 7 of 21 rows left out to fit 25 lines: --limit N shows N rows (0: all), --format csv or json"
        in (short.stdout)
    )
    tall = runner.invoke(app, ["osrt", str(cpu_export)], env={"COLUMNS": "100", "LINES": "60"})
    assert len(_rows(tall.stdout)) == 21 and "rows left out" not in tall.stdout
    five = runner.invoke(app, ["osrt", str(cpu_export), "--limit", "5"], env={"COLUMNS": "100"})
    assert (
        len(_rows(five.stdout)) == 5
        and "16 of 21 rows left out: --limit N shows N rows (0: all)" in five.stdout
    )
    every = runner.invoke(
        app, ["osrt", str(cpu_export), "--limit", "0"], env={"COLUMNS": "100", "LINES": "10"}
    )
    assert len(_rows(every.stdout)) == 21 and "rows left out" not in every.stdout


def test_records_are_never_cut(a100_export: Path) -> None:
    """A table without a time column (doctor's checks, show's fields) is shown whole at any height."""
    doctor = runner.invoke(app, ["doctor"], env={"COLUMNS": "100", "LINES": "8"})
    assert len(_rows(doctor.stdout)) > 5 and "rows left out" not in doctor.stdout
