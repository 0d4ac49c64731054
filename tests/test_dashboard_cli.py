"""`harness dashboard`: arguments, one-line errors, the page it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SHARED_NSYS, NsysRun, need, shared_export
from dashboard_data import fill
from typer.testing import CliRunner

from harness.cli import app
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()


@pytest.fixture
def db(tmp_db: str) -> str:
    fill(ResultsStore(tmp_db))
    return tmp_db


def _panels(result) -> dict[str, bool]:
    assert result.exit_code == 0, result.output
    return {row["Panel"]: row["Drawn"] for row in json.loads(result.stdout)}


def test_writes_page_from_the_store(db: str, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "dash.html"
    result = runner.invoke(app, ["dashboard", "--db", db, "--out", str(out), "--format", "json"])
    drawn = _panels(result)
    assert list(drawn) == [
        "phases", "inference", "serving", "blocks", "roofline", "steps", "overhead", "agreement", "findings",
        "kernels", "nvtx", "timeline", "throughput", "compare", "optimize", "attention", "energy", "compile",
        "memory",
    ]  # fmt: skip
    # no generate runs (no prefill / decode, no serving figures); no stored findings; no export recorded; no
    # attention sweep; no run with --power; no compiled run; no memory snapshot; no optimisation
    assert [k for k, v in drawn.items() if not v] == [
        "inference", "serving", "blocks", "roofline", "findings", "kernels", "nvtx", "timeline", "optimize",
        "attention",
        "energy", "compile", "memory",
    ]  # fmt: skip
    text = out.read_text()
    assert "7 runs from sqlite:///" in text


def test_run_selection_and_compare(db: str, tmp_path: Path) -> None:
    out = tmp_path / "d.html"
    args = [
        "dashboard",
        "--out",
        str(out),
        "--format",
        "json",
        "--runs",
        "tiny-fp32-sweep,small-fp32-sweep01",
    ]
    drawn = _panels(runner.invoke(app, [*args, "--compare", "tiny-fp32-sweep01,small-fp32"]))
    assert drawn["phases"] and drawn["compare"] and not drawn["overhead"] and not drawn["agreement"]
    assert "Run comparison: tiny-fp32-sweep01 vs small-fp32-sweep01" in out.read_text()


def test_compare_draws_its_pair_without_adding_it_to_the_other_panels(db: str, tmp_path: Path) -> None:
    """--compare's two runs are the comparison panel's: the other panels stay with the runs the filters
    chose (here small's two), not those and the pair."""
    out = tmp_path / "d.html"
    args = ["dashboard", "--out", str(out), "--format", "json", "--model", "small"]
    drawn = _panels(runner.invoke(app, [*args, "--compare", "tiny-fp32-ovh000,tiny-fp32-ovh001"]))
    assert drawn["compare"] and not drawn["overhead"]  # the overhead pair is tiny's, not among small's runs
    text = out.read_text()
    assert "Run comparison: tiny-fp32-ovh000 vs tiny-fp32-ovh001" in text
    assert "2 runs from sqlite:///" in text


def test_out_never_replaces_the_export_of_a_compared_run(tmp_db: str, tmp_path: Path) -> None:
    """A run named with --compare alone (none of the filters' runs) has its export read: never written."""
    export = tmp_path / "prof.sqlite"
    export.write_bytes(b"an export")
    fill(ResultsStore(tmp_db), export=export)
    args = [
        "dashboard",
        "--model",
        "small",
        "--compare",
        "tiny-fp32-ovh000,tiny-fp32-prof01",
        "--out",
        str(export),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "is a file this command reads" in result.output, result.output
    assert export.read_bytes() == b"an export"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--runs", "a", "--last", "2"], 2, "give --runs or --last, not both"),
        (["--compare", "only-one"], 2, "--compare takes two run ids"),
        (["--runs", "no-such-run"], 2, "no run with id 'no-such-run'"),
        (["--runs", ","], 2, "--runs names no run"),  # not every run
        (["--runs", " "], 2, "--runs names no run"),
        (["nowhere.sqlite"], 1, "nowhere.sqlite does not exist"),
        (["x.sqlite", "--last", "3"], 2, "not both"),
    ],
)
def test_user_errors_are_one_line(db: str, tmp_path: Path, args: list[str], code: int, message: str) -> None:
    result = runner.invoke(app, ["dashboard", "--out", str(tmp_path / "d.html"), *args])
    assert result.exit_code == code
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_page_under_a_file_is_one_line_naming_the_file(db: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = runner.invoke(app, ["dashboard", "--db", db, "--out", str(tmp_path / "file" / "d.html")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: cannot write {tmp_path / 'file' / 'd.html'}: {tmp_path / 'file'} is a file, not a folder; "
        "pass --out to a writable path"
    ]


def test_unreadable_nsys_rep_is_one_line(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rep = tmp_path / "r.nsys-rep"
    rep.write_bytes(b"")
    monkeypatch.setenv("HARNESS_NSYS", str(tmp_path / "no-nsys"))
    monkeypatch.setenv("PATH", str(tmp_path))
    result = runner.invoke(app, ["dashboard", str(rep), "--out", str(tmp_path / "d.html")])
    assert result.exit_code == 1 and str(rep) in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.nsys-rep"]


def test_other_commands_do_not_import_plotly() -> None:
    code = "import sys, harness.cli; sys.exit(1 if 'plotly' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_report_mode_draws_the_fixture_profile(a100_export: Path, tmp_path: Path) -> None:
    out = tmp_path / "a100.html"
    drawn = _panels(
        runner.invoke(app, ["dashboard", str(a100_export), "--out", str(out), "--format", "json"])
    )
    # the saxpy program has kernels but no harness `step` ranges: the timeline is the busiest second
    assert drawn == {"kernels": True, "nvtx": True, "timeline": True}
    text = out.read_text()
    assert "saxpy(double *, double *, double *, double, int)" in text
    assert "No &#x27;step&#x27; NVTX ranges (not recorded by the harness): showing the busiest second" in text


def test_report_mode_never_writes_over_the_results_database(a100_export: Path, db: str) -> None:
    """An export's page reads no database, so `--out` was not checked against it: the page replaced it."""
    path = Path(db.removeprefix("sqlite:///"))
    before = path.read_bytes()
    result = runner.invoke(app, ["dashboard", str(a100_export), "--out", str(path), "--db", db])
    assert result.exit_code == 2, result.output
    assert f"--out {path} is a file this command reads" in result.output
    assert path.read_bytes() == before


def test_report_mode_draws_the_cpu_step_timeline(cpu_export: Path, tmp_path: Path) -> None:
    out = tmp_path / "cpu.html"
    drawn = _panels(runner.invoke(app, ["dashboard", str(cpu_export), "--out", str(out), "--format", "json"]))
    # no kernels without a GPU: the kernels panel shows the OS runtime calls instead
    assert drawn == {"kernels": True, "nvtx": True, "timeline": True}


LLAMA = SHARED_NSYS / "ext" / "llama3_realsim"


def test_an_export_the_harness_did_not_record_shows_a_window_of_its_capture(tmp_path: Path) -> None:
    """`harness dashboard report.sqlite` on the llama3_realsim fixture draws a window of the
    capture (the busiest second by default, or --start/--end) instead of "no 'step' NVTX ranges"."""
    from analysis.dashboard import collect_export
    from analysis.dashboard.profile import timeline_panel
    from analysis.trace.opening import open_trace

    export = LLAMA / "report.sqlite"
    data = collect_export(export)
    panel = timeline_panel(data)
    assert panel.figure is not None and data.profile is not None and data.profile.window is not None
    lo, hi = data.profile.window
    with open_trace(export) as trace:  # the window holds the capture's kernels (shorter than a second)
        kernels = trace.frame("kernels", ["start"])["start"]
        from analysis.views.timeline import time_zero

        t0 = time_zero(trace)
    assert (lo, hi) == (int(kernels.min()) - t0, hi) and hi - lo < 1_000_000_000
    span = f"{lo / 1e9:,.3f}–{hi / 1e9:,.3f} s from the session's start"
    assert panel.title == f"Timeline of {span}: report.sqlite"
    assert any("the capture's activity is shorter than a second: showing all of it" in n for n in panel.notes)
    drawn_kernels = sum(len(t.x) for t in panel.figure.data if t.name == "kernel")
    assert drawn_kernels == len(kernels)  # every kernel of the capture falls inside it
    out = tmp_path / "w.html"
    args = ["dashboard", str(export), "--start", "1.7", "--end", "1.8", "--out", str(out), "--format", "json"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = {r["Panel"]: r for r in json.loads(result.stdout)}
    assert (
        rows["timeline"]["Title or what is missing"]
        == "Timeline of 1.700–1.800 s from the session's start: report.sqlite"
    )
    bad = runner.invoke(app, ["dashboard", str(export), "--start", "2", "--end", "1", "--out", str(out)])
    assert bad.exit_code == 2 and "--end (1.0 s) must be after --start (2.0 s)" in bad.output
    runs_only = runner.invoke(app, ["dashboard", "--start", "1", "--out", str(out)])
    assert runs_only.exit_code == 2 and len(runs_only.output.strip().splitlines()) == 1


def test_a_window_beside_the_capture_says_where_its_events_are(tmp_path: Path) -> None:
    """`dashboard --start 300 --end 400` of a capture of a second said only "no NVTX ranges or kernels to
    draw in this window"; it says where the events are, as `timeline` does of the same window."""
    export = need(LLAMA / "report.sqlite")
    window = ["--start", "300", "--end", "400"]
    timeline = runner.invoke(app, ["timeline", str(export), *window, "-o", str(tmp_path / "t.json")])
    span = timeline.stderr.split("(its events span ")[1].split(" from the session's start)")[0]
    assert timeline.exit_code == 1 and span.endswith(" s")
    args = ["dashboard", str(export), *window, "--out", str(tmp_path / "w.html"), "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = {r["Panel"]: r for r in json.loads(result.stdout)}
    assert rows["timeline"]["Drawn"] is False and rows["timeline"]["Title or what is missing"] == (
        f"no NVTX ranges or kernels to draw in 300..400 s from the session's start (its events span {span})"
    )


def test_the_wrote_line_counts_panels_in_english(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    weather = LLAMA.parent / "weatherbench2" / "report.sqlite"
    result = runner.invoke(app, ["dashboard", str(weather), "--out", str(tmp_path / "w.html")])
    assert result.exit_code == 0, result.output
    assert "1 panel drawn, 2 missing" in result.output  # not "1 panels"


@pytest.mark.parametrize("command", ["dashboard", "runs"])
def test_last_counts_one_run_or_more(command: str, db: str) -> None:
    """`--last` is the same option wherever it filters the stored runs: 0 is refused, not an empty list."""
    result = runner.invoke(app, [command, "--db", db, "--last", "0"])
    assert result.exit_code == 2 and "--last" in result.output


def test_report_mode_says_a_capture_that_failed_its_health_checks(tmp_path: Path) -> None:
    """A capture that lost events fails `harness health`: its panels are drawn and say so, as the command."""
    import shutil
    import sqlite3

    export = tmp_path / "lost events.sqlite"
    shutil.copyfile(shared_export("ext/fuser_report1"), export)
    out = tmp_path / "page.html"
    args = ["dashboard", str(export), "--out", str(out), "--format", "json"]
    healthy = runner.invoke(app, args)
    assert healthy.exit_code == 0 and "health" not in healthy.output and "Not sound" not in out.read_text()
    with sqlite3.connect(export) as db:
        db.execute(
            "INSERT INTO DIAGNOSTIC_EVENT VALUES (1000, 1, 2, 2, "
            "'CUPTI: 1234 activity records were lost because the buffer overflowed', 281474976710656)"
        )
    db.close()
    result = runner.invoke(app, [*args, "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "warning: lost events.sqlite: its capture failed its health checks (nsys messages" in result.output
    rows = json.loads(result.stdout)
    titles = [r["Title or what is missing"] for r in rows]
    assert len(titles) == 3 and all(t.endswith("(its capture failed its health checks)") for t in titles)
    page = out.read_text()
    assert page.count("Not sound: drawn from a capture that failed its health checks (nsys messages") == 3
    from analysis import front

    title = front.open(export, cache=False).figure("kernels").layout.title.text
    assert title.endswith("(its capture failed its health checks)")


@pytest.mark.slow
@pytest.mark.xdist_group("nsys-tiny")
def test_report_mode_names_the_report_given_not_its_export(
    nsys_tiny: NsysRun, tmp_path: Path, cache_dir: Path
) -> None:
    """A report is exported into the cache folder first: the page names the report, not that export."""
    import shutil

    (rep,) = nsys_tiny.profile_dir.glob("*.nsys-rep")
    given = tmp_path / "my report.nsys-rep"
    shutil.copyfile(rep, given)
    out = tmp_path / "page.html"
    result = runner.invoke(app, ["dashboard", str(given), "--out", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    titles = [r["Title or what is missing"] for r in json.loads(result.stdout)]
    assert all(t.split(": ", 1)[1].startswith("my report.nsys-rep") for t in titles), titles
    page = out.read_text()
    assert f"<p>report {given}</p>" in page, page[:600]
    assert ".sqlite" not in page.split("<main>")[1].split("<script")[0]


def test_a_filter_that_matches_no_run_is_said_once(tmp_db: str, tmp_path: Path) -> None:
    """The warning says the filter matched none of the stored runs; the panel table, each of its panels
    missing those runs, said it again: for people the page's line stands in for it."""
    from test_store import make_result

    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-a"))
    save_run(store, make_result("tiny-b"))
    page = tmp_path / "page.html"
    args = ["dashboard", "--db", tmp_db, "--model", "nosuch", "-o", str(page)]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})  # each sentence whole on one line
    assert result.exit_code == 0, result.output
    said = "no run matches --model nosuch (2 runs in the results database; `harness runs` lists them)"
    assert result.output.count("2 runs in the results database") == 1
    assert f"warning: {said}: the page says what is missing" in result.stderr
    assert result.stdout.startswith(f"wrote {page} (0.0 MB): 0 panels drawn, ")
    assert page.exists()
    as_json = runner.invoke(app, [*args, "-f", "json"])
    assert as_json.exit_code == 0, as_json.output
    phases = next(p for p in json.loads(as_json.stdout) if p["Panel"] == "phases")
    assert phases["Title or what is missing"] == said  # scripts keep every panel's row


def test_the_command_for_another_window_names_the_export_as_a_shell_reads_it(tmp_path: Path) -> None:
    """The timeline's note offered `harness dashboard my run.sqlite --start S --end S`: the file's name
    alone, split in two by the shell; it is the export's path, quoted where it needs to be."""
    import shlex

    from analysis.dashboard import collect_export
    from analysis.dashboard.profile import timeline_panel

    export = tmp_path / "my run.sqlite"
    export.write_bytes(need(LLAMA / "report.sqlite").read_bytes())
    panel = timeline_panel(collect_export(export))
    command = f"`harness dashboard {shlex.quote(str(export))} --start S --end S` shows another window"
    assert panel.figure is not None and any(command in n for n in panel.notes), panel.notes
