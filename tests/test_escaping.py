"""Text from outside (names in exports, paths, error texts) is shown as it is: never read as rich markup,
never written raw to the terminal when it holds control characters. Each case uses a copy of the real A100
export with one name changed."""

from __future__ import annotations

import html
import io
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.profilers.capture import save as save_run

pytestmark = pytest.mark.attack  # scripts/attack.sh runs and counts these

runner = CliRunner()
SAXPY_ID = 670  # StringIds row of the A100 fixture's demangled kernel name
TERMINAL_ATTACK = "\x1b]0;PWNED\x07\x1b[31mRED\x00"  # retitles the window, turns the text red; a NUL
SHOWN_ESCAPED = r"\x1b]0;PWNED\x07\x1b[31mRED\x00"
RAW = ("\x1b]0;", "\x07", "\x1b[31m", "\x00")
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # rich's own styling, when the output is a terminal


def renamed(src: Path, dst: Path, *, kernel: str | None = None, nvtx: str | None = None) -> Path:
    """A copy of the export with the saxpy kernel and/or the `saxpy` NVTX range renamed (bound parameters)."""
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    try:
        if kernel is not None:
            con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (kernel, SAXPY_ID))
        if nvtx is not None:
            con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'saxpy'", (nvtx,))
        con.commit()
    finally:
        con.close()
    return dst


def run(*args: str | Path, **env: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200", **env})


@pytest.mark.parametrize(
    "name",
    ["k[/x]", "attn[q] k", "[link=https://example.com/x]click here[/link]", "[bold]loud[/bold] [/]"],
)
def test_kernel_names_are_not_markup(a100_export: Path, tmp_path: Path, name: str) -> None:
    export = renamed(a100_export, tmp_path / "r.sqlite", kernel=name)
    for args in (
        ("kernels", export),
        ("launch", export, "--wide"),
        ("nvtx-gpu", export, "--kernels", "--wide"),
    ):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert name in result.stdout, result.stdout


def test_nvtx_range_names_are_not_markup(a100_export: Path, tmp_path: Path) -> None:
    export = renamed(a100_export, tmp_path / "r.sqlite", nvtx="k[/x] attn[q] k")
    for args in (("nvtx", export), ("nvtx", export, "--trace"), ("summary", export)):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert "k[/x] attn[q] k" in result.stdout


def test_no_hyperlink_even_on_a_terminal(a100_export: Path, tmp_path: Path) -> None:
    """With colours forced (as on a terminal) rich would turn [link=…] into an OSC 8 hyperlink."""
    name = "[link=https://example.com/x]click here[/link]"
    export = renamed(a100_export, tmp_path / "r.sqlite", kernel=name)
    result = run("kernels", export, FORCE_COLOR="1")
    assert result.exit_code == 0, result.output
    assert "\x1b[" in result.stdout  # it did style the output: a terminal
    assert "\x1b]8;" not in result.stdout
    assert name in ANSI.sub("", result.stdout)


def test_terminal_escapes_in_names_are_shown_not_obeyed(a100_export: Path, tmp_path: Path) -> None:
    name = f"{TERMINAL_ATTACK}saxpy"
    export = renamed(a100_export, tmp_path / "r.sqlite", kernel=name, nvtx=name)
    for args in (("kernels", export), ("nvtx", export), ("summary", export)):
        result = run(*args, FORCE_COLOR="1")
        assert result.exit_code == 0, result.output
        plain = ANSI.sub("", result.stdout)
        assert f"{SHOWN_ESCAPED}saxpy" in plain
        assert not any(raw in plain for raw in RAW), repr(plain)


def test_csv_and_json_keep_the_name_without_raw_control_characters(a100_export: Path, tmp_path: Path) -> None:
    name = f"{TERMINAL_ATTACK}saxpy\tk[/x]"
    export = renamed(a100_export, tmp_path / "r.sqlite", kernel=name)
    as_json = run("kernels", export, "--format", "json")
    assert not any(raw in as_json.stdout for raw in RAW)
    assert json.loads(as_json.stdout)[0]["Name"] == name  # exact, through JSON's \u001b escapes
    as_csv = run("kernels", export, "--format", "csv")
    assert not any(raw in as_csv.stdout for raw in RAW)
    assert pd.read_csv(io.StringIO(as_csv.stdout))["Name"].tolist() == [f"{SHOWN_ESCAPED}saxpy\tk[/x]"]
    summary_csv = run("summary", export, "--format", "csv")
    assert f"{SHOWN_ESCAPED}saxpy" in summary_csv.stdout
    assert not any(raw in summary_csv.stdout for raw in RAW)


def test_paths_in_errors_and_warnings_are_not_markup(cpu_export: Path, tmp_path: Path) -> None:
    missing = tmp_path / "gone[/x].sqlite"
    result = run("kernels", missing)
    assert result.exit_code != 0 and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and str(missing) in line
    odd = tmp_path / "cpu [/x] [bold]run[/bold]"
    odd.mkdir(parents=True)
    copy = shutil.copyfile(cpu_export, odd / "report.sqlite")
    summary = run("summary", copy)  # the CPU export has no kernels: a warning naming the path
    assert summary.exit_code == 0, summary.output
    assert "warning: skipped CUDA kernels" in summary.stderr and str(odd) in summary.stderr


def test_summary_says_which_tables_it_skipped(cpu_export: Path) -> None:
    as_json = json.loads(run("summary", cpu_export, "--format", "json").stdout)
    skipped = {s["table"]: s["reason"] for s in as_json["skipped"]}
    assert "no CUDA kernel data" in skipped["CUDA kernels (gpukernsum)"]
    assert set(skipped) >= {"CUDA API (cudaapisum)", "Launch latency (kernexecsum)"}
    assert "NVTX ranges (nvtxsum)" in as_json and "NVTX ranges (nvtxsum)" not in skipped
    as_csv = run("summary", cpu_export, "--format", "csv").stdout
    comments = [line for line in as_csv.splitlines() if line.startswith("# skipped ")]
    assert any(
        line.startswith("# skipped CUDA kernels (gpukernsum): no CUDA kernel data") for line in comments
    )
    assert len(comments) == len(skipped)


def test_show_prints_stored_text_as_is(tmp_db: str) -> None:
    """Paths and error texts stored with a run come back through `harness show` untouched."""
    done = run("run", "char", "--device", "cpu", "--steps", "1", "--warmup", "0", "--format", "json")
    assert done.exit_code == 0, done.output
    (run_id,) = [r["run_id"] for r in json.loads(run("runs", "--format", "json").stdout)]
    con = sqlite3.connect(tmp_db.removeprefix("sqlite:///"))
    con.execute(
        "UPDATE runs SET nsys_sqlite = ?, error = ? WHERE id = ?",
        ("p[/x]/attn[q] k.sqlite", f"died: {TERMINAL_ATTACK} k[/x]", run_id),
    )
    con.commit()
    con.close()
    shown = run("show", run_id, FORCE_COLOR="1")
    assert shown.exit_code == 0, shown.output
    plain = ANSI.sub("", shown.stdout)
    assert "p[/x]/attn[q] k.sqlite" in plain and f"died: {SHOWN_ESCAPED} k[/x]" in plain
    assert not any(raw in plain for raw in RAW)
    listed = run("runs", "--wide")
    assert listed.exit_code == 0 and run_id in listed.stdout


@pytest.mark.slow
@pytest.mark.elsewhere
def test_profile_dir_with_brackets(nsys_bin: str, tmp_db: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`run --nsys --profile-dir 'p[/x]'` used to save the run and then crash printing the file paths."""
    monkeypatch.chdir(tmp_path)
    args = ["run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--nsys", "--no-nsys-baseline"]
    result = run(*args, "--profile-dir", "p[/x]", HARNESS_NSYS=nsys_bin)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "p[/x]/" in result.stdout  # the note naming the report and the export
    (sqlite,) = (tmp_path / "p[/x]").glob("*.sqlite")
    assert sqlite.stat().st_size > 0
    (listed,) = json.loads(run("runs", "--format", "json").stdout)
    shown = run("show", listed["run_id"])
    assert shown.exit_code == 0 and "p[/x]" in shown.stdout


def test_visible_escapes() -> None:
    from harness.cli.terminal.output import visible

    assert visible("a\x1b[31mb\x07\x00\x9b\u202ec") == r"a\x1b[31mb\x07\x00\x9b\u202ec"
    assert visible("tab\there\nline") == r"tab\there\nline"
    assert visible("keep\nline", keep="\n") == "keep\nline"
    assert visible("αβγ — ok […]") == "αβγ — ok […]"  # other text is left alone


def test_a_failed_or_interrupted_run_is_said_as_is(capsys: pytest.CaptureFixture[str]) -> None:
    """err() prints plain text: a message escaped for markup first would show its backslashes."""
    import typer

    from harness.cli.render import finish
    from harness.core.records import RunConfig, RunResult
    from harness.store.results import UnsavedRun

    stopped = RunResult(
        run_id="tiny-[x]", config=RunConfig(model="tiny"), status="interrupted", error="interrupted [SIGTERM]"
    )
    kept = "/tmp/[bold]unsaved.json"  # another run's, refused by the database
    refused = UnsavedRun(f"not saved: run kept in {kept}", Path(kept), run_id="tiny-other", reason="locked")
    with pytest.raises(typer.Exit):
        finish([refused], [stopped])
    said = capsys.readouterr().err
    assert "error: not saved: run kept in /tmp/[bold]unsaved.json" in said
    assert "error: run tiny-[x] interrupted [SIGTERM]; stored as interrupted" in said
    assert "\\[" not in said


def test_markdown_cells_show_names_as_text_not_markdown(a100_export: Path, tmp_path: Path) -> None:
    """A pull request renders the table: a kernel's `<unnamed>` would be taken for an HTML tag and dropped,
    `__init__` made bold, a backtick start code, `<!--` hide the rest of the page."""
    name = "void at::<unnamed>::k<__init__>(`x`, *p) [y] <!-- & ~z~ \\\\"
    a = renamed(a100_export, tmp_path / "a.sqlite", kernel=name)
    result = run("diff", a100_export, a, "--format", "markdown", "--no-cache")
    assert result.exit_code == 0, result.output
    shown = r"void at::\<unnamed\>::k\<\_\_init\_\_\>(\`x\`, \*p) \[y\] \<!-- \& \~z\~ \\\\"
    assert any(line.startswith(f"| {shown} |") for line in result.stdout.splitlines()), result.stdout
    assert f"- top regression: {shown} +" in result.stdout
    assert "- B = " + str(a).replace("_", r"\_") in result.stdout


def test_run_and_model_names_are_text_on_the_runs_dashboard(tmp_path: Path) -> None:
    """A model (`harness profile --name`, a program's file name) and so a run id holding `<b>`, `<img …>` or
    an entity: plotly reads tags and entities in every label, legend and hover, so the runs' panels drew
    them as markup (bold, an image, `&`) where the export's panels escape their names. Every text a trace
    carries is escaped; the compile panel's own line break is kept."""
    from dashboard_data import result

    from harness.experiments import pages
    from harness.store.results import ResultsStore

    name = "<img src=x onerror=alert(1)>&amp;<b>m</b>"  # ends in markup: a run's short id holds some
    store = ResultsStore(str(tmp_path / "results.sqlite"))
    for run_id, compiled in ((f"{name}-eager", False), (f"{name}-compiled", True)):
        run = result(run_id, "tiny", "fp32", [(1_000_000, 2_000_000, 500_000)] * 2)
        run.config.model, run.config.compile = name, compiled
        save_run(store, run)
    page, _, _ = pages.runs_dashboard(store, tmp_path / "dash.html")
    drawn = {p.key: p.figure for p in page.drawn}
    assert {"phases", "steps", "throughput", "compare", "compile"} <= set(drawn)

    def texts(values: object) -> list[str]:
        if isinstance(values, str):
            return [values]
        if isinstance(values, list | tuple):
            return [t for v in values for t in texts(v)]
        return texts(values.tolist()) if hasattr(values, "tolist") else []

    shown = html.escape(name, quote=False)
    for key, fig in drawn.items():
        carried = [
            t for trace in fig.data for k in ("x", "y", "customdata", "name", "text") for t in texts(trace[k])
        ]
        carried += [t for axis in fig.select_xaxes() for t in texts(axis.categoryarray)]
        assert key == "compare" or any(shown in t for t in carried), key  # compare: short ids
        assert not any(markup in t for t in carried for markup in ("<img", "<b>", "</b>")), key
        templates = [trace.hovertemplate or "" for trace in fig.data]
        assert not any("<img" in t or "</b>-" in t for t in templates), key
    assert any("m&lt;/b&gt;-eager" in t for t in texts(drawn["compare"].data[0].name))
    assert any("<br>" in t for t in drawn["compile"].data[0].x)


NOT_UTF8 = "run\udcff.sqlite"  # the bytes `run\xff.sqlite`: a file name need not be UTF-8


@pytest.mark.parametrize("command", ["kernels", "kernels --no-cache", "timeline", "dashboard", "diff"])
def test_an_export_whose_name_is_not_utf8_is_read(
    a100_export: Path, tmp_path: Path, cache_dir: Path, command: str
) -> None:
    """Every command ended in a UnicodeEncodeError traceback: the cache's key, SQLite's URI, the page's size
    and the dashboard's table of panels each took the name for UTF-8 text. The name is shown as the
    terminal shows it, its byte as an escape; the cache lists it."""
    export = shutil.copyfile(a100_export, tmp_path / NOT_UTF8)
    verb, *options = command.split()
    options += {
        "timeline": ["-o", str(tmp_path / "t.json")],
        "dashboard": ["-o", str(tmp_path / "d.html")],
        "diff": [str(a100_export), "--html", str(tmp_path / "diff.html")],
    }.get(verb, [])
    result = run(verb, export, *options)
    assert result.exit_code == 0 and result.exception is None, result.output
    if verb == "dashboard":
        assert "Top kernels by total GPU time: run\\udcff.sqlite" in result.stdout
    if verb == "timeline":
        assert json.loads((tmp_path / "t.json").read_text())["otherData"]["source"] == NOT_UTF8
    listed = run("cache", "-f", "csv")
    assert listed.exit_code == 0 and listed.exception is None, listed.output
    assert (str(tmp_path / "run\\udcff.sqlite") in listed.stdout) == ("--no-cache" not in options)
